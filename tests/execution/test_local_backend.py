"""`evalfleet run` with real processes: worker counts, interruption and resume, runner crashes and
hangs under the watchdog, a Run that never makes progress."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from evalfleet_testkit import (evalfleet_cmd, metaworld_run, plugin_env, results_by_episode, run_evalfleet,
                               runners_at_gate, wait_for)

pytestmark = pytest.mark.slow

EXPERT = {"type": "metaworld_expert"}


def _experiment(write_experiment, policy=EXPERT, episodes=8):
    return write_experiment({
        "reach": metaworld_run("reach-v3", episodes=episodes, policy=policy),
        "push_noisy": metaworld_run("push-v3", episodes=episodes, policy=policy, variations={
            "robot.action_noise": {"enabled": True, "distribution": "uniform", "low": 0.0, "high": 0.6}}),
    })


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run of the expert experiment, on one worker."""
    tmp = tmp_path_factory.mktemp("reference")
    import yaml

    path = tmp / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "test", "seed": 0, "runs": {
        "reach": metaworld_run("reach-v3", episodes=8, policy=EXPERT),
        "push_noisy": metaworld_run("push-v3", episodes=8, policy=EXPERT, variations={
            "robot.action_noise": {"enabled": True, "distribution": "uniform", "low": 0.0, "high": 0.6}}),
    }}))
    out = tmp / "out"
    proc = run_evalfleet("run", str(path), "--output", str(out), "--workers", "1", "--shard-size", "100",
                         "--no-progress")
    assert proc.returncode == 0, proc.stderr
    return path, results_by_episode(out)


def _gated(gate: Path, after_episodes: int = 2) -> dict:
    """The expert, held at `gate` once each runner process has started `after_episodes` episodes (see
    evalfleet_test_plugins.GatedExpert): what a test interrupts there is still pending, on any machine."""
    gate.mkdir()
    return {"type": "test_gated_expert", "gate": str(gate), "after_episodes": after_episodes}


