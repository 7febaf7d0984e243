"""Live progress of a run, read from the Runs' logs as they grow (no IPC with workers needed)."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalfleet import bounded_json
from evalfleet.execution.threads import any_running, wait_any
from evalfleet.rollout.records import RunScope, precedence
from evalfleet.rollout.records import run_logs

SESSION_SLACK_S = 2.0  # clock skew between the workers' records and this process


def format_elapsed(seconds: float | None) -> str:
    """`0:42`, `1:05:09`; `-` before a Run's first episode."""
    if seconds is None:
        return "-"
    s = int(seconds)
    h, rem = divmod(s, 3600)
    return f"{h}:{rem // 60:02d}:{rem % 60:02d}" if h else f"{rem // 60}:{rem % 60:02d}"


@dataclass
class RunProgress:
    planned: int
    max_attempts: int
    decided: set[int] = field(default_factory=set)
    successes: dict[int, bool] = field(default_factory=dict)
    errors: int = 0
    precedence: dict[int, tuple[int, float]] = field(default_factory=dict)  # of the record counted per episode
    # Wall-clock span of this session's episodes (from the records' timestamp - duration_s): a Run's time
    # counts from its own first episode, not from the start of the experiment.
    first_start: float | None = None
    last_end: float | None = None

    @property
    def finished(self) -> bool:
        return bool(self.planned) and len(self.decided) >= self.planned

    def note_times(self, record: dict[str, Any], session_start: float) -> None:
        end = record.get("timestamp")
        if not isinstance(end, (int, float)) or isinstance(end, bool):
            return
        duration = record.get("duration_s")
        start = end - duration if isinstance(duration, (int, float)) and duration >= 0 else end
        if start < session_start - SESSION_SLACK_S:
            return  # an episode of an earlier session (a resumed run): not this session's time
        self.first_start = start if self.first_start is None else min(self.first_start, start)
        self.last_end = end if self.last_end is None else max(self.last_end, end)

    def elapsed(self, now: float) -> float | None:
        """Seconds since this Run's first episode started; up to its last record once every episode is decided."""
        if self.first_start is None:
            return None
        end = self.last_end if self.finished and self.last_end is not None else now
        return max(0.0, end - self.first_start)


class LogTail:
    """Reads only the complete lines appended to a file since the last call."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0

    def new_lines(self) -> list[str]:
        try:
            size = os.path.getsize(self.path)
        except OSError:
            return []
        if size < self.offset:
            self.offset = 0  # replaced (e.g. merged by collect): read again
        if size == self.offset:
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read(size - self.offset)
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        return data[: end + 1].decode("utf-8", "replace").splitlines()


class ProgressTracker:
    def __init__(self, out_dir: Path, runs: dict[str, tuple[int, int]]):
        """`runs`: name → (planned episodes, max_attempts)."""
        self.out_dir = out_dir
        self.runs = {name: RunProgress(planned, attempts) for name, (planned, attempts) in runs.items()}
        self._tails: dict[Path, LogTail] = {}
        self.started = time.monotonic()
        self.session_start = time.time()  # wall clock, to compare with the records' timestamps
        self.initial_done = 0

    def poll(self) -> None:
        for name, progress in self.runs.items():
            for path in run_logs(self.out_dir, name):
                tail = self._tails.get(path)
                if tail is None:
                    tail = self._tails[path] = LogTail(path)
                for line in tail.new_lines():
                    try:
                        rec = bounded_json.loads(line)
                    except ValueError:
                        continue
                    if not isinstance(rec, dict) or RunScope(name, progress.planned or None).reason_to_reject(rec):
                        continue  # never counted (records.RunScope), so never shown as progress
                    ep = rec["episode"]
                    if precedence(rec) < progress.precedence.get(ep, (0, float("-inf"))):
                        continue  # a stale duplicate (records.RunRecords keeps the newer one)
                    progress.precedence[ep] = precedence(rec)
                    progress.note_times(rec, self.session_start)
                    status = rec.get("status")
                    if status in ("success", "failure"):
                        progress.decided.add(ep)
                        progress.successes[ep] = status == "success"
                    elif status == "error":
                        progress.errors += 1
                        attempt = rec.get("attempt", 1)
                        if not isinstance(attempt, int) or attempt >= progress.max_attempts:
                            progress.decided.add(ep)

    def done(self, name: str) -> int:
        return len(self.runs[name].decided)

    def run_elapsed(self, name: str, now: float | None = None) -> float | None:
        return self.runs[name].elapsed(time.time() if now is None else now)

    @property
    def total_done(self) -> int:
        return sum(len(p.decided) for p in self.runs.values())

    @property
    def total_planned(self) -> int:
        return sum(p.planned for p in self.runs.values())

    @classmethod
    def for_plan(cls, out_dir: Path, plan: Any) -> "ProgressTracker":
        return cls(out_dir, {n: (rp.num_episodes or 0, rp.run.max_attempts) for n, rp in plan.runs.items()})


def watch_progress(threads: list[threading.Thread], tracker: ProgressTracker, show: bool = True) -> None:
    """Until every thread has ended: a live bar overall and per Run (done/total, episodes/s, ETA)."""
    if not show:  # nothing to show: the logs are not read (at the end that was every record, for nothing)
        for thread in threads:
            thread.join()  # the moment the last worker ends (Ctrl-C still interrupts a join)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = [
        TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[rate]:>8}"), TextColumn("ETA"), TimeRemainingColumn(),
        TextColumn("{task.fields[elapsed]:>8}"),  # each Run from its own first episode; "all runs" from the start
    ]
    tracker.poll()
    with Progress(*columns, refresh_per_second=4, transient=False) as progress:
        total_id = progress.add_task("all runs", total=tracker.total_planned or None, rate="", elapsed="")
        ids = {n: progress.add_task(f"  {n}", total=p.planned or None, rate="", elapsed="-")
               for n, p in tracker.runs.items()}
        start_done, start = tracker.total_done, time.monotonic()
        while True:
            alive = any_running(threads)
            tracker.poll()
            elapsed = max(1e-6, time.monotonic() - start)
            rate = (tracker.total_done - start_done) / elapsed
            progress.update(total_id, completed=tracker.total_done, rate=f"{rate:.1f} ep/s",
                            elapsed=format_elapsed(time.monotonic() - tracker.started))
            now = time.time()
            for name, task_id in ids.items():
                progress.update(task_id, completed=tracker.done(name),
                                elapsed=format_elapsed(tracker.run_elapsed(name, now)))
            if not alive:
                break
            _join_any(threads, 0.25)


def _join_any(threads: list[threading.Thread], timeout: float) -> None:
    """Sleep up to `timeout`, waking early when the first thread still running ends."""
    wait_any(threads, timeout)
