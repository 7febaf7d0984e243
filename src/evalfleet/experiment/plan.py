"""The episode plan — evalfleet's determinism contract.

Each Run becomes episodes 0..N-1. Episode i's seed is a stable hash of (experiment seed, the Run's
task tag, i); each enabled variation's value is drawn from a generator seeded from (that seed, the
variation's name). Nothing depends on worker count, num_envs, sharding, backend, the order of Runs
or what ran before, so two policies on the same task face identical episodes (paired comparisons),
and a Run with a variation disabled is a matched control arm. A Run replaying a condition set
(`conditions:`, experiment/conditions.py) takes episode i's seed, variation values and initial state
from the set instead, as a function of i alone too.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evalfleet.experiment.conditions import ReplaySet, repeat_seed, replay_set
from evalfleet.experiment.loading import LoadedExperiment
from evalfleet.experiment.schema import Run
from evalfleet.seeding import stable_hash

SEED_MODULUS = 2**31  # simulators take 32-bit signed seeds


def episode_seed(experiment_seed: int, task: str, index: int) -> int:
    return stable_hash("episode", experiment_seed, task, index) % SEED_MODULUS


def variation_rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, stable_hash("variation", name) % 2**32])


def sample(sampler: dict[str, Any] | None, rng: np.random.Generator) -> Any:
    """One value from a normalised sampler; vectors come back as lists of floats."""
    if sampler is None:
        return None
    dist = sampler["distribution"]
    if dist == "uniform":
        value = rng.uniform(np.asarray(sampler["low"], float), np.asarray(sampler["high"], float))
    elif dist == "normal":
        value = rng.normal(np.asarray(sampler["mean"], float), np.asarray(sampler["std"], float))
        if "low" in sampler:
            value = np.clip(value, sampler["low"], sampler["high"])
    elif dist == "choice":
        return sampler["values"][int(rng.integers(len(sampler["values"])))]
    else:  # pragma: no cover - the schema admits no other
        raise ValueError(dist)
    return value.tolist() if np.ndim(value) else float(value)


@dataclass(frozen=True)
class EpisodeSpec:
    run: str
    index: int
    seed: int
    variations: dict[str, Any]
    # A replayed condition set (experiment/conditions.py): the initial state the env's reset gets as `episode`
    # (None: the index), and which condition of the set this episode is, and which repeat of it.
    initial_state: int | None = None
    condition: int | None = None
    repeat: int = 0

    def to_json(self) -> dict[str, Any]:
        out = {"episode": self.index, "seed": self.seed, "variations": self.variations}
        if self.condition is not None:
            out.update(condition=self.condition, repeat=self.repeat, initial_state=self.initial_state)
        return out


@dataclass
class RunPlan:
    name: str
    run: Run
    task: str
    policy: str
    base_seed: int
    samplers: dict[str, dict[str, Any] | None]  # enabled variations only
    replay: ReplaySet | None = None  # the Run's `conditions:`: its episodes come from the set, not sampled

    @property
    def num_episodes(self) -> int | None:
        return self.run.rollout_limit.num_episodes

    @property
    def num_steps(self) -> int | None:
        return self.run.rollout_limit.num_steps

    def episode(self, index: int) -> EpisodeSpec:
        if self.replay is not None:
            number, repeat = self.replay.order[index]
            c = self.replay.conditions[number]
            return EpisodeSpec(self.name, index, repeat_seed(c.seed, repeat), dict(c.variations), c.initial_state,
                               number, repeat)
        seed = episode_seed(self.base_seed, self.task, index)
        values = {name: sample(s, variation_rng(seed, name)) for name, s in sorted(self.samplers.items())}
        return EpisodeSpec(self.name, index, seed, values)

    def episodes(self) -> list[EpisodeSpec]:
        return [self.episode(i) for i in range(self.num_episodes or 0)]


@dataclass(frozen=True)
class Shard:
    """A contiguous range of one Run's episodes, run by one runner. A `num_steps` Run is one shard
    that runs episodes in order until its step budget is spent (`stop` is None)."""

    run: str
    start: int
    stop: int | None

    @property
    def id(self) -> str:
        return f"{self.start:06d}"

    def indices(self) -> range:
        if self.stop is None:
            raise ValueError("a step-budget shard has no fixed episode list")
        return range(self.start, self.stop)


@dataclass
class Plan:
    experiment: LoadedExperiment
    runs: dict[str, RunPlan]
    shards: list[Shard] = field(default_factory=list)
    servers: list[dict[str, Any]] = field(default_factory=list)

    @property
    def total_episodes(self) -> int:
        return sum(r.num_episodes or 0 for r in self.runs.values())

    def to_json(self, with_episodes: bool = True) -> dict[str, Any]:
        exp = self.experiment.experiment
        runs = []
        for rp in self.runs.values():
            entry: dict[str, Any] = {
                "name": rp.name,
                "task": rp.task,
                "policy": rp.policy,
                "environment_type": rp.run.environment.type,
                "policy_type": rp.run.policy.type,
                "num_episodes": rp.num_episodes,
                "num_steps": rp.num_steps,
                "num_envs": rp.run.environment_builder.num_envs,
                "variations": rp.samplers,
                **({"conditions": {k: rp.run.conditions[k] for k in ("source", "set_sha256", "sha256")}}
                   if rp.replay else {}),
                "shards": [s.id for s in self.shards if s.run == rp.name],
            }
            if with_episodes:
                entry["episodes"] = [e.to_json() for e in rp.episodes()]
            runs.append(entry)
        return {
            "experiment": exp.name,
            "seed": exp.seed,
            "total_episodes": self.total_episodes,
            "runs": runs,
            "shards": [{"run": s.run, "id": s.id, "start": s.start, "stop": s.stop} for s in self.shards],
            "servers": self.servers,
        }


def default_shard_size(total_episodes: int, workers: int) -> int:
    """Several shards per worker so a slow shard does not leave the others idle; capped so a
    restarted shard never redoes much."""
    return max(1, min(100, math.ceil(total_episodes / max(1, workers * 4))))


def run_plan(name: str, run: Run, experiment_seed: int) -> RunPlan:
    from evalfleet.plugins import load_registries
    from evalfleet.sim.base import ENVIRONMENTS

    load_registries()
    entry = ENVIRONMENTS.get(run.environment.type)
    samplers: dict[str, dict[str, Any] | None] = {}
    for vname, spec in run.variations.items():
        if not spec.enabled:
            continue
        sampler = spec.sampler()
        if sampler is None and entry is not None:
            sampler = entry.info.variations[vname].default_sampler
        samplers[vname] = sampler
    base_seed = run.environment_builder.seed if run.environment_builder.seed is not None else experiment_seed
    replay = replay_set(run.conditions) if run.conditions else None
    return RunPlan(name, run, run.task_tag(), run.policy_tag(), base_seed, samplers, replay)


def shard_bounds(num_episodes: int, size: int, *, taper: bool = False) -> list[tuple[int, int]]:
    """(start, stop) of a Run's shards: `size` episodes each, or, with `taper`, never more than half of what the Run
    has left (down to an eighth of `size`), so the shards that end a Run are small. Workers that share a list
    claim the earliest episodes of every Run first, so these small shards come last, and a worker that runs out
    of shards waits for the others a small shard at most, not a whole one."""
    smallest = max(1, math.ceil(size / 8))
    bounds, start = [], 0
    while start < num_episodes:
        left = num_episodes - start
        step = max(smallest, min(size, math.ceil(left / 2))) if taper else size
        bounds.append((start, min(start + step, num_episodes)))
        start += step
    return bounds


def make_plan(loaded: LoadedExperiment, *, shard_size: int | None = None, workers: int | None = None,
              taper: bool = False) -> Plan:
    """`taper`: a default shard size gives each Run's last shards fewer episodes (`shard_bounds`), for a backend
    whose shards cost little apart (`Backend.cheap_shards`: the local backend, where one process runs many
    shards); a `shard_size` given is kept as it is."""
    exp = loaded.experiment
    runs = {name: run_plan(name, run, exp.seed) for name, run in exp.runs.items()}
    total = sum(r.num_episodes or 0 for r in runs.values())
    size = shard_size or default_shard_size(total, workers or os.cpu_count() or 1)
    shards: list[Shard] = []
    for rp in runs.values():
        if rp.num_episodes is None:
            shards.append(Shard(rp.name, 0, None))
            continue
        shards += [Shard(rp.name, start, stop)
                   for start, stop in shard_bounds(rp.num_episodes, size, taper=taper and shard_size is None)]
    return Plan(loaded, runs, shards, servers_needed(runs, exp.server_sharing))


def servers_needed(runs: dict[str, RunPlan], sharing: str = "per_run") -> list[dict[str, Any]]:
    """The policy servers the plan needs (see evalfleet.serving.planning)."""
    from evalfleet.serving.planning import plan_servers

    return plan_servers({name: rp.run for name, rp in runs.items()}, sharing)
