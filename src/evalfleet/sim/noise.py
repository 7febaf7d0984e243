"""The `robot.action_noise` and `robot.observation_noise` variations, shared by every adapter.

Each noise variation of an episode draws from its own generator, a function of the episode's seed and the
variation's name only (`noise_rng`), so a noisy episode replays exactly and adding one noise leaves the
other's draws unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from evalfleet.seeding import stable_hash


def noise_rng(seed: int, name: str) -> np.random.Generator:
    """The generator of one noise variation in one episode: a function of the episode's seed only."""
    return np.random.default_rng([seed, stable_hash("noise", name) % 2**32])


class RobotNoise:
    """`robot.action_noise` and `robot.observation_noise` (Gaussian std) of one episode, each drawn from its own
    generator seeded by the episode's seed; zero until `reset`, so nothing leaks into a nominal episode."""

    def __init__(self) -> None:
        self.action_std = self.observation_std = 0.0
        self._action_rng: np.random.Generator | None = None
        self._obs_rng: np.random.Generator | None = None

    def reset(self, seed: int, variations: dict[str, Any]) -> None:
        self.action_std = float(variations.get("robot.action_noise") or 0.0)
        self.observation_std = float(variations.get("robot.observation_noise") or 0.0)
        # Made only for an episode that draws from them (a generator costs tens of microseconds to seed).
        self._action_rng = noise_rng(seed, "robot.action_noise") if self.action_std > 0 else None
        self._obs_rng = noise_rng(seed, "robot.observation_noise") if self.observation_std > 0 else None

    def action(self, action: np.ndarray) -> np.ndarray:
        if self.action_std > 0:
            action = action + self._action_rng.normal(0.0, self.action_std, size=action.shape)
        return action

    def observation(self, state: np.ndarray) -> np.ndarray:
        if self.observation_std > 0 and state.size:
            state = state + self._obs_rng.normal(0.0, self.observation_std, size=state.shape)
        return state
