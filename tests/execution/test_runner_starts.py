"""Runners start once per worker for the whole Experiment (issue #57, must show 2; Slurm's in
tests/execution/slurm/test_slurm_sequential.py): a sequential Experiment of four looks, and a fixed-N Experiment
of many shards whose runners crash once each, on 2 workers, on the local backend and on a local Ray instance.
Runner starts are the attempts each worker's watchdog made (local: `.evalfleet/worker-N.status.json`; Ray: the
worker tasks' results), restarts included, and every runner that ran a shard is one of them: its pid is in the
name of each shard's timings file (`<run>/timings/<shard>-<host>-<pid>.json`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from evalfleet.experiment.loading import load_experiment
from evalfleet.experiment.plan import make_plan
from evalfleet_testkit import PLUGINS_DIR, plugin_env, results_by_episode, run_evalfleet

pytestmark = pytest.mark.slow

SHORT = {"type": "metaworld", "task": "reach-v3", "max_steps": 60}

FOUR_LOOKS = {
    "name": "four_looks",
    "stopping": {"wave": 3, "max_episodes": 12, "compare": {"baseline": "expert"}},
    "shared": {"environment": SHORT, "policy": {"type": "metaworld_expert"}, "rollout_limit": {"num_episodes": 12}},
    "runs": {"expert": {"policy_name": "expert"},
             "same": {"policy_name": "same", "variations": {"robot.action_noise": {
                 "enabled": True, "distribution": "uniform", "low": 0.0, "high": 0.0}}}},
}
MANY_SHARDS = {
    "name": "many_shards",
    "shared": {"environment": SHORT, "rollout_limit": {"num_episodes": 12}},
    "runs": {"expert": {"policy": {"type": "metaworld_expert"}},
             "crashing": {"policy": {"type": "test_kill_self", "at_episode_calls": 30}}},
}


def ran_shards(out: Path) -> set[int]:
    """The pids of the runners that wrote a shard's timings."""
    return {int(p.stem.rsplit("-", 1)[1]) for p in out.glob("*/timings/*.json")}


def runner_starts(out: Path) -> tuple[list[int], int]:
    """(the pid of every runner the workers' watchdogs started, how many of those starts were restarts), checked
    against the runners that wrote shard timings."""
    statuses = [json.loads(p.read_text()) for p in out.glob(".evalfleet/worker-*.status.json")]
    assert len(statuses) == 2
    started = [a["pid"] for s in statuses for a in s["attempts"]]
    assert ran_shards(out) and ran_shards(out) <= set(started), (ran_shards(out), started)
    return started, sum(s["restarts"] for s in statuses)


