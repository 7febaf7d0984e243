"""The Gymnasium-based adapters' failure taxonomy, from real episodes: Push-T tells an agent that never pushed
the block (block_untouched) from one that pushed it but left it far from the target (low_coverage) and from a
near miss (nothing finer than the step limit); a Gymnasium id tells its own termination without success
(terminated) from its step limit."""

from __future__ import annotations

import numpy as np
import pytest

from evalfleet.sim.base import task_protocol

PUSHT = {"max_steps": 40}


def _until_done(env, act):
    obs = None
    for _ in range(env.max_steps):
        result = env.step(act(obs))
        obs = result.observation
        if result.done:
            return result
    raise AssertionError("the episode did not end at its step limit")


@pytest.fixture(scope="module")
def pusht():
    pytest.importorskip("gym_pusht")
    from evalfleet.sim.pusht_spec import _make_pusht

    env = _make_pusht(PUSHT, {})
    yield env
    env.close()


def test_pusht_tells_an_untouched_block_from_low_coverage_and_a_near_miss(pusht):
    produced = {}
    agent = pusht.reset(0, {})["observation/state"][:2].copy()
    result = _until_done(pusht, lambda _obs: agent)  # the agent holds its place
    assert not result.success and result.info["steps"] == pusht.max_steps
    produced["block_untouched"] = pusht.failure_code()

    state = pusht.reset(1, {})["observation/state"]
    result = _until_done(pusht, lambda obs: (state if obs is None else obs["observation/state"])[2:4])  # at the block
    assert not result.success and pusht.last_info["coverage"] < 0.5
    assert not np.allclose(pusht.last_info["block_pose"], pusht.first_info["block_pose"])  # it was pushed
    produced["low_coverage"] = pusht.failure_code()
    assert produced == {code: code for code in {c.code for c in task_protocol("pusht", PUSHT).failures}}

    # A near miss: the block a few pixels off the target, the agent away from it: the step limit says it all.
    pusht.reset(2, {})
    goal = np.asarray(pusht.env.unwrapped.goal_pose, dtype=float)
    for _ in range(2):  # gym-pusht's first _set_state after a reset lands the block off by its centre of gravity
        pusht.env.unwrapped._set_state(np.array([60.0, 60.0, goal[0] + 12.0, goal[1], goal[2]]))
    result = _until_done(pusht, lambda _obs: np.array([60.0, 60.0]))
    assert not result.success and 0.5 <= pusht.last_info["coverage"] <= 0.95
    assert pusht.failure_code() is None


CARTPOLE = {"id": "CartPole-v1", "success": {"reward_at_least": 2.0}, "max_steps": 60}


@pytest.fixture(scope="module")
def cartpole():
    from evalfleet.sim.gymnasium_spec import _make_gymnasium

    env = _make_gymnasium(CARTPOLE, {})
    yield env
    env.close()


def test_gymnasium_tells_its_own_termination_from_the_step_limit(cartpole):
    cartpole.reset(0, {})
    result = _until_done(cartpole, lambda _obs: np.array([0.0]))  # always push left: the pole falls
    assert not result.success and result.info["steps"] < cartpole.max_steps
    assert cartpole.failure_code() == "terminated"
    assert {c.code for c in task_protocol("gymnasium", CARTPOLE).failures} == {"terminated"}

    cartpole.max_steps = 3  # the adapter's own limit, before the pole can fall
    try:
        cartpole.reset(0, {})
        result = _until_done(cartpole, lambda _obs: np.array([0.0]))
        assert result.info["steps"] == 3 and cartpole.failure_code() is None
    finally:
        cartpole.max_steps = CARTPOLE["max_steps"]


def test_a_gymnasium_id_whose_success_is_termination_declares_no_terminated_code():
    from evalfleet.sim.gymnasium_spec import _make_gymnasium

    options = {"id": "CartPole-v1", "success": {"terminated": True}, "max_steps": 60}
    assert task_protocol("gymnasium", options).failures == ()
    env = _make_gymnasium(options, {})
    env.reset(0, {})
    result = _until_done(env, lambda _obs: np.array([0.0]))
    assert result.success and env.failure_code() is None  # its termination was the success
    env.close()
