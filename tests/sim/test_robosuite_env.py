"""robosuite Lift: the scripted policy lifts the cube (success from `_check_success`), action noise
lowers its success rate, variations never leak into the next episode, a camera renders offscreen, and
the scripted policy refuses environments it cannot drive."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("robosuite")

from evalfleet.errors import UserError
from evalfleet.experiment.loading import load_experiment
from evalfleet.policies.base import PolicyContext
from evalfleet.policies.robosuite_lift import _make as make_lift_policy
from evalfleet.sim.robosuite_spec import _make_robosuite


@pytest.fixture(scope="module")
def lift():
    env = _make_robosuite({"task": "Lift", "max_steps": 120}, {})
    yield env
    env.close()


def _play(env, seed, variations=None):
    policy = make_lift_policy({}, PolicyContext(run="r", task="Lift", env_type="robosuite", action_dim=env.action_dim))
    obs = env.reset(seed, variations or {})
    policy.reset(seed)
    states = [obs["observation/state"]]
    for _ in range(env.max_steps):
        result = env.step(policy.act(obs))
        obs = result.observation
        states.append(obs["observation/state"])
        if result.done:
            break
    return result, np.array(states)


def test_the_scripted_policy_lifts_the_cube_and_action_noise_lowers_its_success(lift):
    assert lift.action_dim == 7 and lift.cameras == ()
    clean = [_play(lift, seed)[0] for seed in range(10)]
    assert all(r.success and r.done for r in clean)
    assert all(r.info["steps"] < lift.max_steps for r in clean)  # ended on success, not at the limit
    noisy = [_play(lift, seed, {"robot.action_noise": 0.8})[0].success for seed in range(10)]
    assert sum(noisy) < 10
    lift.reset(0, {})
    assert not lift.env._check_success()  # the cube starts on the table


def test_variations_never_leak_into_the_next_nominal_episode(lift):
    fresh = _make_robosuite({"task": "Lift", "max_steps": 40}, {})
    varied = {"robot.action_noise": 0.5, "robot.observation_noise": 0.01, "scene.friction_scale": 0.4,
              "object.mass_scale": 2.0}
    _, noisy = _play(lift, 5, varied)
    _, after = _play(lift, 9)
    _, clean = _play(fresh, 9)
    np.testing.assert_array_equal(after, clean)
    assert np.array_equal(lift.model.geom_friction, fresh.model.geom_friction)
    assert np.array_equal(lift.model.body_mass, fresh.model.body_mass)
    _, nominal5 = _play(fresh, 5)
    assert not np.array_equal(noisy[: len(nominal5)][-1], nominal5[: len(noisy)][-1])
    fresh.close()


def test_a_camera_renders_offscreen():
    env = _make_robosuite({"task": "Lift", "cameras": ["agentview", "robot0_eye_in_hand"], "image_size": [48, 64]}, {})
    obs = env.reset(1, {})
    image, wrist = obs["observation/images/agentview"], obs["observation/wrist_image"]
    assert image.shape == (48, 64, 3) and image.dtype == np.uint8 and obs["observation/image"] is image
    assert wrist.shape == (48, 64, 3) and image.std() > 5 and not np.array_equal(image, wrist)
    env.close()


def test_the_scripted_policy_refuses_what_it_cannot_drive(write_experiment):
    run = {"environment": {"type": "robosuite", "task": "Stack"}, "policy": {"type": "robosuite_lift_scripted"},
           "rollout_limit": {"num_episodes": 1}}
    with pytest.raises(UserError, match="only task Lift") as err:
        load_experiment(write_experiment({"r": run}))
    assert "runs.r.environment.task" in str(err.value)
    with pytest.raises(UserError, match="unknown robosuite task"):
        load_experiment(write_experiment({"r": {**run, "environment": {"type": "robosuite", "task": "Lfit"}}}))
