"""The same plan gives identical per-episode results on Push-T, any Gymnasium id (CartPole) and
robosuite Lift, LIBERO and ALOHA whether one worker with one env or two workers with two envs each run it (real
`evalfleet run` subprocesses); Push-T's, LIBERO's and ALOHA's (camera images included) whole observation
streams are compared, not only outcomes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evalfleet_testkit import plugin_env, results_by_episode, run_evalfleet
from sim_digest_policy import read_digests

pytest.importorskip("gym_pusht")
pytest.importorskip("robosuite")
pytest.importorskip("libero.libero")
pytest.importorskip("gym_aloha")

HERE = Path(__file__).resolve().parent
RUNS = {
    "pusht_digest": {
        "environment": {"type": "pusht", "obs_type": "pixels_agent_pos", "image_size": 32, "max_steps": 25,
                        "actions": "normalized"},
        "policy": {"type": "test_observation_digest"},
        "rollout_limit": {"num_episodes": 6},
        "variations": {"robot.observation_noise": {"enabled": True}, "robot.action_noise": {"enabled": True}},
    },
    "cartpole_random": {
        "environment": {"type": "gymnasium", "id": "CartPole-v1", "import": "gymnasium",
                        "success": {"reward_at_least": 2.0}, "actions": "normalized"},
        "policy": {"type": "random"},
        "rollout_limit": {"num_episodes": 8},
    },
    "lift_scripted_noisy": {
        "environment": {"type": "robosuite", "task": "Lift", "max_steps": 80},
        "policy": {"type": "robosuite_lift_scripted"},
        "rollout_limit": {"num_episodes": 6},
        "variations": {"robot.action_noise": {"enabled": True, "distribution": "uniform", "low": 0.0, "high": 0.6}},
    },
    "libero_digest": {  # episodes 0..4 from initial states 0..4, under noise
        "environment": {"type": "libero", "suite": "libero_goal", "task": 2, "max_steps": 6, "settle_steps": 2},
        "policy": {"type": "test_observation_digest"},
        "rollout_limit": {"num_episodes": 5},
        "variations": {"robot.observation_noise": {"enabled": True}, "robot.action_noise": {"enabled": True}},
    },
    "aloha_digest": {  # a small camera image every step: rendered by each worker's own GL context
        "environment": {"type": "aloha", "task": "insertion", "obs_type": "pixels_agent_pos", "cameras": ["top"],
                        "image_size": [24, 32], "max_steps": 8},
        "policy": {"type": "test_observation_digest"},
        "rollout_limit": {"num_episodes": 4},
        "variations": {"robot.observation_noise": {"enabled": True}, "robot.action_noise": {"enabled": True}},
    },
}


def _run(experiment: Path, out: Path, digests: Path, workers: int, num_envs: int, shard_size: int) -> dict:
    digests.mkdir()
    env = plugin_env(EVALFLEET_DIGEST_DIR=str(digests), EVALFLEET_PLUGINS="sim_digest_policy")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env["PYTHONPATH"]])
    overrides = [f"runs.{r}.environment_builder.num_envs={num_envs}" for r in RUNS]
    proc = run_evalfleet("run", str(experiment), *overrides, "--output", str(out), "--workers", str(workers),
                         "--shard-size", str(shard_size), "--no-progress", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return results_by_episode(out)


def test_per_episode_results_do_not_depend_on_workers_or_num_envs(write_experiment, tmp_path):
    experiment = write_experiment(RUNS)
    one = _run(experiment, tmp_path / "one", tmp_path / "d1", workers=1, num_envs=1, shard_size=100)
    two = _run(experiment, tmp_path / "two", tmp_path / "d2", workers=2, num_envs=2, shard_size=3)
    assert len(one) == 29 and one == two
    cartpole_lengths = {one[("cartpole_random", i)][3] for i in range(8)}
    lift = [one[("lift_scripted_noisy", i)] for i in range(6)]
    assert len(cartpole_lengths) > 1  # outcomes that differ per episode, so equality means something
    assert len({r[3] for r in lift}) > 1 and any(r[1] == "success" for r in lift)
    digests_one, digests_two = read_digests(tmp_path / "d1"), read_digests(tmp_path / "d2")
    assert len(digests_one) == 6 * 25 + 5 * 6 + 4 * 8 and digests_one == digests_two
