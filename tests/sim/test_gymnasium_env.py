"""The `gymnasium` type: a misspelt `import` module is a UserError naming file and key; each success rule
detects success; a non-deterministic id is warned about once; Box and Discrete actions are mapped."""

from __future__ import annotations

import logging

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces

from evalfleet.errors import UserError
from evalfleet.experiment.loading import load_experiment
from evalfleet.sim.gymnasium_spec import GymnasiumOptions, _make_gymnasium


class LineWorld(gymnasium.Env):
    """Walk right along a line (Box action): reward 1 and info["reached"] at x >= 3, which also terminates.
    `noisy_reset` ignores the seed, as an environment with its own entropy would."""

    def __init__(self, noisy_reset: bool = False):
        self.action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self.observation_space = spaces.Dict({
            "camera": spaces.Box(0, 255, shape=(4, 5, 3), dtype=np.uint8),
            "x": spaces.Box(-np.inf, np.inf, shape=(1,), dtype=np.float64),
        })
        self.noisy_reset = noisy_reset
        self.x = 0.0

    def _obs(self):
        return {"camera": np.full((4, 5, 3), int(self.x * 10) % 256, dtype=np.uint8), "x": np.array([self.x])}

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.x = float(np.random.default_rng().uniform(0, 1) if self.noisy_reset else self.np_random.uniform(0, 1))
        return self._obs(), {}

    def step(self, action):
        self.x += float(np.asarray(action).reshape(-1)[0])
        reached = self.x >= 3.0
        return self._obs(), float(reached), reached, False, {"reached": reached}


gymnasium.register("evalfleet-test/LineWorld-v0", entry_point=LineWorld, max_episode_steps=50)


def _line_world(success, **extra):
    return _make_gymnasium({"id": "evalfleet-test/LineWorld-v0", "success": success, **extra}, {})


def _walk(env, action, steps=20):
    for _ in range(steps):
        result = env.step(np.asarray(action))
        if result.done:
            return result
    return result


@pytest.mark.parametrize("rule", [{"info_key": "reached"}, {"reward_at_least": 1.0}, {"terminated": True}])
def test_each_success_rule_detects_reaching_the_goal_and_not_walking_away(rule):
    env = _line_world(rule)
    obs = env.reset(3, {})
    assert obs["observation/state"].shape == (1,) and obs["observation/images/camera"].shape == (4, 5, 3)
    assert obs["observation/image"] is obs["observation/images/camera"]
    reached = _walk(env, [1.0])
    assert reached.success and reached.done and reached.info["steps"] == 3
    env.reset(3, {})
    away = _walk(env, [-1.0], steps=50)
    assert not away.success and away.done and away.info["steps"] == 50  # the id's registered limit
    env.close()


def test_a_non_deterministic_environment_is_warned_about_once(caplog):
    caplog.set_level(logging.WARNING, logger="evalfleet.sim.gymnasium_env")
    steady = _line_world({"info_key": "reached"})
    with pytest.warns(RuntimeWarning, match="not deterministic"):
        noisy = _line_world({"info_key": "reached"}, kwargs={"noisy_reset": True})
        noisy.reset(1, {})
    noisy.reset(1, {})
    steady.reset(1, {})
    warned = [r for r in caplog.records if "not deterministic" in r.getMessage()]
    assert noisy.deterministic is False and steady.deterministic is True and len(warned) == 1
    np.testing.assert_array_equal(steady.reset(1, {})["observation/state"], steady.reset(1, {})["observation/state"])


def test_normalized_actions_map_onto_the_bounds_and_discrete_spaces(tmp_path):
    env = _make_gymnasium({"id": "gym_pusht/PushT-v0", "import": "gym_pusht", "success": {"info_key": "is_success"},
                           "actions": "normalized"}, {}) if _has("gym_pusht") else None
    if env is not None:
        assert env._env_action(np.array([-1.0, 1.0])).tolist() == [0.0, 512.0]
        assert env._env_action(np.array([0.0, 7.0])).tolist() == [256.0, 512.0]  # clipped to [-1, 1] first
        env.close()
    cartpole = _make_gymnasium({"id": "CartPole-v1", "success": {"reward_at_least": 2.0}, "actions": "normalized"}, {})
    assert cartpole.action_dim == 1 and cartpole.max_steps == 500
    assert [cartpole._env_action(np.array([a])) for a in (-1.0, -0.2, 0.2, 1.0)] == [0, 0, 1, 1]
    cartpole.close()


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def test_a_misspelt_import_module_or_a_bad_success_rule_is_a_user_error(write_experiment):
    base = {"environment": {"type": "gymnasium", "id": "Foo-v0", "import": "no_such_gym_package/envs",
                            "success": {"terminated": True}},
            "policy": {"type": "random"}, "rollout_limit": {"num_episodes": 1}}
    path = write_experiment({"r": base})
    with pytest.raises(UserError) as err:
        load_experiment(path)
    assert str(path) in str(err.value) and "runs.r.environment.import" in str(err.value)
    assert "no_such_gym_package/envs" in str(err.value) and "dotted module name" in str(err.value)
    # Loading never looks for the module (finding a dotted name imports its parent): the runner says
    # it is not installed (tests/execution/test_environment_errors.py).
    base["environment"]["import"] = "no_such_gym_package.envs"
    load_experiment(write_experiment({"r": base}))
    two_rules = {**base, "environment": {"type": "gymnasium", "id": "CartPole-v1",
                                         "success": {"terminated": True, "info_key": "x"}}}
    with pytest.raises(UserError, match="exactly one of"):
        load_experiment(write_experiment({"r": two_rules}))
    assert GymnasiumOptions.model_validate({"id": "CartPole-v1", "import": "gymnasium",
                                            "success": {"terminated": True}}).import_module == "gymnasium"
