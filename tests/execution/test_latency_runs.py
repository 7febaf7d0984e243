"""`evalfleet run` of simulated-latency Runs with real processes (issue #28): the same records on 1 or 2
workers, with `num_envs` 1 or 2, and after a SIGKILL of `evalfleet run` and `--resume`."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from evalfleet_testkit import (evalfleet_cmd, metaworld_run, plugin_env, process_gone, run_evalfleet,
                               runners_at_gate, wait_for)

pytestmark = pytest.mark.slow

SHORT = {"max_steps": 150}
STABLE = ("seed", "status", "success", "episode_length", "variations", "timing")


def _runs(policy: dict) -> dict:
    chunked = {**policy, "chunk_size": 8}
    return {
        "push_fixed": {**metaworld_run("push-v3", episodes=6, policy=chunked,
                                       environment={"type": "metaworld", "task": "push-v3", **SHORT}),
                       "timing": {"mode": "simulated", "latency": {"fixed_ms": 50}, "late_action": "zero"}},
        "reach_varied": {**metaworld_run("reach-v3", episodes=6, policy=chunked,
                                         environment={"type": "metaworld", "task": "reach-v3", **SHORT}),
                         "timing": {"mode": "simulated"},
                         "variations": {"policy.latency_ms": {"enabled": True, "distribution": "uniform",
                                                              "low": 0, "high": 300}}},
    }


def _records(out: Path) -> dict:
    found = {}
    for path in sorted(out.glob("*/episode_results.jsonl")):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            assert (r["run"], r["episode"]) not in found, f"duplicate episode in {path}"
            found[(r["run"], r["episode"])] = {k: r.get(k) for k in STABLE}
    return found


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("latency_reference")
    path = tmp / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "latency", "seed": 0, "runs": _runs({"type": "metaworld_expert"})}))
    out = tmp / "out"
    proc = run_evalfleet("run", str(path), "--output", str(out), "--workers", "1", "--shard-size", "100",
                         "--no-progress")
    assert proc.returncode == 0, proc.stderr
    records = _records(out)
    assert len(records) == 12 and all(r["timing"]["mode"] == "simulated" for r in records.values())
    return path, records


def test_workers_and_num_envs_do_not_change_simulated_latency_records(reference, tmp_path):
    path, expected = reference
    out = tmp_path / "two"
    proc = run_evalfleet("run", str(path), "runs.push_fixed.environment_builder.num_envs=2",
                         "runs.reach_varied.environment_builder.num_envs=2", "--output", str(out), "--workers", "2",
                         "--shard-size", "2", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert _records(out) == expected


def test_sigkill_then_resume_gives_the_same_simulated_latency_records(reference, write_experiment, tmp_path):
    from test_local_backend import _records_so_far

    _, expected = reference
    gate = tmp_path / "gate"
    gate.mkdir()
    path = write_experiment(_runs({"type": "test_gated_expert", "gate": str(gate), "after_episodes": 2}))
    out = tmp_path / "killed"
    proc = subprocess.Popen(evalfleet_cmd("run", str(path), "--output", str(out), "--workers", "2", "--shard-size", "3",
                                          "--no-progress"), env=plugin_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    pids = wait_for(lambda: runners_at_gate(gate, 2), what="both workers at the gate")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert 0 < _records_so_far(out) < 12
    (gate / "release").touch()
    assert all(process_gone(p, timeout=30) for p in pids), "orphaned runners still running"
    done = run_evalfleet("run", "--resume", "--output", str(out), "--workers", "2", "--no-progress")
    assert done.returncode == 0, done.stderr
    assert _records(out) == expected


def test_a_served_chunked_policy_under_simulated_latency_gives_the_local_records(reference, tmp_path):
    """openpi chunks reach the latency model as the local policy's do: the served expert (its chunks over the
    websocket) gives the local Run's records, timing included."""
    _, expected = reference
    run = _runs({"type": "metaworld_expert"})["push_fixed"]
    run["policy"] = {"type": "openpi_remote", "serve": {"type": "metaworld_expert", "chunk_size": 8}}
    path = tmp_path / "served.yaml"
    path.write_text(yaml.safe_dump({"name": "latency", "seed": 0, "runs": {"push_fixed": run}}))
    out = tmp_path / "served"
    proc = run_evalfleet("run", str(path), "--output", str(out), "--workers", "1", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    served = _records(out)
    assert served == {k: v for k, v in expected.items() if k[0] == "push_fixed"}
    assert all(r["timing"]["held_steps"] > 0 for r in served.values())
