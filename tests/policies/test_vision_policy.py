"""`metaworld_vision`: object/goal estimates from depth + segmentation with the nominal calibration;
good at nominal, and clearly worse once the camera is moved (the sensitivity reference case)."""

from __future__ import annotations

import numpy as np
import pytest

import evalfleet
import evalfleet.policies.vision  # registers metaworld_vision, for _policy here
from evalfleet_testkit import metaworld_run
from evalfleet.errors import UserError
from evalfleet.policies.base import POLICIES, PolicyContext
from evalfleet.rollout.records import latest_records
from evalfleet.sim.metaworld_env import MetaworldEnvironment
from evalfleet.sim.metaworld_spec import MetaworldOptions

ENV = {"cameras": ["corner"], "depth": True, "segmentation": True, "image_size": 160}


def _policy(task: str, **env_options):
    opts = {"task": task, **env_options}
    return POLICIES.get("metaworld_vision").factory({}, PolicyContext("r", task, "metaworld", opts))


def test_missing_image_options_are_named():
    with pytest.raises(UserError, match="depth: true, segmentation: true") as info:
        _policy("push-v3", cameras=["corner"])
    assert info.value.key == "environment.depth"
    with pytest.raises(UserError, match="missing: cameras"):
        _policy("push-v3")


def test_estimates_are_close_at_nominal_and_shift_with_the_camera():
    env = MetaworldEnvironment(MetaworldOptions(task="pick-place-v3", max_steps=10, **ENV))
    policy = _policy("pick-place-v3", **ENV)
    offset = np.array([0.03, 0.0, 0.0])
    for seed in (1, 2, 3):
        obs = env.reset(seed, {})
        policy.reset(seed)
        state = obs["observation/state"]
        obj, goal = policy.estimate(obs)
        assert np.linalg.norm(obj - state[4:7]) < 0.01 and np.linalg.norm(goal - state[-3:]) < 0.01
        moved = env.reset(seed, {"camera.position_offset": offset.tolist()})
        policy.reset(seed)
        obj_m, goal_m = policy.estimate(moved)
        # A translated camera with the old calibration sees the world translated the other way.
        assert np.linalg.norm((obj_m - obj) + offset) < 0.015 and np.linalg.norm((goal_m - goal) + offset) < 0.015
    env.close()


@pytest.mark.slow
def test_good_at_nominal_and_degrades_with_camera_position_noise(write_experiment, tmp_path):
    episodes = 10
    noise = {"camera.position_offset": {"enabled": True, "sampler_cfg": {"low": [-0.03] * 3, "high": [0.03] * 3}}}
    runs = {}
    for task in ("pick-place-v3", "push-v3"):
        env = {"type": "metaworld", "task": task, "max_steps": 120, **ENV}
        short = task.split("-v3")[0].replace("-", "_")
        runs[f"{short}_nominal"] = metaworld_run(task, "metaworld_vision", episodes, environment=env)
        runs[f"{short}_camera"] = metaworld_run(task, "metaworld_vision", episodes, environment=env, variations=noise)
    # Two runner processes: the suite runs one test at a time, and these 40 rendered episodes fill both cores.
    assert evalfleet.run(write_experiment(runs), output=tmp_path / "out", workers=2, progress=False).ok
    rate = {}
    for run in runs:
        records = latest_records(tmp_path / "out", run)
        assert len(records) == episodes and all(r["status"] != "error" for r in records.values())
        rate[run] = sum(r["success"] for r in records.values()) / episodes
    print("metaworld_vision success:", rate)
    for short in ("pick_place", "push"):
        assert rate[f"{short}_nominal"] >= 0.9, rate
        assert rate[f"{short}_nominal"] - rate[f"{short}_camera"] >= 0.3, rate
