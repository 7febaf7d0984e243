"""A sequential Experiment end to end (issue #25): Meta-World's expert against the expert with strong action
noise on push-v3, decided before the cap; identical decisions and records with 1 and 2 workers, on Ray, and after
SIGKILL of `evalfleet run` + --resume. One small Experiment, reused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import evalfleet
from evalfleet_sequential import EXPERIMENT, SERVED, decisions, server_starts
from evalfleet_testkit import evalfleet_cmd, plugin_env, results_by_episode

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("seq") / "sequential.yaml"
    path.write_text(EXPERIMENT)
    return path


@pytest.fixture(scope="module")
def reference(experiment: Path) -> Path:
    out = experiment.parent / "one_worker"
    result = evalfleet.run(experiment, output=out, workers=1, progress=False)
    assert result.ok
    return out


def test_decided_before_the_cap_with_one_worker(reference: Path) -> None:
    comparisons, stopping = decisions(reference)
    assert [(c["policy"], c["verdict"]) for c in comparisons] == [("noisy", "worse")]
    used = comparisons[0]["stopped_at"]
    assert used < 30 and comparisons[0]["interval"][1] < 0
    assert {n: s["stopped_at"] for n, s in stopping.items()} == {"expert": used, "noisy": used}
    assert len(results_by_episode(reference)) == 2 * used  # nothing ran past the deciding look
    status = json.loads((reference / "noisy" / "run_status.json").read_text())
    assert (status["state"], status["stopped_at"], status["reason"]) == ("completed", used, "1 comparison decided")
    saved = json.loads((reference / "experiment_result.json").read_text())["stopping_savings"]  # issue #57
    assert saved["episodes"] == {"used": 2 * used, "fixed_n": 60, "saved": 60 - 2 * used,
                                 "ratio": round(2 * used / 60, 3)}
    assert 0 < saved["runner_seconds"]["used"] < saved["runner_seconds"]["fixed_n_estimate"]
    assert "Against the fixed-N plan: " + f"{2 * used} of 60 episodes" in (reference / "index.html").read_text()


def test_two_workers_give_the_same_decisions_and_records(experiment: Path, reference: Path) -> None:
    out = experiment.parent / "two_workers"
    result = evalfleet.run(experiment, output=out, workers=2, shard_size=2, progress=False)
    assert [(c.policy, c.verdict) for c in result.comparisons] == [("noisy", "worse")]
    assert decisions(out) == decisions(reference)
    assert results_by_episode(out) == results_by_episode(reference)


def test_ray_gives_the_same_decisions_and_records(experiment: Path, reference: Path) -> None:
    pytest.importorskip("ray")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    out = experiment.parent / "ray"
    result = evalfleet.run(experiment, output=out, backend="ray", workers=2, progress=False)
    assert result.ok
    assert decisions(out) == decisions(reference)
    assert results_by_episode(out) == results_by_episode(reference)


def test_sigkill_then_resume_gives_the_same_decisions_and_records(experiment: Path, reference: Path) -> None:
    out = experiment.parent / "killed"
    proc = subprocess.Popen(evalfleet_cmd("run", str(experiment), "--output", str(out), "--workers", "2",
                                          "--shard-size", "2", "--no-progress"),
                            env=plugin_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        while proc.poll() is None and not any(p.read_text().strip() for p in out.glob("*/parts/*.jsonl")):
            time.sleep(0.05)  # waits for a record, whatever the machine's speed
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the run and its runners, at once
        proc.wait()
    assert proc.returncode == -signal.SIGKILL  # killed mid-run, not finished
    resumed = subprocess.run(evalfleet_cmd("run", str(experiment), "--output", str(out), "--resume", "--workers", "2",
                                           "--no-progress"), env=plugin_env(), stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert "noisy vs expert: worse" in resumed.stdout + resumed.stderr
    assert decisions(out) == decisions(reference)
    assert results_by_episode(out) == results_by_episode(reference)


# The served variant: on Ray its one server starts once and serves every wave, as the local backend's does.
@pytest.fixture(scope="module")
def served_experiment(experiment: Path) -> Path:
    path = experiment.parent / "served.yaml"
    path.write_text(SERVED)
    return path


@pytest.fixture(scope="module")
def served_local(served_experiment: Path) -> Path:
    out = served_experiment.parent / "served_local"
    assert evalfleet.run(served_experiment, output=out, workers=2, progress=False).ok
    assert server_starts(out) == 1
    return out


def test_ray_keeps_a_served_policys_server_across_waves(served_experiment: Path, served_local: Path) -> None:
    pytest.importorskip("ray")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    out = served_experiment.parent / "served_ray"
    result = evalfleet.run(served_experiment, output=out, backend="ray", workers=2, progress=False)
    assert result.ok
    comparisons, _ = decisions(out)
    assert [(c["policy"], c["verdict"]) for c in comparisons] == [("noisy", "worse")]
    waves = comparisons[0]["stopped_at"] // 5
    assert waves >= 2, "decided in the first wave: no later wave reached the server"
    assert decisions(out) == decisions(served_local)
    assert results_by_episode(out) == results_by_episode(served_local)
    assert server_starts(out) == 1  # one start for all `waves` waves (before issue #25's fix: one per wave)
    assert not (out / "noisy" / "server.log").exists()  # the shared server's log lies beside its first Run's


def test_ray_servers_that_do_not_fit_at_once_take_turns(served_experiment: Path, served_local: Path) -> None:
    """One server per Run (server + runner bundle: 2 CPUs each, a 2-CPU instance fits one group at a time): a kept
    server never blocks a wave; it is stopped while the other's group waits, and the next wave starts it again.
    So: no wave waits forever, the same decisions and records, and at most one start per wave after the first."""
    pytest.importorskip("ray")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    per_run = served_experiment.parent / "served_per_run.yaml"
    per_run.write_text(SERVED.replace("server_sharing: per_policy\n", ""))
    out = served_experiment.parent / "served_per_run_ray"
    assert evalfleet.run(per_run, output=out, backend="ray", workers=2, progress=False).ok
    assert decisions(out) == decisions(served_local)
    assert results_by_episode(out) == results_by_episode(served_local)
    waves = decisions(out)[0][0]["stopped_at"] // 5
    starts = server_starts(out, "expert") + server_starts(out, "noisy")
    assert waves >= 2 and starts <= waves + 1  # before issue #25's fix: 2 per wave
