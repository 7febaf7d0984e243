"""The MuJoCo adapters' failure taxonomy: every task code each one declares in its protocol is what
`failure_code()` says of a real episode driven into it (Meta-World's expert lifts the puck, then the gripper
opens: object_dropped; an object put beyond the table's edge falls: object_off_table; a hand that never moves:
never_reached), and a state driven non-finite raises PhysicsError at that step. One env build per adapter."""

from __future__ import annotations

import importlib.util

import mujoco
import numpy as np
import pytest

from evalfleet.sim.base import task_protocol
from evalfleet.sim.protocol import PhysicsError


def _installed(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


def _declared(env_type: str, options: dict) -> set[str]:
    return {c.code for c in task_protocol(env_type, options).failures}


def _move_object(model, data, body: int, offset) -> None:
    """Shift a free object's position (its free joint's qpos) and let MuJoCo recompute what follows from it."""
    adr = int(model.jnt_qposadr[model.body_jntadr[body]])
    data.qpos[adr:adr + 3] += np.asarray(offset, dtype=float)
    data.qvel[int(model.jnt_dofadr[model.body_jntadr[body]]):][:6] = 0.0
    mujoco.mj_forward(model, data)


def _hold(env, action, steps: int):
    for _ in range(steps):
        result = env.step(action)
    return result


@pytest.fixture(autouse=True)
def _in_tmp_path(monkeypatch, tmp_path):
    """MuJoCo writes each warning into MUJOCO_LOG.TXT in the current folder: a test's own folder, not the checkout."""
    monkeypatch.chdir(tmp_path)


def _physics_error(env, model_data, seed: int, action) -> None:
    """A velocity driven non-finite mid-episode: MuJoCo resets the state by itself; the adapter must raise."""
    env.reset(seed, {})
    env.step(action)
    _model, data = model_data()
    data.qvel[0] = np.nan
    with pytest.raises(PhysicsError, match="unstable at step 2"):
        env.step(action)
    env.reset(seed, {})  # the next episode is sound
    env.step(action)


# -- Meta-World ------------------------------------------------------------------------------------------
METAWORLD = {"task": "pick-place-v3", "max_steps": 90}


@pytest.fixture(scope="module")
def metaworld():
    from evalfleet.sim.metaworld_spec import _make_metaworld

    env = _make_metaworld(METAWORLD, {})
    yield env
    env.close()


def test_metaworld_failure_codes_come_from_real_episodes(metaworld):
    from metaworld.policies import SawyerPickPlaceV3Policy

    env, produced = metaworld, {}
    obj = int(env._objects.bodies[0])
    # object_dropped: the expert grasps and lifts the puck (seed 1: its goal is in the air), then lets go.
    obs, expert = env.reset(1, {}), SawyerPickPlaceV3Policy()
    start = float(env.env.data.xpos[obj, 2])
    while env.env.data.xpos[obj, 2] < start + 0.06:
        result = env.step(expert.get_action(obs["observation/state"]))
        obs = result.observation
        assert not result.done, "the expert should lift the puck before the episode ends"
    lifted = env._steps
    result = _hold(env, np.array([0.0, 0.0, 0.0, -1.0]), env.max_steps - lifted)
    assert result.done and not result.success
    produced["object_dropped"] = env.failure_code()
    assert env.env.data.xpos[obj, 2] < start + 0.02  # back on the table
    # object_off_table: the puck beyond the table's edge falls.
    env.reset(2, {})
    _move_object(env.env.model, env.env.data, obj, [0.0, -1.5, 0.0])
    _hold(env, np.zeros(4), 15)
    produced["object_off_table"] = env.failure_code()
    # never_reached: a hand that never moves never meets `near_object`.
    env.reset(3, {})
    _hold(env, np.zeros(4), 5)
    produced["never_reached"] = env.failure_code()
    assert env._progress.progress["criteria_by_name"]["near_object"]["complete"] is False
    assert produced == {code: code for code in _declared("metaworld", METAWORLD)}
    # the hand near the puck, the puck left alone: nothing finer than the step limit
    obs, expert = env.reset(0, {}), SawyerPickPlaceV3Policy()
    while not env._progress.progress["criteria_by_name"]["near_object"]["complete"]:
        obs = env.step(expert.get_action(obs["observation/state"])).observation
    assert env.failure_code() is None


def test_metaworld_raises_physics_error_when_its_state_turns_non_finite(metaworld):
    _physics_error(metaworld, lambda: (metaworld.env.model, metaworld.env.data), 4, np.zeros(4))


# -- robosuite -------------------------------------------------------------------------------------------
ROBOSUITE = {"task": "Lift", "max_steps": 40}


@pytest.fixture(scope="module")
def robosuite():
    if not _installed("robosuite"):
        pytest.skip("robosuite is not installed")
    from evalfleet.sim.robosuite_spec import _make_robosuite

    env = _make_robosuite(ROBOSUITE, {})
    yield env
    env.close()


def _object_codes(env, seed: int, still, steps: int) -> dict[str, str | None]:
    """object_dropped (an object lifted 10 cm, then let fall), object_off_table (moved past the table's edge),
    never_reached (the arm held still), each from one short episode of `env`."""
    produced = {}
    for code, offset in (("object_dropped", [0.0, 0.0, 0.10]), ("object_off_table", [1.5, 0.0, 0.0])):
        env.reset(seed, {})
        obj = int(env._objects.bodies[0])
        env.step(still)
        _move_object(env.model, env.data, obj, offset)
        _hold(env, still, steps)
        produced[code] = env.failure_code()
    env.reset(seed, {})
    _hold(env, still, 3)
    produced["never_reached"] = env.failure_code()
    return produced


def test_robosuite_failure_codes_come_from_real_episodes(robosuite):
    produced = _object_codes(robosuite, 0, np.zeros(7), 20)
    assert produced == {code: code for code in _declared("robosuite", ROBOSUITE)}


def test_robosuite_raises_physics_error_when_its_state_turns_non_finite(robosuite):
    _physics_error(robosuite, lambda: (robosuite.model, robosuite.data), 1, np.zeros(7))


# -- LIBERO ----------------------------------------------------------------------------------------------
LIBERO = {"suite": "libero_spatial", "task": 0, "settle_steps": 5, "max_steps": 40}


@pytest.fixture(scope="module")
def libero():
    if not _installed("libero", "robosuite"):
        pytest.skip("LIBERO is not installed")
    from evalfleet.sim.libero_spec import _make_libero

    env = _make_libero(LIBERO, {})
    yield env
    env.close()


def test_libero_failure_codes_come_from_real_episodes(libero):
    from evalfleet.sim.libero_env import NOOP

    produced = _object_codes(libero, 0, NOOP, 20)
    assert produced == {code: code for code in _declared("libero", LIBERO)}


def test_libero_raises_physics_error_when_its_state_turns_non_finite(libero):
    from evalfleet.sim.libero_env import NOOP

    _physics_error(libero, lambda: (libero.model, libero.data), 1, NOOP)


# -- ALOHA -----------------------------------------------------------------------------------------------
ALOHA = {"task": "transfer_cube", "max_steps": 40}


@pytest.fixture(scope="module")
def aloha():
    if not _installed("gym_aloha"):
        pytest.skip("gym-aloha is not installed")
    from evalfleet.sim.aloha_spec import _make_aloha

    env = _make_aloha(ALOHA, {})
    yield env
    env.close()


def test_aloha_failure_codes_come_from_real_episodes(aloha):
    produced = {}
    obj = int(aloha._objects.bodies[0])
    for code, offset in (("object_dropped", [0.0, 0.0, 0.10]), ("object_off_table", [0.0, 1.5, 0.0])):
        aloha.reset(0, {})
        hold = np.asarray(aloha.env._env.task.get_qpos(aloha.physics), dtype=float)  # the arms stay where they are
        aloha.step(hold)
        _move_object(aloha.model, aloha.data, obj, offset)
        _hold(aloha, hold, 20)
        produced[code] = aloha.failure_code()
    aloha.reset(0, {})
    hold = np.asarray(aloha.env._env.task.get_qpos(aloha.physics), dtype=float)
    _hold(aloha, hold, 3)
    assert aloha.failure_code() is None  # nothing happened to the cube: nothing finer than the step limit
    assert produced == {code: code for code in _declared("aloha", ALOHA)}


def test_an_evalfleet_run_records_the_adapters_code_and_protocol(write_experiment, tmp_path):
    """End to end: `evalfleet run` of a Meta-World Run whose policy never moves the hand: every record is a
    failure carrying `never_reached` (the adapter's code, not the step limit) and the Run's protocol identity."""
    import json

    from evalfleet_testkit import run_evalfleet

    from evalfleet.layout import protocol_path, records_path
    from evalfleet.plugins import load_registries
    from evalfleet.rollout.records import iter_record_dicts

    load_registries()
    env = {"task": "pick-place-v3", "max_steps": 5}
    exp = write_experiment({"still": {"environment": {"type": "metaworld", **env}, "policy": {"type": "zero"},
                                      "rollout_limit": {"num_episodes": 2}}})
    out = tmp_path / "out"
    done = run_evalfleet("run", str(exp), "--output", str(out), "--workers", "1")
    assert done.returncode == 0, done.stderr + done.stdout
    assert "top failure codes: never_reached 2" in done.stderr
    records = list(iter_record_dicts(records_path(out, "still")))
    identity = task_protocol("metaworld", env).identity
    assert [(r["status"], r["failure_code"], r["protocol"]) for r in records] == [("failure", "never_reached",
                                                                                   identity)] * 2
    assert json.loads(protocol_path(out, "still").read_text())["identity"] == identity
