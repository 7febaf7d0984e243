"""A bench plug-in (bench/sequential_metaworld.py --env-build-s): loaded in runners through
EVALFLEET_PLUGINS=evalfleet_slow_build with bench/ on PYTHONPATH, it makes every Meta-World environment sleep
BENCH_ENV_BUILD_S seconds in its constructor, a stand-in for a simulator whose cold start is long (Isaac Lab)."""

from __future__ import annotations

import os
import time

from evalfleet.sim import metaworld_env

BUILD_S_ENV = "BENCH_ENV_BUILD_S"
_build = metaworld_env.MetaworldEnvironment.__init__


def _slow_build(self, *args, **kwargs) -> None:
    time.sleep(float(os.environ.get(BUILD_S_ENV, "0")))
    _build(self, *args, **kwargs)


metaworld_env.MetaworldEnvironment.__init__ = _slow_build
