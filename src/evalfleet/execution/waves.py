"""Sequential stopping's wave loop (issue #25; docs/statistics.md, "The wave loop").

The plan covers every Run's cap, the servers start once (the pipeline's `backend.serve`), and the shards are
released look by look: first every stopping Run up to its first look and every fixed-N Run whole; then, as the
records come, `analysis.stopping.state` decides, and each undecided Run's next look is released, until no Run
needs more. The state is a function of the outcomes by episode index alone, so workers, sharding, the backend and
--resume after a SIGKILL (runners skip recorded episodes) give the same decisions and the same records.

On a backend that `keeps_runners` (local, Ray, Slurm) the runners start once: they take shards from a feed
(execution/shard_feed.py) that a releasing thread fills as the records decide, so a Run's next look starts as
soon as its decision needs it while other Runs' episodes keep the workers busy (`execute_with_feed`). Elsewhere
each look is a wave: one `backend.execute` of the undecided Runs' next looks, after the slowest episode of the
one before (`execute_in_waves`)."""

from __future__ import annotations

import dataclasses
import os
import threading
from pathlib import Path
from typing import Callable

from evalfleet.analysis.stopping import StoppingState, decided_outcomes, decision_line, rules_of, state
from evalfleet.execution.backends import Backend, ExecutionJob, WorkerResult
from evalfleet.execution.shard_feed import ShardFeed
from evalfleet.execution.threads import WorkerThread, wait_all
from evalfleet.experiment.plan import Plan, Shard
from evalfleet.layout import FEED_DIR, internal_dir, parts_dir
from evalfleet.rollout.records import RunRecordsTail, RunScope, latest_records, run_logs

RELEASE_POLL_S = 0.05  # how often the releasing thread looks whether the records grew (a scandir)
# A look ends with its slowest shard. Runners that keep their environments make small shards cheap, so a look is
# released in shards of about 1/LOOK_SHARDS of a wave: a worker done early waits for one small shard at most.
LOOK_SHARDS = 5

def has_stopping(plan: Plan) -> bool:
    return any(rp.run.stopping is not None for rp in plan.runs.values())


def outcomes(out: Path, plan: Plan) -> dict[str, dict[int, int | None]]:
    """Stopping Run → episode → 1 / 0 / None (an error that used up its attempts), for decided episodes only."""
    found: dict[str, dict[int, int | None]] = {}
    for name, rp in plan.runs.items():
        if rp.run.stopping is None:
            continue
        found[name] = decided_outcomes(latest_records(out, name, rp.num_episodes).values(), rp.run.max_attempts)
    return found


def stopping_state(out: Path, plan: Plan) -> StoppingState:
    rules, pairs = rules_of(plan.experiment.experiment)
    return state(rules, pairs, outcomes(out, plan))


def wave_shards(plan: Plan, current: StoppingState, found: dict[str, dict[int, int | None]],
                size: int, released: dict[str, int] | None = None) -> list[Shard]:
    """Each undecided Run's episodes below its need that have no decided record (and, given `released`, are not
    below what was already released of it), in shards of at most `size`."""
    shards: list[Shard] = []
    for name, run_state in current.runs.items():
        if run_state.stopped_at is not None:
            continue
        first = (released or {}).get(name, 0)
        todo = [i for i in range(first, run_state.need) if i not in found.get(name, {})]
        start = None
        for k, i in enumerate(todo):
            if start is None:
                start = i
            last = k + 1 == len(todo) or todo[k + 1] != i + 1 or i + 1 - start >= size
            if last:
                shards.append(Shard(name, start, i + 1))
                start = None
    return shards


def shard_size(plan: Plan) -> int:
    return max((s.stop or 0) - s.start for s in plan.shards) if plan.shards else 1


