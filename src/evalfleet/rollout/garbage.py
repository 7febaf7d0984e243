"""A runner process's cyclic garbage, collected while it is young enough to matter.

Some simulators build reference cycles that own native memory at every reset (gym-pusht makes a new pymunk
Space, about 15 KB). Such a cycle lives through its episode, so it is old when it becomes garbage, and Python
collects old garbage only in a full collection, which it runs when the old garbage outnumbers a quarter of
every long-lived object: a Push-T worker grew from 86 to 128 MB of RSS before one ran (issue #29). A full
collection of a worker that has imported a simulator scans 70,000+ objects (20-30 ms), too slow to run after
every episode. So once a runner's envs and policy are built, what is alive then (modules, the envs, the policy)
is frozen out of every later collection, and a full collection, now of the objects made since, runs at most
once per `every_s` between episodes.
"""

from __future__ import annotations

import gc
import time
from typing import Callable

EVERY_S = 1.0  # at most one full collection a second: Push-T's garbage in that time is a few MB at most


class GarbageBound:
    """What a runner process calls: `settle()` after building envs or a policy, `between_episodes()` after each
    record, `release()` before closing envs or a policy (so their cycles can be collected again)."""

    def __init__(self, every_s: float = EVERY_S, clock: Callable[[], float] = time.monotonic):
        self.every_s = every_s
        self.clock = clock
        self._last = clock()
        self.collections = 0  # full collections run between episodes

    def settle(self) -> None:
        gc.collect()  # what building left behind, before it is frozen for good
        gc.freeze()
        self._last = self.clock()

    def between_episodes(self) -> None:
        now = self.clock()
        if now - self._last >= self.every_s:
            gc.collect()
            self.collections += 1
            self._last = self.clock()

    def release(self) -> None:
        gc.unfreeze()  # the next `settle()` freezes what is still alive then
