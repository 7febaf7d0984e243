"""Sequential stopping's wave loop (issue #25; docs/statistics.md, "The wave loop").

The plan covers every Run's cap, the servers start once (the pipeline's `backend.serve`), and the shards are
released a wave at a time: the first wave runs every fixed-N Run whole and every stopping Run up to its first
look; then the records are read, `analysis.stopping.state` decides, and the next wave runs only the undecided
Runs up to their next look, until no Run needs more. The state is a function of the outcomes by episode index
alone, so workers, sharding, the backend and --resume after a SIGKILL (runners skip recorded episodes) give the
same decisions and the same records."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

from evalfleet.analysis.stopping import StoppingState, decided_outcomes, decision_line, rules_of, state
from evalfleet.execution.backends import Backend, ExecutionJob, WorkerResult
from evalfleet.experiment.plan import Plan, Shard
from evalfleet.rollout.records import latest_records

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
                size: int) -> list[Shard]:
    """Each undecided Run's episodes below its need that have no decided record, in shards of at most `size`."""
    shards: list[Shard] = []
    for name, run_state in current.runs.items():
        if run_state.stopped_at is not None:
            continue
        todo = [i for i in range(run_state.need) if i not in found.get(name, {})]
        start = None
        for k, i in enumerate(todo):
            if start is None:
                start = i
            last = k + 1 == len(todo) or todo[k + 1] != i + 1 or i + 1 - start >= size
            if last:
                shards.append(Shard(name, start, i + 1))
                start = None
    return shards


def execute_in_waves(job: ExecutionJob, backend: Backend, experiment_file: Path,
                     log: Callable[[str], None]) -> list[WorkerResult]:
    """Run the plan wave by wave; one log line per decision as it is taken."""
    plan = job.plan
    size = max((s.stop or 0) - s.start for s in plan.shards) if plan.shards else 1
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