class Releaser:
    """Reads the records, decides, and releases each undecided Run's next look into a feed; closes it once no Run
    needs more. One log line per decision as it is taken."""

    def __init__(self, job: ExecutionJob, feed: ShardFeed, log: Callable[[str], None]):
        self.job, self.plan, self.feed, self.log = job, job.plan, feed, log
        self.stopping = {n for n, rp in self.plan.runs.items() if rp.run.stopping is not None}
        wave = min(self.plan.runs[n].run.stopping.wave for n in self.stopping) if self.stopping else 1
        self.size = max(1, min(shard_size(job.plan), -(-wave // LOOK_SHARDS)))
        # each stopping Run's records, read on from where the last look stopped (whole lines only)
        self._records = {n: RunRecordsTail(RunScope(n, self.plan.runs[n].num_episodes),
                                           lambda n=n: run_logs(job.out, n), keep=("episode", "status", "attempt"))
                         for n in self.stopping}
        self.released: dict[str, int] = {}  # stopping Run → its episodes below this were released
        self.told: set[int] = set()
        self.looks = 0  # how many looks were released (the first counts once for every Run)
        self.stop = threading.Event()
        self._seen: tuple | None = None

    def release(self, *, log_only: bool = False) -> bool:
        """Decide on the records as they are and release what is needed now (`log_only`: only log the new
        decisions); False once nothing more ever is."""
        found = {n: decided_outcomes(tail.refresh().by_episode.values(), self.plan.runs[n].run.max_attempts)
                 for n, tail in self._records.items()}
        rules, pairs = rules_of(self.plan.experiment.experiment)
        current = state(rules, pairs, found)
        for i, p in enumerate(current.pairs):
            if p.verdict != "continue" and i not in self.told:
                self.told.add(i)
                look = -(-p.stopped_at // p.rule.wave) if p.stopped_at else max(self.looks, 1)
                self.log(f"wave {look}: {decision_line(p)}")  # the look, numbered as the wave loop's waves
        if log_only:
            return False
        shards = wave_shards(self.plan, current, found, self.size, self.released)
        if self.looks == 0:
            shards += [s for s in self.job.ordered_shards() if s.run not in self.stopping]
        if shards:
            if not self.feed.release(shards):
                return False  # closed under it: a worker gave up
            self.looks += 1
        for name, run_state in current.runs.items():
            self.released[name] = max(self.released.get(name, 0), run_state.need)
        self.feed.finish({n for n in self.plan.runs if n not in self.stopping}
                         | {n for n, r in current.runs.items() if r.stopped_at is not None})
        return any(r.stopped_at is None for r in current.runs.values())

    def records_grew(self) -> bool:
        """Whether a stopping Run's records changed since the last call (their files' sizes)."""
        sizes = []
        for name in sorted(self.stopping):
            folder = parts_dir(self.job.out, name)
            try:
                sizes += [(e.name, e.stat().st_size) for e in os.scandir(folder) if e.name.endswith(".jsonl")]
            except FileNotFoundError:
                pass
        seen, self._seen = self._seen, tuple(sorted(sizes))
        return seen != self._seen

    def loop(self) -> None:
        """Until no Run needs more (then the feed is closed), the feed is closed by a worker that gave up, or
        `stop`."""
        try:
            while not self.stop.wait(RELEASE_POLL_S) and not self.feed.closed:
                if self.records_grew() and not self.release():
                    return
        finally:
            self.feed.close()


def execute_with_feed(job: ExecutionJob, backend: Backend, experiment_file: Path,
                      log: Callable[[str], None]) -> list[WorkerResult]:
    """One `backend.execute` whose runners take the looks a Releaser feeds them as the records decide."""
    feed = ShardFeed(internal_dir(job.out) / FEED_DIR).start()
    releaser = Releaser(job, feed, log)
    if not releaser.release():
        feed.close()  # nothing to decide (every Run stopped already: a --resume of a finished run)
    thread = WorkerThread(releaser.loop, name="evalfleet-releaser")
    thread.start()
    try:
        results = backend.execute(dataclasses.replace(job, feed=feed), experiment_file)
    finally:
        releaser.stop.set()
        wait_all([thread])
    releaser.release(log_only=True)  # the decisions the last records made
    return results


def execute_in_waves(job: ExecutionJob, backend: Backend, experiment_file: Path,
                     log: Callable[[str], None]) -> list[WorkerResult]:
    """Run the plan look by look: through a feed on a backend that keeps its runners, else wave by wave."""
    if getattr(backend, "keeps_runners", False):  # a plug-in backend that does not say so keeps its waves
        return execute_with_feed(job, backend, experiment_file, log)
    plan = job.plan
    size = shard_size(plan)
    stopping = {n for n, rp in plan.runs.items() if rp.run.stopping is not None}
    results: list[WorkerResult] = []
    told: set[int] = set()
    wave = 0
    while True:
        found = outcomes(job.out, plan)
        rules, pairs = rules_of(plan.experiment.experiment)
        current = state(rules, pairs, found)
        for i, p in enumerate(current.pairs):
            if p.verdict != "continue" and i not in told:
                told.add(i)
                log(f"wave {max(wave, 1)}: {decision_line(p)}")
        shards = wave_shards(plan, current, found, size)
        if wave == 0:
            shards = [s for s in plan.shards if s.run not in stopping] + shards
        if not shards:
            return results
        wave += 1
        wave_job = dataclasses.replace(job, plan=dataclasses.replace(plan, shards=shards))
        ran = backend.execute(wave_job, experiment_file)
        results += ran
        if any(r.problem for r in ran):  # a worker gave up: finish_runs reports its Runs; no further wave
            log(f"wave {wave}: a worker gave up; no further wave")
            return results


def stopped_runs(out: Path, plan: Plan) -> dict[str, tuple[int, str]]:
    """Run → (stopped_at, reason) for every stopping Run the records say is finished."""
    if not has_stopping(plan):
        return {}
    current = stopping_state(out, plan)
    return {n: (r.stopped_at, r.reason or "") for n, r in current.runs.items() if r.stopped_at is not None}
