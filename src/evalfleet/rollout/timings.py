"""Phase timings, measured where the work happens and aggregated in memory: one small file per shard a worker ran
(`layout.timings_path`), written when the shard ends, never per step; `merge_phases` combines them (collect).

A phase's aggregate: count, total, min and max in milliseconds, exact; and a bounded sample of the values
(reservoir sampling with a fixed seed, skip-based: Algorithm L, `SAMPLE_SIZE` values at most) for the
p50/p90/p99 of what a file holds.
Merging keeps counts and totals exact and pools the samples (each kept in proportion to its count).

Phases (`PHASES`, in the order they happen): `start` (a worker process: loading the Experiment and planning,
before its first shard), `env_build`, `policy_connect` (building the policy: a remote one's connect and its
server's health check), `first_episode` (from a Run's env build to its first record: overlaps the others),
`reset`, `sim_step`, `render` (video frames), `policy` (one batched policy call: the policy latency), `write`
(appending a record); the pipeline adds `server_start` (servers started and healthy) and `collect`.
"""

from __future__ import annotations

import json
import math
import os
import random
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

SCHEMA = "evalfleet.shard_timings/1"
SAMPLE_SIZE = 256
PHASES = ("start", "server_start", "env_build", "policy_connect", "first_episode", "reset", "sim_step", "render",
          "policy", "write", "collect")
PERCENTILES = (50, 90, 99)

_worker_start_s: list[float] = []  # this process's `start`, given once by the worker, written with its first shard


@dataclass
class PhaseStats:
    count: int = 0
    total_ms: float = 0.0
    min_ms: float = float("inf")
    max_ms: float = float("-inf")
    samples: list[float] = field(default_factory=list)
    _next: int = -1  # the count at which the next value enters the full sample (Algorithm L)
    _w: float = 1.0

    def add(self, ms: float, rng: random.Random) -> None:
        """O(1) and no random draw for most values once the sample is full: Algorithm L (Li, 1994) picks the
        same kind of uniform sample as Algorithm R by drawing how many values to skip, not one draw per value."""
        self.count += 1
        self.total_ms += ms
        if ms < self.min_ms:
            self.min_ms = ms
        if ms > self.max_ms:
            self.max_ms = ms
        if len(self.samples) < SAMPLE_SIZE:
            self.samples.append(ms)
            if len(self.samples) == SAMPLE_SIZE:
                self._skip(self.count, rng)
        elif self.count == self._next:
            self.samples[rng.randrange(SAMPLE_SIZE)] = ms
            self._skip(self.count, rng)

    def add_seconds(self, seconds: list[float], rng: random.Random) -> None:
        """`add` of each value, given in seconds, in order, with the same sample and the same draws from `rng`: the
        count, total and extremes at once, and one by one only the values the sample takes."""
        if not seconds:
            return
        seen = self.count  # values before these: seconds[i] is value number seen + i + 1
        self.count += len(seconds)
        self.total_ms += sum(seconds) * 1000.0
        self.min_ms = min(self.min_ms, min(seconds) * 1000.0)
        self.max_ms = max(self.max_ms, max(seconds) * 1000.0)
        samples, taken = self.samples, 0
        while len(samples) < SAMPLE_SIZE and taken < len(seconds):
            samples.append(seconds[taken] * 1000.0)
            taken += 1
            if len(samples) == SAMPLE_SIZE:
                self._skip(seen + taken, rng)
        while len(samples) == SAMPLE_SIZE and self._next <= self.count:
            samples[rng.randrange(SAMPLE_SIZE)] = seconds[self._next - seen - 1] * 1000.0
            self._skip(self._next, rng)

    def _skip(self, count: int, rng: random.Random) -> None:
        """After value number `count`: which value the full sample takes next."""
        self._w *= math.exp(math.log(1.0 - rng.random()) / SAMPLE_SIZE)
        gap = math.log(1.0 - rng.random()) / math.log(1.0 - self._w) if self._w < 1.0 else 0.0
        self._next = count + 1 + int(gap)

    def to_json(self, *, samples: bool = True) -> dict[str, Any]:
        doc: dict[str, Any] = {"count": self.count, "total_ms": round(self.total_ms, 4),
                               "mean_ms": round(self.total_ms / self.count, 4) if self.count else None,
                               "min_ms": round(self.min_ms, 4) if self.count else None,
                               "max_ms": round(self.max_ms, 4) if self.count else None}
        doc.update(percentiles(self.samples))
        if samples:
            doc["samples"] = [round(v, 4) for v in self.samples]
        return doc


def percentiles(values: list[float], ps: Iterable[float] = PERCENTILES) -> dict[str, float | None]:
    """{"p<p>_ms": the p-th percentile} for each of `ps`, by linear interpolation between closest ranks (None when
    `values` is empty), the values sorted once."""
    ordered = sorted(values)
    return {f"p{p}_ms": _ranked(ordered, p) for p in ps}