def _records_so_far(out: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in out.glob("*/parts/*.jsonl"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_worker_count_and_shard_size_do_not_change_results(reference, tmp_path):
    path, expected = reference
    out = tmp_path / "two"
    proc = run_evalfleet("run", str(path), "--output", str(out), "--workers", "2", "--shard-size", "3", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert results_by_episode(out) == expected
    result = json.loads((out / "experiment_result.json").read_text())
    for name in ("reach", "push_noisy"):
        run = result["runs"][name]
        assert run["status"] == "completed" and run["decided"] == 8
        assert 0 <= run["ci95"][0] <= run["success_rate"] <= run["ci95"][1] <= 1
    assert result["runs"]["reach"]["success_rate"] == 1.0
    assert (out / "index.html").exists()
    # The run's plot (tasks × policies with intervals) is a real, non-empty image.
    from PIL import Image  # matplotlib's own dependency

    with Image.open(out / "plots" / "success_rates.png") as image:
        assert image.size[0] >= 600 and image.size[1] >= 400
        assert len(set(image.convert("L").getdata())) > 10


def test_sigkill_of_evalfleet_run_then_resume_completes_identically(reference, write_experiment, tmp_path):
    _, expected = reference
    gate = tmp_path / "gate"
    path = _experiment(write_experiment, policy=_gated(gate))  # the reference's Runs, held at the gate
    out = tmp_path / "killed"
    proc = subprocess.Popen(evalfleet_cmd("run", str(path), "--output", str(out), "--workers", "2", "--shard-size", "3",
                                          "--no-progress"), env=plugin_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    pids = wait_for(lambda: runners_at_gate(gate, 2), what="both workers at the gate")
    assert _records_so_far(out) >= 3
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _records_so_far(out) < 16
    # Orphaned runners notice their supervisor is gone and stop on their own (once their policy call returns).
    (gate / "release").touch()
    wait_for(lambda: not any(_alive(p) for p in pids), timeout=30, what="orphaned runners to stop")
    done = run_evalfleet("run", "--resume", "--output", str(out), "--workers", "2", "--no-progress")
    assert done.returncode == 0, done.stderr
    assert results_by_episode(out) == expected


def test_resume_refuses_a_changed_experiment_and_a_fresh_run_refuses_a_used_folder(reference, tmp_path):
    path, _ = reference
    out = tmp_path / "o"
    out.mkdir()
    (out / "experiment.yaml").write_text("name: other\nruns: {}\n")
    proc = run_evalfleet("run", str(path), "--output", str(out), "--resume", "--no-progress")
    assert proc.returncode == 2 and "differs" in proc.stderr
    proc = run_evalfleet("run", str(path), "--output", str(out), "--no-progress")
    assert proc.returncode == 2 and "--resume" in proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["experiment.yaml"]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP])
def test_a_killed_or_hung_runner_is_relaunched_and_loses_nothing(reference, write_experiment, tmp_path, sig):
    _, expected = reference
    gate = tmp_path / "gate"
    path = _experiment(write_experiment, policy=_gated(gate, after_episodes=1))  # the reference's Runs
    out = tmp_path / "o"
    # The stall timeout is what ends the SIGSTOPped runner; the healthy attempts must never miss it, also while
    # a loaded machine builds the second Run's environment (no step then), so it is not cut close.
    proc = subprocess.Popen(evalfleet_cmd("run", str(path), "--output", str(out), "--workers", "1", "--shard-size", "4",
                                          "--no-progress", "--stall-timeout", "10", "--max-restarts", "2"),
                            env=plugin_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True)
    (pid,) = wait_for(lambda: runners_at_gate(gate, 1), what="the runner waiting in its second episode")
    os.kill(pid, sig)
    (gate / "release").touch()  # the relaunched runner passes
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert results_by_episode(out) == expected
    status = json.loads((out / ".evalfleet" / "worker-0.status.json").read_text())
    outcomes = [a["outcome"] for a in status["attempts"]]
    assert status["state"] == "completed" and len(outcomes) == 2
    assert outcomes[0] == ("stalled" if sig == signal.SIGSTOP else "signal")
    log = (out / ".evalfleet" / "worker-0.log").read_text()  # the forked first attempt, then a fresh process
    assert "attempt 1: forked pid" in log and "attempt 2: started pid" in log
    # The episode in flight when the runner died or stalled has an error record saying so at attempt 1 (written
    # by the relaunched runner), and was played again as attempt 2: a success.
    records = [json.loads(line) for part in sorted(out.glob("*/parts/*.jsonl"))
               for line in part.read_text().splitlines()]
    lost = [(r["run"], r["episode"], r["attempt"], r["failure_code"]) for r in records if r["status"] == "error"]
    assert lost == [("reach", 1, 1, "stall" if sig == signal.SIGSTOP else "runner_crash")], lost
    merged = [json.loads(line) for line in (out / "reach" / "episode_results.jsonl").read_text().splitlines()]
    assert [(r["status"], r["attempt"]) for r in merged if r["episode"] == 1] == [("success", 2)]


def test_a_run_that_never_progresses_is_marked_failed_and_the_others_finish(write_experiment, tmp_path):
    path = write_experiment({
        "hangs": metaworld_run("reach-v3", episodes=3, policy={"type": "test_hanging"}),
        "fine": metaworld_run("reach-v3", episodes=3),
    })
    out = tmp_path / "o"
    # "hangs" is built, then never steps: the stall timeout ends it, and the startup grace is the local default,
    # which no healthy worker misses however loaded the machine. The healthy worker only has to step within
    # the stall timeout, a few thousand times its step time (and a stalled attempt of it would be relaunched).
    proc = run_evalfleet("run", str(path), "--output", str(out), "--workers", "2", "--shard-size", "10",
                         "--no-progress", "--stall-timeout", "5", "--startup-timeout", "300", "--max-restarts", "1")
    assert proc.returncode == 1
    result = json.loads((out / "experiment_result.json").read_text())
    assert result["runs"]["fine"]["status"] == "completed" and result["runs"]["fine"]["success_rate"] == 1.0
    hangs = result["runs"]["hangs"]
    assert hangs["status"] == "failed" and "gave up" in hangs["reason"]
    assert hangs["success_rate"] is None
    assert "hangs" in proc.stderr and "failed" in proc.stderr


def test_ctrl_c_stops_cleanly_and_resume_completes(reference, write_experiment, tmp_path):
    _, expected = reference
    gate = tmp_path / "gate"
    path = _experiment(write_experiment, policy=_gated(gate))  # the reference's Runs, held at the gate
    out = tmp_path / "interrupted"
    proc = subprocess.Popen(evalfleet_cmd("run", str(path), "--output", str(out), "--workers", "2", "--shard-size", "3",
                                          "--no-progress"), env=plugin_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    # Each worker has finished 2 episodes and waits in its 3rd: Ctrl-C lands while work is pending.
    pids = wait_for(lambda: runners_at_gate(gate, 2), what="both workers at the gate")
    assert _records_so_far(out) >= 3
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "--resume" in stderr
    assert not any(_alive(p) for p in pids)  # the workers were stopped, not orphaned
    assert _records_so_far(out) < 16
    (gate / "release").touch()  # the resumed run (same Experiment, same gate) passes it
    done = run_evalfleet("run", "--resume", "--output", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert results_by_episode(out) == expected
