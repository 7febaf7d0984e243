"""The local backend: every shard on N worker processes of this machine, each under the watchdog.

Shards are dealt to workers up front (interleaved across Runs); a worker is one `evalfleet runner`
process that runs its shards in order, resuming from the logs whenever the watchdog relaunches it.
Progress comes from the growing logs. Ctrl-C stops every worker and leaves a folder that `--resume`
completes; a Run whose worker gives up is marked failed while the others finish.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalfleet.execution.output_dir import INTERNAL_DIR, write_run_status
from evalfleet.execution.progress import ProgressTracker
from evalfleet.execution.watchdog import WatchdogConfig, WatchdogResult, supervise
from evalfleet.experiment.plan import Plan, Shard


@dataclass
class WorkerResult:
    worker: int
    shards: list[Shard]
    result: WatchdogResult | None = None
    error: str | None = None


@dataclass
class LocalRun:
    plan: Plan
    out: Path
    workers: int
    watchdog: WatchdogConfig = field(default_factory=WatchdogConfig)
    show_progress: bool = True
    stop: threading.Event = field(default_factory=threading.Event)

    def assign(self) -> list[list[Shard]]:
        """Deal shards round-robin, earliest episodes of every Run first, so workers get similar mixes."""
        shards = sorted(self.plan.shards, key=lambda s: (s.start, list(self.plan.runs).index(s.run)))
        n = max(1, min(self.workers, len(shards)))
        return [shards[i::n] for i in range(n)]

    def worker_command(self, shards: list[Shard]) -> list[str]:
        cmd = [sys.executable, "-m", "evalfleet.cli", "runner", str(self.out / "experiment.yaml"), "--output", str(self.out)]
        for s in shards:
            cmd += ["--shard", f"{s.run}:{s.start}:{'' if s.stop is None else s.stop}"]
        return cmd

    def execute(self) -> list[WorkerResult]:
        internal = self.out / INTERNAL_DIR
        internal.mkdir(parents=True, exist_ok=True)
        for name, rp in self.plan.runs.items():
            write_run_status(self.out, name, task=rp.task, policy=rp.policy,
                             planned_episodes=rp.num_episodes, state="running", reason=None)
        results = [WorkerResult(i, shards) for i, shards in enumerate(self.assign())]
        threads = [threading.Thread(target=self._supervise, args=(r, internal), daemon=True) for r in results]
        for t in threads:
            t.start()
        tracker = ProgressTracker(
            self.out, {n: (rp.num_episodes or 0, rp.run.max_attempts) for n, rp in self.plan.runs.items()}
        )
        try:
            self._watch(threads, tracker)
        except KeyboardInterrupt:
            self.stop.set()
            for t in threads:
                t.join()
            raise
        for t in threads:
            t.join()
        return results

    def _supervise(self, result: WorkerResult, internal: Path) -> None:
        log_path = internal / f"worker-{result.worker}.log"
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        try:
            with open(log_path, "ab") as log:
                result.result = supervise(
                    self.worker_command(result.shards),
                    internal / f"worker-{result.worker}.heartbeat",
                    self.watchdog,
                    env=env,
                    stdout=log,
                    stderr=log,
                    status_file=internal / f"worker-{result.worker}.status.json",
                    stop_event=self.stop,
                    log=lambda line: _append(log_path, f"evalfleet watchdog: {line}\n"),
                )
        except Exception as exc:  # noqa: BLE001 - reported as this worker's failure
            result.error = f"{type(exc).__name__}: {exc}"

    def _watch(self, threads: list[threading.Thread], tracker: ProgressTracker) -> None:
        if not self.show_progress:
            while any(t.is_alive() for t in threads):
                time.sleep(0.5)
            tracker.poll()
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        columns = [
            TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:>8}"), TextColumn("ETA"), TimeRemainingColumn(), TimeElapsedColumn(),
        ]
        tracker.poll()
        with Progress(*columns, refresh_per_second=4, transient=False) as progress:
            total_id = progress.add_task("all runs", total=tracker.total_planned or None, rate="")
            ids = {n: progress.add_task(f"  {n}", total=p.planned or None, rate="") for n, p in tracker.runs.items()}
            start_done, start = tracker.total_done, time.monotonic()
            while True:
                alive = any(t.is_alive() for t in threads)
                tracker.poll()
                elapsed = max(1e-6, time.monotonic() - start)
                rate = (tracker.total_done - start_done) / elapsed
                progress.update(total_id, completed=tracker.total_done, rate=f"{rate:.1f} ep/s")
                for name, task_id in ids.items():
                    progress.update(task_id, completed=tracker.done(name))
                if not alive:
                    break
                time.sleep(0.25)


def _append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