def _ranked(ordered: list[float], p: float) -> float | None:
    if not ordered:
        return None
    pos = (len(ordered) - 1) * p / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return round(ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo), 4)


class PhaseTimings:
    """A worker's timings of one Run, in memory until `flush` writes what one shard added."""

    def __init__(self) -> None:
        self.phases: dict[str, PhaseStats] = {}
        self._rng = random.Random(0)
        self._series: dict[str, list[float]] = {}

    def _stats(self, phase: str) -> PhaseStats:
        stats = self.phases.get(phase)
        if stats is None:
            stats = self.phases[phase] = PhaseStats()
        return stats

    def add(self, phase: str, seconds: float) -> None:
        self._stats(phase).add(seconds * 1000.0, self._rng)

    def series(self, phase: str) -> list[float]:
        """A list to append the phase's values to, in seconds, where even `add`'s call costs too much (once a step);
        they join the phase at `fold()`, which the owner calls often enough to keep the list short (once an
        episode), and at `flush`. The same list, emptied, serves for good."""
        return self._series.setdefault(phase, [])

    def fold(self) -> None:
        """Every `series` value appended since the last fold, into its phase."""
        for phase, values in self._series.items():
            if values:
                self._stats(phase).add_seconds(values, self._rng)
                values.clear()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)

    def flush(self, path: Path, *, run: str, shard: str) -> None:
        """Write what was measured since the last flush to `path` (atomically), then start afresh. Best effort: a
        timings file that cannot be written never costs the records."""
        self.fold()
        if _worker_start_s:
            self.add("start", _worker_start_s.pop())
        if not self.phases:
            return
        doc = {"schema": SCHEMA, "run": run, "shard": shard, "host": socket.gethostname(), "pid": os.getpid(),
               "phases": {name: stats.to_json() for name, stats in self.phases.items()}}
        self.phases = {}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(json.dumps(doc) + "\n", encoding="utf-8")
            os.replace(tmp, path)
        except OSError:
            pass


def record_worker_start(seconds: float) -> None:
    """This worker process's `start` phase: written into the first shard file it writes."""
    _worker_start_s[:] = [seconds]


def worker_name() -> str:
    """The worker part of a shard's timings file name: host and process, so no two workers share one."""
    return f"{socket.gethostname()}-{os.getpid()}"


def merge_phases(docs: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Phase name -> the merged aggregate of every document's `phases` (counts and totals exact; percentiles
    from the pooled samples, or from a lone document's own percentiles when it kept no samples, as Arena's)."""
    merged: dict[str, dict[str, Any]] = {}
    pools: dict[str, list[tuple[list[float], int]]] = {}
    for doc in docs:
        for name, ph in (doc.get("phases") or {}).items():
            if not isinstance(ph, dict) or not isinstance(ph.get("count"), int) or ph["count"] <= 0:
                continue
            m = merged.setdefault(name, {"count": 0, "total_ms": 0.0, "min_ms": None, "max_ms": None, "parts": 0})
            m["count"] += ph["count"]
            m["total_ms"] += float(ph.get("total_ms") or 0.0)
            for key, pick in (("min_ms", min), ("max_ms", max)):
                if isinstance(ph.get(key), (int, float)):
                    m[key] = ph[key] if m[key] is None else pick(m[key], ph[key])
            m["parts"] += 1
            if isinstance(ph.get("samples"), list) and ph["samples"]:
                pools.setdefault(name, []).append(([float(v) for v in ph["samples"]], ph["count"]))
            elif m["parts"] == 1:
                m.update({f"p{p}_ms": ph.get(f"p{p}_ms") for p in (10, *PERCENTILES) if f"p{p}_ms" in ph})
    for name, m in merged.items():
        parts = m.pop("parts")
        m["total_ms"] = round(m["total_ms"], 4)
        m.update({k: round(m[k], 4) for k in ("min_ms", "max_ms") if m[k] is not None})
        m["mean_ms"] = round(m["total_ms"] / m["count"], 4)
        if name in pools:
            pooled = _pooled(pools[name])
            m.update(percentiles(pooled))
        elif parts > 1:  # several summaries without samples: their percentiles cannot be combined
            for p in (10, *PERCENTILES):
                m.pop(f"p{p}_ms", None)
    return {name: merged[name] for name in sorted(merged, key=_phase_order)}


def _pooled(pool: list[tuple[list[float], int]]) -> list[float]:
    """The samples of several files, each weighted by the count it stands for (repeated to scale)."""
    smallest = min(count / len(samples) for samples, count in pool)
    out: list[float] = []
    for samples, count in pool:
        weight = max(1, round((count / len(samples)) / smallest))
        out.extend(samples * min(weight, 64))
    return out


def _phase_order(name: str) -> tuple[int, str]:
    return (PHASES.index(name) if name in PHASES else len(PHASES), name)
