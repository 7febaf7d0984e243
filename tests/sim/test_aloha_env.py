"""ALOHA (gym-aloha on dm_control): the adapter declares its 14-D action space, state and cameras; an
episode depends on its seed only; success is gym-aloha's `info["is_success"]` (detected by putting the
scene into a success state); variations never leak into the next nominal episode; cameras render
offscreen exactly as dm_control renders them; bad options are load errors naming the key; diverging
physics raises PhysicsError."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gym_aloha")

from evalfleet.errors import UserError
from evalfleet.experiment.loading import load_experiment
from evalfleet.sim.aloha_spec import _make_aloha


@pytest.fixture(scope="module")
def cube():
    env = _make_aloha({"task": "transfer_cube", "max_steps": 12}, {})
    yield env
    env.close()


def _play(env, seed, variations=None):
    obs = env.reset(seed, variations or {})
    rng = np.random.default_rng(seed)
    states = [obs["observation/state"]]
    for _ in range(env.max_steps):
        result = env.step(rng.uniform(-1, 1, 14))
        states.append(result.observation["observation/state"])
        if result.done:
            break
    return result, np.array(states)


def test_it_declares_its_action_space_state_and_step_limit(cube):
    assert cube.action_dim == 14 and cube.max_steps == 12 and cube.cameras == () and cube.state_dim == 35
    assert cube.action_low[[6, 13]].tolist() == [0.0, 0.0] and cube.action_high[[6, 13]].tolist() == [1.0, 1.0]
    assert cube.action_low[1] == pytest.approx(-1.85005) and cube.action_high[2] == pytest.approx(1.6057)
    obs = cube.reset(0, {})
    assert obs["observation/state"].shape == (35,) and "hand it over" in obs["prompt"]
    default = _make_aloha({"task": "insertion", "obs_type": "pixels_agent_pos", "image_size": 16}, {})
    assert default.max_steps == 400 and default.cameras == ("top",) and default.state_dim == 14
    assert default.reset(0, {})["observation/state"].shape == (14,)
    default.close()


def test_an_episode_depends_on_its_seed_only(cube):
    _, first = _play(cube, 7)
    _, other = _play(cube, 8)
    _, again = _play(cube, 7)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first[0], other[0])  # the cube starts elsewhere
    fresh = _make_aloha({"task": "transfer_cube", "max_steps": 12}, {})
    np.testing.assert_array_equal(_play(fresh, 7)[1], first)  # whichever instance plays it
    fresh.close()


def test_success_is_gym_alohas_is_success_and_ends_the_episode():
    env = _make_aloha({"task": "insertion", "max_steps": 50}, {})
    env.reset(0, {})
    task, physics = env.env._env.task, env.physics
    hold = task.get_qpos(physics)
    first = env.step(hold)
    assert not first.success and not first.done and first.info["reward"] == 0  # peg and socket start apart
    with physics.reset_context():  # the peg put onto the socket's pin: gym-aloha's "successful insertion"
        physics.named.data.qpos[-14:-11] = physics.named.data.geom_xpos["pin"]
    result = env.step(hold)
    assert result.success and result.done and result.info == {"steps": 2, "reward": 4.0}
    env.close()


def test_variations_never_leak_into_the_next_nominal_episode(cube):
    fresh = _make_aloha({"task": "transfer_cube", "max_steps": 12}, {})
    varied = {"robot.action_noise": 0.2, "robot.observation_noise": 0.01, "scene.friction_scale": 0.4,
              "object.mass_scale": 2.0}
    _, noisy = _play(cube, 5, varied)
    _, after = _play(cube, 9)
    np.testing.assert_array_equal(after, _play(fresh, 9)[1])
    assert np.array_equal(cube.model.geom_friction, fresh.model.geom_friction)
    assert np.array_equal(cube.model.body_mass, fresh.model.body_mass)
    assert not np.array_equal(noisy, _play(fresh, 5)[1])
    fresh.close()


def test_cameras_render_offscreen():
    env = _make_aloha({"task": "transfer_cube", "obs_type": "pixels_agent_pos", "cameras": ["top", "left_wrist"],
                       "image_size": [48, 64]}, {})
    obs = env.reset(1, {})
    image, wrist = obs["observation/images/top"], obs["observation/wrist_image"]
    assert image.shape == wrist.shape == (48, 64, 3) and image.dtype == np.uint8 and obs["observation/image"] is image
    assert image.std() > 5 and not np.array_equal(image, wrist) and obs["observation/state"].shape == (14,)
    env.close()


_SAME_AS_DM_CONTROL = """
import numpy as np
from evalfleet.sim.aloha_spec import _make_aloha
env = _make_aloha({"task": "insertion", "obs_type": "pixels", "image_size": [48, 64]}, {})
ours = env.reset(3, {})["observation/images/top"]
theirs = env.physics.render(height=48, width=64, camera_id="top")  # what gym-aloha's own observation is
print("same" if np.array_equal(ours, theirs) else "differ", np.abs(ours.astype(int) - theirs).mean())
"""


def test_images_are_the_pixels_dm_control_renders_the_same_way_up():
    import os
    import subprocess
    import sys

    from evalfleet.sim.rendering import gl_backend

    env = dict(os.environ, MUJOCO_GL=gl_backend())  # dm_control renders with it too in that process
    proc = subprocess.run([sys.executable, "-c", _SAME_AS_DM_CONTROL], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[0] == "same", proc.stdout


def test_bad_options_are_load_errors_naming_the_key(write_experiment):
    run = {"environment": {"type": "aloha", "task": "insert"}, "policy": {"type": "zero"},
           "rollout_limit": {"num_episodes": 1}}
    with pytest.raises(UserError, match="insertion") as err:
        load_experiment(write_experiment({"r": run}))
    assert "runs.r.environment" in str(err.value)
    run["environment"] = {"type": "aloha", "task": "insertion", "obs_type": "pixels", "cameras": []}
    with pytest.raises(UserError, match="at least one camera"):
        load_experiment(write_experiment({"r": run}))
    run["environment"] = {"type": "aloha", "task": "insertion", "cameras": ["wrist"]}
    with pytest.raises(UserError, match="cameras"):
        load_experiment(write_experiment({"r": run}))


def test_actions_that_make_the_physics_diverge_raise_physics_error():
    from evalfleet.sim.protocol import PhysicsError

    env = _make_aloha({"task": "transfer_cube", "actions": "normalized", "max_steps": 400}, {})
    start = env.reset(0, {})["observation/state"]
    with pytest.raises(PhysicsError, match="Physics state is invalid") as err:
        for step in range(env.max_steps):  # every joint's target flung from one end of its range to the other
            env.step(np.full(14, 1.0 if step % 2 else -1.0))
    assert "unstable at step" in str(err.value) and int(str(err.value).split("step ")[1].split(":")[0]) < 400
    np.testing.assert_array_equal(env.reset(0, {})["observation/state"], start)  # the next episode is sound
    env.close()
