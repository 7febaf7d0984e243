"""`evalfleet verify` (#55): the quickstart replays alike (100%, exit 0); a policy that draws unseeded noise gets a
measured agreement below 100% (exit 1), each difference listed, and the output's trust check and report say so."""

from __future__ import annotations

import json

import yaml
from evalfleet_testkit import ROOT, run_evalfleet


def test_the_quickstart_replays_alike(tmp_path) -> None:
    out = tmp_path / "out"
    done = run_evalfleet("run", str(ROOT / "examples" / "quickstart.yaml"), "shared.rollout_limit.num_episodes=4",
                         "--output", str(out), "--workers", "2")
    assert done.returncode == 0, done.stderr
    verified = run_evalfleet("verify", str(out), "--episodes", "3", "--workers", "2")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "agreement: 12/12 episodes (100.0%)" in verified.stdout
    doc = json.loads((out / "verify.json").read_text())
    assert doc["agreement"] == 1.0 and all(r["rate"] == 1.0 for r in doc["runs"].values())
    trust = {c["check"]: c for c in json.loads((out / "experiment_result.json").read_text())["trust"]}
    assert trust["determinism"]["outcome"] == "passed"
    assert 'data-check="determinism" data-outcome="passed"' in (out / "index.html").read_text()


def test_unseeded_noise_gets_a_measured_rate_below_100_percent(tmp_path) -> None:
    exp = tmp_path / "exp.yaml"
    run = {"environment": {"type": "metaworld", "task": "reach-v3", "max_steps": 60},
           "rollout_limit": {"num_episodes": 4}}
    exp.write_text(yaml.safe_dump({"name": "noisy", "runs": {
        "reach_noisy": {**run, "policy": {"type": "test_unseeded_noisy_expert"}},
        "reach_expert": {**run, "policy": {"type": "metaworld_expert"}}}}))
    out = tmp_path / "out"
    done = run_evalfleet("run", str(exp), "--output", str(out), "--workers", "2")
    assert done.returncode == 0, done.stderr
    verified = run_evalfleet("verify", str(out), "--episodes", "4")
    assert verified.returncode == 1, verified.stdout + verified.stderr
    doc = json.loads((out / "verify.json").read_text())
    noisy, expert = doc["runs"]["reach_noisy"], doc["runs"]["reach_expert"]
    assert expert["rate"] == 1.0 and noisy["compared"] == 4 and noisy["rate"] < 1.0
    assert all("final_state" in d for d in noisy["differences"])  # the noise leaves the arm elsewhere
    assert f"reach_noisy: {noisy['agree']}/4 episodes agree" in verified.stdout
    trust = {c["check"]: c for c in json.loads((out / "experiment_result.json").read_text())["trust"]}
    assert trust["determinism"]["outcome"] == "flagged" and f"reach_noisy {noisy['agree']}/4" in \
        trust["determinism"]["detail"]
    # a collect that rebuilds experiment_result.json keeps the verification
    again = run_evalfleet("collect", str(out), "--output", str(out))
    assert again.returncode == 0, again.stderr
    trust = {c["check"]: c for c in json.loads((out / "experiment_result.json").read_text())["trust"]}
    assert trust["determinism"]["outcome"] == "flagged"
