"""A whole LIBERO suite (libero_spatial's 10 tasks, one Run each) plans and runs on the local backend and on
the Ray backend (its own local instance) with identical per-episode results and identical observation streams:
which worker or backend built a task's env changes nothing (real `evalfleet` subprocesses)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from evalfleet_testkit import plugin_env, results_by_episode, run_evalfleet

pytest.importorskip("libero.libero")
pytest.importorskip("ray")

pytestmark = pytest.mark.slow

SIM_TESTS = Path(__file__).resolve().parents[1] / "sim"  # sim_digest_policy, also loaded by the runners
if str(SIM_TESTS) not in sys.path:
    sys.path.append(str(SIM_TESTS))
from sim_digest_policy import read_digests  # noqa: E402 - sys.path is set up first
EPISODES = 1
RUNS = {
    f"spatial_{i}": {
        "environment": {"type": "libero", "suite": "libero_spatial", "task": i, "max_steps": 5, "settle_steps": 0},
        "policy": {"type": "test_observation_digest"},
        "rollout_limit": {"num_episodes": EPISODES},
    }
    for i in range(10)
}


def _env(**extra: str) -> dict[str, str]:
    env = plugin_env(EVALFLEET_PLUGINS="sim_digest_policy", RAY_AUTH_MODE="disabled", **extra)
    env["PYTHONPATH"] = os.pathsep.join([str(SIM_TESTS), env["PYTHONPATH"]])
    return env


def _run(experiment: Path, out: Path, digests: Path, backend: str) -> dict:
    digests.mkdir()
    env = _env(EVALFLEET_DIGEST_DIR=str(digests))
    proc = run_evalfleet("run", str(experiment), "--output", str(out), "--workers", "2", "--backend", backend,
                         "--no-progress", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return results_by_episode(out)


def test_a_ten_task_suite_gives_the_same_episodes_on_the_local_and_ray_backends(write_experiment, tmp_path):
    experiment = write_experiment(RUNS)
    plan = run_evalfleet("plan", str(experiment), env=_env())
    assert plan.returncode == 0, plan.stderr
    assert all(f"spatial_{i}" in plan.stdout for i in range(10))
    local = _run(experiment, tmp_path / "local", tmp_path / "dl", "local")
    ray = _run(experiment, tmp_path / "ray", tmp_path / "dr", "ray")
    assert len(local) == 10 * EPISODES and local == ray
    digests_local, digests_ray = read_digests(tmp_path / "dl"), read_digests(tmp_path / "dr")
    assert len(digests_local) == 10 * EPISODES * 5 and digests_local == digests_ray
    first_observations = {digests_local[(seed, 0)] for (seed, step) in digests_local if step == 0}
    assert len(first_observations) == 10 * EPISODES  # every task and initial state starts differently
    result = json.loads((tmp_path / "ray" / "experiment_result.json").read_text())
    assert set(result["runs"]) == set(RUNS)
