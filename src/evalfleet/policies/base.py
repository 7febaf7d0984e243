"""The policy protocol.

A policy maps an observation dict to actions. It may return one action (shape (A,)) or a chunk of H
actions (shape (H, A)); the runner executes `open_loop_horizon` of a chunk before asking again.
Observations use openpi-style keys: `observation/state` (float vector), `prompt` (the task's
instruction), and for camera policies `observation/image`, `observation/wrist_image` (uint8 H×W×3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from evalfleet.registry import Registry


@dataclass(frozen=True)
class PolicyContext:
    """What a policy may know about where it runs, fixed for the whole shard."""

    run: str
    task: str  # the Run's task tag, e.g. "pick-place-v3"
    env_type: str
    env_options: dict[str, Any] = field(default_factory=dict)
    action_dim: int = 4
    seed: int = 0


@runtime_checkable
class Policy(Protocol):
    def reset(self, episode_seed: int, env_id: int = 0) -> None: ...

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray: ...

    def act_batch(self, observations: list[dict[str, Any]], env_ids: list[int]) -> list[np.ndarray]: ...


class BasePolicy:
    """Convenience base. One instance serves all of a shard's lockstepped envs; `env_id` tells them
    apart so stateful policies keep per-env state. `act_batch` loops over `act`; batched models and
    remote clients override it."""

    metadata: dict[str, Any] = {}

    def reset(self, episode_seed: int, env_id: int = 0) -> None:  # noqa: B027 - optional hook
        pass

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        raise NotImplementedError

    def act_batch(self, observations: list[dict[str, Any]], env_ids: list[int]) -> list[np.ndarray]:
        return [self.act(obs, env_id) for obs, env_id in zip(observations, env_ids)]

    def close(self) -> None:  # noqa: B027 - optional hook
        pass


# type name → factory(options: dict | BaseModel, context: PolicyContext) -> BasePolicy
POLICIES: Registry[BasePolicy] = Registry("policy")
