"""`test_observation_digest`: uniform random actions seeded per episode that also write, for every
step, a digest of the observation it saw to $EVALFLEET_DIGEST_DIR/<pid>.txt — so a test can compare
whole observation streams of the same episodes run by different workers or env counts. Option
`delay_s` sleeps that long per step. Option `gate` (a folder) holds each process midway through an episode, so a
test interrupts it there on any machine: once the process has started `after_episodes` episodes (default 1), the
next one waits at its step `at_step` (default 2) in `evalfleet_test_plugins.wait_at_gate` until the test releases
the gate or stops the process."""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

import numpy as np

from evalfleet.policies.base import POLICIES, BasePolicy

_episodes_started = 0  # by this process, at any DigestPolicy


def observation_digest(observation: dict[str, Any]) -> str:
    h = hashlib.sha256()
    for key in sorted(observation):
        value = observation[key]
        h.update(key.encode())
        h.update(value.encode() if isinstance(value, str) else np.ascontiguousarray(value).tobytes())
    return h.hexdigest()[:16]


def read_digests(folder) -> dict[tuple[int, int], str]:
    found: dict[tuple[int, int], str] = {}
    for path in sorted(folder.glob("*.txt")):
        for line in path.read_text().splitlines():
            seed, step, digest = line.split()
            found[(int(seed), int(step))] = digest
    return found


class DigestPolicy(BasePolicy):
    def __init__(self, options: Any, context: Any):
        self.action_dim = context.action_dim
        self._delay_s = float((options or {}).get("delay_s", 0.0))
        self._gate = (options or {}).get("gate")
        self._after = int((options or {}).get("after_episodes", 1))
        self._at_step = int((options or {}).get("at_step", 2))
        self._episodes: dict[int, list] = {}  # env_id → [seed, step, rng, held at the gate]
        folder = os.environ["EVALFLEET_DIGEST_DIR"]
        self._out = open(os.path.join(folder, f"{os.getpid()}-{id(self)}.txt"), "a")

    def reset(self, episode_seed: int, env_id: int = 0) -> None:
        global _episodes_started
        _episodes_started += 1
        gated = self._gate is not None and _episodes_started > self._after
        self._episodes[env_id] = [episode_seed, 0, np.random.default_rng([episode_seed, 5]), gated]

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        episode = self._episodes[env_id]
        self._out.write(f"{episode[0]} {episode[1]} {observation_digest(observation)}\n")
        self._out.flush()
        episode[1] += 1
        if episode[3] and episode[1] == self._at_step:
            from pathlib import Path

            from evalfleet_test_plugins import wait_at_gate  # tests/plugins, on the path where a gate is used

            wait_at_gate(Path(self._gate))
        if self._delay_s:
            time.sleep(self._delay_s)
        return episode[2].uniform(-1.0, 1.0, size=self.action_dim).astype(np.float32)

    def close(self) -> None:
        self._out.close()


POLICIES.register("test_observation_digest")(lambda options, context: DigestPolicy(options, context))
