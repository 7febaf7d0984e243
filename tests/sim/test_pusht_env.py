"""Push-T: success is detected when the block lies on the target; noise variations change the episode
and the next nominal episode is bit-identical to one from a fresh env; the `top` camera and the
`render` visualisation are real images; the declared action space, step limit and cameras."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gym_pusht")

from evalfleet.sim.pusht_spec import PushTOptions, _make_pusht


def _states(env, actions):
    out = []
    for a in actions:
        result = env.step(a)
        out.append(result.observation["observation/state"])
    return np.array(out)


def test_success_is_detected_when_the_block_covers_the_target():
    env = _make_pusht({"max_steps": 20}, {})
    obs = env.reset(0, {})
    assert obs["observation/state"].shape == (5,) and env.action_dim == 2 and env.max_steps == 20
    assert env.action_low.tolist() == [0.0, 0.0] and env.action_high.tolist() == [512.0, 512.0]
    first = env.step(obs["observation/state"][:2])
    assert not first.success
    pusht = env.env.unwrapped
    pusht.agent.position, pusht.agent.velocity = (100.0, 100.0), (0.0, 0.0)
    pusht.block.velocity, pusht.block.angular_velocity = (0.0, 0.0), 0.0
    pusht.block.angle = pusht.goal_pose[2]  # angle first: it turns the block about its centre of mass
    pusht.block.position = tuple(pusht.goal_pose[:2])  # now exactly on the target
    result = env.step(np.array([100.0, 100.0]))  # the agent stays away from it
    assert result.success and result.done and result.info["steps"] == 2
    env.reset(0, {})
    for _ in range(20):
        result = env.step(np.array([256.0, 256.0]))
    assert result.done and not result.success and result.info["steps"] == 20
    env.close()


def test_noise_variations_change_the_episode_and_never_leak_into_the_next():
    env, fresh = _make_pusht({"max_steps": 50}, {}), _make_pusht({"max_steps": 50}, {})
    actions = [np.array([200.0 + 5 * i, 300.0]) for i in range(15)]
    nominal_first = env.reset(4, {})["observation/state"]
    nominal = _states(env, actions)
    noisy_obs = env.reset(4, {"robot.action_noise": 0.1, "robot.observation_noise": 3.0})["observation/state"]
    noisy = _states(env, actions)
    assert not np.array_equal(noisy_obs, nominal_first) and not np.array_equal(noisy, nominal)
    after = env.reset(4, {})["observation/state"]
    clean = fresh.reset(4, {})["observation/state"]
    np.testing.assert_array_equal(after, clean)
    np.testing.assert_array_equal(after, nominal_first)
    np.testing.assert_array_equal(_states(env, actions), _states(fresh, actions))
    env.close(), fresh.close()


def test_the_top_camera_and_the_render_visualisation_are_real_images():
    assert PushTOptions(obs_type="pixels", render=True).cameras() == ["top", "render"]
    env = _make_pusht({"obs_type": "pixels_agent_pos", "image_size": 48, "render": True, "render_size": 96}, {})
    obs = env.reset(2, {})
    top, render = obs["observation/images/top"], obs["observation/images/render"]
    assert top.shape == (48, 48, 3) and top.dtype == np.uint8 and render.shape == (96, 96, 3)
    assert obs["observation/image"] is top and obs["observation/state"].shape == (2,)  # agent_pos only
    assert top.std() > 10  # white board, grey T, green target: not a blank frame
    moved = env.step(np.array([450.0, 450.0])).observation["observation/images/top"]
    assert not np.array_equal(moved, top)
    assert env.render("top", 30, 40).shape == (30, 40, 3)  # what video recording asks for
    pixels_only = _make_pusht({"obs_type": "pixels", "image_size": 32}, {})
    obs = pixels_only.reset(2, {})
    assert obs["observation/images/top"].shape == (32, 32, 3) and obs["observation/state"].shape == (0,)
    env.close(), pixels_only.close()


def test_keypoint_observations_keep_the_agent_and_the_t_apart_as_lerobot_reads_them():
    """`environment_state_agent_pos`: `observation/state` is the agent's position and
    `observation/environment_state` the T's 16 keypoint values (LeRobot's observation.state /
    observation.environment_state); observation noise reaches both, and the pose they give is the state's."""
    from evalfleet.policies.pusht_planner import pose_from_keypoints

    keypoints, state = _make_pusht({"obs_type": "environment_state_agent_pos"}, {}), _make_pusht({}, {})
    obs, full = keypoints.reset(7, {}), state.reset(7, {})["observation/state"]
    assert obs["observation/state"].shape == (2,) and obs["observation/environment_state"].shape == (16,)
    np.testing.assert_array_equal(obs["observation/state"], full[:2])
    xy, angle = pose_from_keypoints(obs["observation/environment_state"])
    np.testing.assert_allclose(xy, full[2:4], atol=1e-9)
    assert abs((angle - full[4] + np.pi) % (2 * np.pi) - np.pi) < 1e-9
    noisy = keypoints.reset(7, {"robot.observation_noise": 2.0})
    assert not np.array_equal(noisy["observation/state"], obs["observation/state"])
    assert not np.array_equal(noisy["observation/environment_state"], obs["observation/environment_state"])
    assert "observation/environment_state" not in state.reset(7, {})  # other obs types are as they were
    keypoints.close(), state.close()
