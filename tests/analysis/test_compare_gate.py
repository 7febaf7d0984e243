"""`evalfleet compare --gate` for CI (#55, must-show 3), run from a shell script as CI would: exit 1 for the noisy
expert against the expert (worse on a task by the paired test, Holm over the tasks), 0 for the expert against a
second Run of itself; the verdict printed, naming the policy and the task, and kept in the JSON."""

from __future__ import annotations

import json
import subprocess
import sys

import evalfleet
import yaml
from evalfleet_testkit import metaworld_run

NOISE = {"robot.action_noise": {"enabled": True, "low": 0.4, "high": 0.8}}


def test_the_gate_fails_a_regression_and_passes_the_same_policy(tmp_path) -> None:
    runs = {}
    for task in ("push-v3", "pick-place-v3"):
        short = task.split("-")[0]
        runs[f"{short}_expert"] = metaworld_run(task, episodes=16, policy_name="expert")
        runs[f"{short}_again"] = metaworld_run(task, episodes=16, policy_name="expert_again")
        runs[f"{short}_noisy"] = metaworld_run(task, episodes=16, policy_name="noisy", variations=NOISE)
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({"name": "gate", "runs": runs}))
    out = tmp_path / "out"
    result = evalfleet.run(exp, output=out, workers=2, progress=False, log=lambda _: None)
    verdict = result.gate("expert")  # the API's gate: the same decision as the command's
    assert not verdict["passed"] and {w["policy"] for w in verdict["worse"]} == {"noisy"}
    script = tmp_path / "gate.sh"
    script.write_text(f"""#!/usr/bin/env bash
set -u
evalfleet() {{ "{sys.executable}" -m evalfleet.cli "$@"; }}
evalfleet compare "$1" --baseline expert --policies noisy --gate -o "$2/noisy.json"; echo "noisy exit $?"
evalfleet compare "$1" --baseline expert --policies expert_again --gate -o "$2/again.json"; echo "again exit $?"
""")
    proc = subprocess.run(["bash", str(script), str(out), str(tmp_path)], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert "noisy exit 1" in proc.stdout and "again exit 0" in proc.stdout, proc.stdout + proc.stderr
    assert "gate: FAILED: noisy is worse than expert on" in proc.stdout
    assert "gate: passed: no policy is worse than expert" in proc.stdout
    noisy = json.loads((tmp_path / "noisy.json").read_text())["gate"]
    again = json.loads((tmp_path / "again.json").read_text())["gate"]
    assert not noisy["passed"] and {w["policy"] for w in noisy["worse"]} == {"noisy"}
    assert all(w["p_holm"] < 0.05 and w["policy_rate"] < w["baseline_rate"] for w in noisy["worse"])
    assert again["passed"] and again["worse"] == [] and again["family_size"] == 2


def test_a_sequentially_stopped_experiment_is_gated_by_its_own_decisions(tmp_path) -> None:
    """With `stopping: {compare: {baseline: expert}}` the noisy expert's Run stops as soon as the sequential test
    says worse, long before its cap; the gate then takes that decision (a fixed-sample test of data stopped on a
    difference would overstate it), from the command and from the API alike."""
    runs = {"push_expert": metaworld_run("push-v3", episodes=100, policy_name="expert"),
            "push_noisy": metaworld_run("push-v3", episodes=100, policy_name="noisy", variations=NOISE)}
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({"name": "gate_sequential", "runs": runs,
                                   "stopping": {"wave": 10, "compare": {"baseline": "expert"}}}))
    out = tmp_path / "out"
    result = evalfleet.run(exp, output=out, workers=2, progress=False, log=lambda _: None)
    (decision,) = result.raw["comparisons"]
    assert decision["verdict"] == "worse" and decision["stopped_at"] < 100
    verdict = result.gate("expert")
    assert verdict["sequential"] and not verdict["passed"]
    assert [(w["policy"], w["stopped_at"]) for w in verdict["worse"]] == [("noisy", decision["stopped_at"])]
    proc = subprocess.run([sys.executable, "-m", "evalfleet.cli", "compare", str(out), "--baseline", "expert",
                           "--gate", "-o", str(tmp_path / "c.json")], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "gate: FAILED: noisy is worse than expert on push-v3" in proc.stdout and "(sequential)" in proc.stdout