def run(tmp_path: Path, name: str, document: dict, *args: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    out = tmp_path / name
    proc = run_evalfleet("run", str(path), "--output", str(out), "--no-progress", "--workers", "2", *args,
                         env=plugin_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_a_sequential_experiment_of_four_looks_starts_one_runner_per_worker(tmp_path):
    """Two Runs that never differ (the same expert, one with zero action noise): every look is undecided, so the
    Experiment takes all four looks (3, 6, 9, 12 episodes), each released to the runners already running."""
    out = run(tmp_path, "sequential", FOUR_LOOKS, "--shard-size", "1")
    result = json.loads((out / "experiment_result.json").read_text())
    assert [(c["verdict"], c["stopped_at"]) for c in result["comparisons"]] == [("undecided", 12)]
    assert len(results_by_episode(out)) == 24
    assert len({p.name.split("-")[0] for p in out.glob("*/timings/*.json")}) == 12  # shards of one episode each
    started, restarted = runner_starts(out)
    assert len(started) == 2 and restarted == 0


def test_a_fixed_experiment_of_many_shards_starts_one_runner_per_worker_and_one_per_crash(tmp_path):
    """24 one-episode shards; each runner's first attempt SIGKILLs itself at its 30th policy call, and the watchdog
    starts it again: 2 runners plus one per crash, however many of the shards each took."""
    out = run(tmp_path, "fixed", MANY_SHARDS, "--shard-size", "1")
    assert len(results_by_episode(out)) == 24
    started, restarted = runner_starts(out)
    assert 1 <= restarted <= 2  # a runner that made its 30th call crashed once; at least one did
    assert len(started) == 2 + restarted


@pytest.fixture
def on_ray(monkeypatch):
    """A local Ray instance of 2 CPUs that the backend starts (and stops), whose workers can load the test
    plug-ins: they inherit this process's environment."""
    pytest.importorskip("ray")
    for key, value in plugin_env(RAY_AUTH_MODE="disabled").items():
        monkeypatch.setenv(key, value)
    monkeypatch.syspath_prepend(str(PLUGINS_DIR))
    import evalfleet_test_plugins  # noqa: F401 - this driver plans the plug-in's Runs

    def run_on_ray(tmp_path: Path, name: str, document: dict) -> tuple[Path, list]:
        from evalfleet.execution import pipeline
        from evalfleet.execution.backends import get_backend

        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        out = tmp_path / name
        loaded = pipeline.load(path)
        backend = get_backend("ray", loaded.backend_settings, workers=2)
        pipeline.prepare(loaded, backend, out, resume=False, shard_size=1)
        plan, results = pipeline.execute(loaded, out, backend, shard_size=1, progress=False)
        pipeline.finish_runs(plan, out, results)
        assert pipeline.finalize_output(loaded, out).exit_code == 0, [(r.error, r.result) for r in results]
        return out, results

    return run_on_ray


def ray_runner_starts(out: Path, results: list) -> tuple[list[int], int]:
    """(the pid of every runner the worker tasks' watchdogs started, how many were restarts), checked against the
    runners that wrote shard timings; a worker task that found nothing to take started none and is not here."""
    started = [a["pid"] for r in results for a in r.result.attempts]
    assert ran_shards(out) and ran_shards(out) <= set(started), (ran_shards(out), started)
    return started, sum(r.result.restarts for r in results)


def test_on_ray_a_sequential_experiment_of_four_looks_starts_one_runner_per_worker(on_ray, tmp_path):
    out, results = on_ray(tmp_path, "sequential", FOUR_LOOKS)
    result = json.loads((out / "experiment_result.json").read_text())
    assert [(c["verdict"], c["stopped_at"]) for c in result["comparisons"]] == [("undecided", 12)]
    assert len(results_by_episode(out)) == 24
    assert len({p.name.split("-")[0] for p in out.glob("*/timings/*.json")}) == 12  # shards of one episode each
    started, restarted = ray_runner_starts(out, results)
    assert len(started) <= 2 and restarted == 0  # before #57: a runner per shard task, 24 of them


def test_on_ray_a_fixed_experiment_of_many_shards_starts_one_runner_per_worker_and_one_per_crash(on_ray, tmp_path):
    out, results = on_ray(tmp_path, "fixed", MANY_SHARDS)
    assert len(results_by_episode(out)) == 24
    started, restarted = ray_runner_starts(out, results)
    assert 1 <= restarted <= 2  # a runner that made its 30th call crashed once; at least one did
    assert len(started) <= 2 + restarted and len(results) <= 2


def test_a_worker_that_gives_up_ends_a_sequential_experiment_instead_of_leaving_it_waiting(write_experiment,
                                                                                          tmp_path):
    """Two Runs that never differ, looked at every 2 episodes up to 8; one SIGKILLs its runner at its episode 1 on
    every attempt, and the watchdog may not restart it (--max-restarts 0): that worker gives up, nothing more is
    released, the other worker's runner finishes what it took and ends, and the run ends with the Run failed."""
    if str(PLUGINS_DIR) not in sys.path:
        sys.path.insert(0, str(PLUGINS_DIR))
    import evalfleet_failure_plugins  # noqa: F401 - the toy env, to plan the Run here

    run = {"environment": {"type": "test_faulty", "succeed": True}, "task": "toy",
           "rollout_limit": {"num_episodes": 8}}
    stopping = {"wave": 2, "max_episodes": 8, "compare": {"baseline": "base"}}
    probe = write_experiment({"crash": {**run, "policy": {"type": "test_zero"}}}, filename="probe.yaml")
    seed = make_plan(load_experiment(probe, []), workers=1).runs["crash"].episode(1).seed
    path = write_experiment({"base": {**run, "policy": {"type": "test_zero"}, "policy_name": "base"},
                             "crash": {**run, "policy": {"type": "test_zero", "kill_seed": seed},
                                       "policy_name": "crash"}}, stopping=stopping)
    out = tmp_path / "out"
    proc = run_evalfleet("run", str(path), "--output", str(out), "--workers", "2", "--shard-size", "1",
                         "--no-progress", "--max-restarts", "0",
                         env=plugin_env(EVALFLEET_PLUGINS="evalfleet_test_plugins,evalfleet_failure_plugins"))
    assert proc.returncode != 0, proc.stderr
    result = json.loads((out / "experiment_result.json").read_text())
    assert result["runs"]["crash"]["status"] == "failed", result["runs"]["crash"]
    assert not any(result["runs"][r]["episodes_recorded"] >= 8 for r in ("base", "crash"))  # no look past it
