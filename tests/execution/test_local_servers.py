"""Policy servers in the local backend: started for the Runs that need them, wired, logged, stopped;
a server killed mid-run is restarted and no episode is lost or counted as a failure."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from evalfleet_testkit import evalfleet_cmd, metaworld_run, plugin_env, results_by_episode, run_evalfleet

pytestmark = pytest.mark.slow


def _server_pids(marker: Path) -> list[int]:
    """Server processes of this test (found by their command line, which names `marker`)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"serve" in cmd and any(str(marker).encode() in arg for arg in cmd) and state != "Z":
            pids.append(int(proc.name))
    return pids


def test_killing_the_policy_server_midway_loses_no_episode(write_experiment, tmp_path):
    # The served expert finishes one episode, then waits in the next for the test (evalfleet_test_plugins.GatedExpert):
    # the kill always lands while served episodes are pending, however fast the machine.
    gate = tmp_path / "gate"
    gate.mkdir()
    served = {"type": "openpi_remote", "serve": {"type": "test_gated_expert", "gate": str(gate), "after_episodes": 1},
              "connect_timeout_s": 60}
    path = write_experiment({
        "served": metaworld_run("reach-v3", episodes=10, policy=served),
        "local": metaworld_run("reach-v3", episodes=10),
    })
    out = tmp_path / "o"
    proc = subprocess.Popen(evalfleet_cmd("run", str(path), "--output", str(out), "--workers", "2", "--shard-size", "5",
                                          "--no-progress"), env=plugin_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 120
    while not any(p.read_text().strip() for p in out.glob("served/parts/*.jsonl")) or not list(gate.glob("*.waiting")):
        assert time.monotonic() < deadline and proc.poll() is None, "no served episode recorded"
        time.sleep(0.1)
    pids = _server_pids(gate)
    assert len(pids) == 1
    os.kill(pids[0], signal.SIGKILL)
    (gate / "release").touch()  # the restarted server passes
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert "died; restarting" in stderr

    results = results_by_episode(out)
    served_final = {ep: r for (run, ep), r in results.items() if run == "served"}
    local_final = {ep: r for (run, ep), r in results.items() if run == "local"}
    assert sorted(served_final) == list(range(10))
    # Same seeds, same expert: the served Run's outcomes equal the local Run's, episode by episode.
    assert {ep: r[1:4] for ep, r in served_final.items()} == {ep: r[1:4] for ep, r in local_final.items()}
    assert all(r[1] == "success" for r in served_final.values())
    log = (out / "served" / "server.log").read_text()
    assert log.count("=== ") >= 2  # started, then restarted after the kill
    assert _server_pids(gate) == []  # stopped at the end
    result = json.loads((out / "experiment_result.json").read_text())
    assert result["runs"]["served"]["status"] == "completed"


def test_a_served_policy_that_is_not_installed_is_refused_before_anything_is_written(write_experiment, tmp_path):
    path = write_experiment({"served": metaworld_run("reach-v3", episodes=2, policy={
        "type": "openpi_remote", "serve": {"type": "metaworld_expret"}})})
    out = tmp_path / "o"
    proc = run_evalfleet("run", str(path), "--output", str(out), "--no-progress")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "runs.served.policy.serve.type" in proc.stderr and "metaworld_expert" in proc.stderr
    assert not out.exists()


def test_a_server_that_cannot_start_is_a_clear_error(write_experiment, tmp_path):
    # The served policy exists but cannot be built for this task: the server exits at start.
    path = write_experiment({"served": {**metaworld_run("reach-v3", episodes=2, policy={
        "type": "openpi_remote", "serve": {"type": "metaworld_expert", "bogus": 1}})}})
    out = tmp_path / "o"
    proc = run_evalfleet("run", str(path), "--output", str(out), "--no-progress")
    assert proc.returncode == 2
    assert "server.log" in proc.stderr and "did not become healthy" in proc.stderr


def test_per_policy_sharing_runs_one_server_for_runs_with_equal_server_settings(write_experiment, tmp_path):
    served = {"type": "openpi_remote", "serve": {"type": "metaworld_expert"}}
    path = write_experiment({
        "a": metaworld_run("reach-v3", episodes=3, policy=served),
        "b": metaworld_run("reach-v3", episodes=3, policy=served),
        "c": metaworld_run("reach-v3", episodes=3, policy={**served, "batching": {"max_batch": 2}}),
    }, server_sharing="per_policy")
    plan = json.loads(run_evalfleet("plan", str(path), "--json").stdout)
    assert sorted(sorted(s["runs"]) for s in plan["servers"]) == [["a", "b"], ["c"]]
    per_run = json.loads(run_evalfleet("plan", str(path), "server_sharing=per_run", "--json").stdout)
    assert len(per_run["servers"]) == 3
    out = tmp_path / "o"
    proc = run_evalfleet("run", str(path), "--output", str(out), "--workers", "2", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.parent.name for p in out.glob("*/server.log")) == ["a", "c"]
    assert all(r[1] == "success" for r in results_by_episode(out).values())
