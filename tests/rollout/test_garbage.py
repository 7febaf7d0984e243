"""A runner process's old cyclic garbage is collected between episodes (rollout/garbage.py, issue #29: a Push-T
worker's RSS grew ~15 KB per episode, gym-pusht's pymunk Space of every reset, until a full collection ran)."""

from __future__ import annotations

import gc
import sys
import weakref

from evalfleet_testkit import PLUGINS_DIR

if str(PLUGINS_DIR) not in sys.path:
    sys.path.insert(0, str(PLUGINS_DIR))
import evalfleet_failure_plugins  # registers test_faulty and test_zero (the path above first)
from evalfleet.experiment.loading import load_experiment
from evalfleet.experiment.plan import make_plan
from evalfleet.rollout.garbage import GarbageBound
from evalfleet.rollout.runner import run_shards


class _Cycle:
    """A reference cycle, like a simulator's scene that points back at itself."""

    def __init__(self) -> None:
        self.me = self
        self.payload = bytearray(64 * 1024)  # the native memory such a cycle keeps


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _old_garbage() -> weakref.ref:
    """A cycle that became garbage after a full collection made it old (it lived through its episode)."""
    cycle = _Cycle()
    gc.collect()
    ref = weakref.ref(cycle)
    del cycle
    return ref


def test_a_full_collection_runs_between_episodes_once_it_is_due():
    clock = _Clock()
    bound = GarbageBound(every_s=1.0, clock=clock)
    clock.now = 0.5
    bound.between_episodes()
    assert bound.collections == 0
    garbage = _old_garbage()
    clock.now = 1.0
    bound.between_episodes()
    assert bound.collections == 1 and garbage() is None
    clock.now = 1.9
    bound.between_episodes()
    assert bound.collections == 1  # the next is due a second after the last


def test_what_is_alive_when_a_runner_is_built_is_frozen_until_it_closes():
    bound = GarbageBound()
    try:
        bound.settle()
        assert gc.get_freeze_count() > 0
    finally:
        bound.release()
    assert gc.get_freeze_count() == 0


def test_a_runner_collects_the_cycles_its_env_leaves_at_every_reset(write_experiment, tmp_path, monkeypatch):
    alive: list[int] = []
    cycles: weakref.WeakSet = weakref.WeakSet()
    reset = evalfleet_failure_plugins.FaultyEnv.reset

    def reset_with_a_new_scene(self, seed, variations):
        alive.append(len(cycles))  # the scenes of earlier resets still in memory
        self.scene = _Cycle()
        cycles.add(self.scene)
        return reset(self, seed, variations)

    monkeypatch.setattr(evalfleet_failure_plugins.FaultyEnv, "reset", reset_with_a_new_scene)
    run = {"environment": {"type": "test_faulty", "max_steps": 2}, "policy": {"type": "test_zero"},
           "rollout_limit": {"num_episodes": 300}, "max_attempts": 1}
    loaded = load_experiment(write_experiment({"r": run}), [])
    plan = make_plan(loaded, shard_size=100)
    gc.disable()  # no automatic collection: what is collected, the runner's bound collected
    try:
        bound = GarbageBound(every_s=0.0)
        run_shards(plan.runs, plan.shards, tmp_path / "out", garbage=bound)
    finally:
        gc.enable()
    assert len(alive) == 300 and bound.collections == 300
    assert max(alive) <= 1  # the scene in use; every scene before it was collected after its episode
    assert gc.get_freeze_count() == 0  # the runner's close released what it froze
