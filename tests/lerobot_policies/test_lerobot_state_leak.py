"""Policy state never leaks across episodes: through a real `lerobot` server in LeRobot's venv, episode 1's
actions after episode 0 on the same connection equal episode 1's actions run alone on a fresh server. The
Diffusion checkpoint keeps an observation history, so the comparison can fail: without the per-episode
reset the same episode's actions differ (checked too)."""

from __future__ import annotations

import numpy as np

from evalfleet.plugins import load_registries
from evalfleet.policies.base import PolicyContext
from evalfleet.serving.bindings import binding_for, server_process
from evalfleet.serving.lerobot import LerobotOptions, LerobotRemotePolicy
from evalfleet.sim.base import ENVIRONMENTS
from lerobot_testkit import venv_env

ENV_OPTIONS = {"task": "reach-v3", "max_steps": 10, "cameras": ["corner"], "image_camera": "corner", "image_size": 32}
SEEDS = {0: 11, 1: 22}


def _episode(env, policy, seed: int, *, reset: bool = True) -> np.ndarray:
    if reset:
        policy.reset(seed, 0)
    obs, actions = env.reset(seed, {}), []
    for _ in range(env.max_steps):
        for action in np.asarray(policy.act(obs, 0)).reshape(-1, env.action_dim):
            actions.append(action)
            result = env.step(action)
            obs = result.observation
    return np.stack(actions)


def _serve(tmp_path, options, name):
    load_registries()
    binding = binding_for("lerobot")
    context = PolicyContext(run="leak", task="reach-v3", env_type="metaworld", env_options=ENV_OPTIONS, action_dim=4)
    proc = server_process(binding, options, context, tmp_path / f"{name}.log")
    proc.env.update({k: v for k, v in venv_env().items() if k == "PYTHONPATH"})
    proc.start()
    proc.wait_healthy(180)
    return proc, LerobotRemotePolicy(LerobotOptions(**binding.wire_client(options, proc.host, proc.port)))


def test_episode_actions_do_not_depend_on_the_previous_episode(tmp_path, diffusion_metaworld, monkeypatch):
    monkeypatch.delenv("EVALFLEET_PLUGINS", raising=False)
    load_registries()
    env = ENVIRONMENTS.get("metaworld").factory(ENV_OPTIONS, {"num_envs": 1, "seed": 0})
    options = {"path": str(diffusion_metaworld)}
    try:
        proc, policy = _serve(tmp_path, options, "both")
        try:
            _episode(env, policy, SEEDS[0])
            after_episode_0 = _episode(env, policy, SEEDS[1])
            leaked = _episode(env, policy, SEEDS[1], reset=False)  # no reset: history from the last episode
            assert policy.provenance["weights_sha256"]
        finally:
            policy.close()
            proc.stop()
        proc, policy = _serve(tmp_path, options, "alone")
        try:
            alone = _episode(env, policy, SEEDS[1])
        finally:
            policy.close()
            proc.stop()
    finally:
        env.close()
    assert after_episode_0.shape == alone.shape == (10, 4)
    np.testing.assert_array_equal(after_episode_0, alone)
    assert not np.array_equal(leaked, alone)  # the check is sensitive to carried-over state
