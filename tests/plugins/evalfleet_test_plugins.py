"""Policies that misbehave on purpose, for fault-tolerance tests. Loaded in runner subprocesses
through EVALFLEET_PLUGINS=evalfleet_test_plugins with this folder on PYTHONPATH."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import numpy as np

from evalfleet.policies.base import POLICIES, BasePolicy
from evalfleet.policies.builtin import MetaworldExpertPolicy, NoOptions


class FlakyExpert(MetaworldExpertPolicy):
    """The expert, but its first attempt at ~10% of episodes raises mid-episode (an infrastructure fault)."""

    def __init__(self, options: dict, context: Any):
        super().__init__(NoOptions(), context)
        self.rate = float(options.get("rate", 0.1))
        self.attempt_of: dict[int, int] = {}
        self.seed_of: dict[int, int] = {}
        self.steps: dict[int, int] = {}
        self.seen: set[int] = set()

    def reset(self, episode_seed: int, env_id: int = 0) -> None:
        self.seed_of[env_id] = episode_seed
        self.steps[env_id] = 0

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        seed = self.seed_of[env_id]
        self.steps[env_id] += 1
        faulty = (seed % 1000) < self.rate * 1000
        if faulty and seed not in self.seen and self.steps[env_id] == 5:
            self.seen.add(seed)  # fail once per episode per process; the retry succeeds
            raise ConnectionError(f"simulated policy-server hiccup on seed {seed}")
        return super().act(observation, env_id)


class SlowExpert(MetaworldExpertPolicy):
    """The expert, slowed down so a test can interrupt a run midway."""

    def __init__(self, options: dict, context: Any):
        super().__init__(NoOptions(), context)
        self.delay = float(options.get("delay_s", 0.002))

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        time.sleep(self.delay)
        return super().act(observation, env_id)


class HangingPolicy(BasePolicy):
    """Never returns from construction: its runner never makes progress."""

    def __init__(self, options: dict, context: Any):
        while True:
            time.sleep(1)


class StopSelfPolicy(MetaworldExpertPolicy):
    """SIGSTOPs its own process once, at the given episode, on the first attempt only (a hang)."""

    def __init__(self, options: dict, context: Any):
        super().__init__(NoOptions(), context)
        self.at = int(options.get("at_episode_calls", 200))
        self.calls = 0

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        self.calls += 1
        if self.calls == self.at and os.environ.get("EVALFLEET_ATTEMPT", "1") == "1":
            os.kill(os.getpid(), signal.SIGSTOP)
        return super().act(observation, env_id)


class KillSelfPolicy(StopSelfPolicy):
    """SIGKILLs its own process once (a crash), on the first attempt only."""

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        self.calls += 1
        if self.calls == self.at and os.environ.get("EVALFLEET_ATTEMPT", "1") == "1":
            os.kill(os.getpid(), signal.SIGKILL)
        return MetaworldExpertPolicy.act(self, observation, env_id)


POLICIES.register("test_flaky_expert")(FlakyExpert)
POLICIES.register("test_slow_expert")(SlowExpert)
POLICIES.register("test_hanging")(HangingPolicy)
POLICIES.register("test_stop_self")(StopSelfPolicy)
POLICIES.register("test_kill_self")(KillSelfPolicy)
