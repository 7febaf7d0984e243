"""Policies registered for the serving tests (importable by `evalfleet serve --import serving_test_policies`
when this folder is on PYTHONPATH)."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import pytest

from evalfleet.policies.base import POLICIES, BasePolicy


class ServingTestPolicy(BasePolicy):
    """action = [2 * state..., episode seed of this env, env_id]; `cost_ms` is paid once per act_batch call
    (a batched model's cost); an observation with key `fail` raises."""

    def __init__(self, options: dict[str, Any], context: Any = None):
        self.cost_s = float(options.get("cost_ms", 0)) / 1000.0
        self.chunk = int(options.get("chunk", 0))
        self.seeds: dict[int, int] = {}
        self.observations: list[dict[str, Any]] = []
        self.batch_sizes: list[int] = []
        self.task = getattr(context, "task", "")
        self.metadata = {
            "name": "serving_test",
            "task": self.task,
            "action_dim": 4,
            "table": np.arange(6, dtype=np.int64).reshape(2, 3),
            "scale": np.float32(0.5),
            "modality_config": {"state": {"keys": ["state.arm"]}},
        }

    def reset(self, episode_seed: int, env_id: int = 0) -> None:
        self.seeds[env_id] = int(episode_seed)

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        return self.act_batch([observation], [env_id])[0]

    def act_batch(self, observations: list[dict[str, Any]], env_ids: list[int]) -> list[np.ndarray]:
        self.batch_sizes.append(len(observations))
        if self.cost_s:
            time.sleep(self.cost_s)
        out = []
        for obs, env_id in zip(observations, env_ids):
            self.observations.append(obs)
            if "fail" in obs:
                raise ValueError(f"boom: {obs['fail']}")
            state = np.asarray(obs.get("observation/state", np.zeros(2)), dtype=np.float64)
            action = np.concatenate([2.0 * state, [self.seeds.get(env_id, -1), env_id]]).astype(np.float32)
            out.append(np.tile(action, (self.chunk, 1)) if self.chunk else action)
        return out


@POLICIES.register("serving_test", summary="test policy for the serving tests")
def make_serving_test(options: Any, context: Any) -> ServingTestPolicy:
    return ServingTestPolicy(dict(options or {}), context)


def require_openpi_client():
    """The openpi-client peer. Skips only outside CI; in CI a missing package is a failure."""
    try:
        from openpi_client import websocket_client_policy
    except ImportError:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip("openpi-client is not installed (pip install --no-deps openpi-client==0.1.2)")
    return websocket_client_policy
