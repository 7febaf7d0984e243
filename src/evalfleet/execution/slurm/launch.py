"""Submitting a rendering: the scripts written to OUT/.evalfleet/slurm/, a fresh shard queue, then `sbatch` of
each server job, the runner array and (for `evalfleet submit`) the collect job after the array; the blocking
driver's wait for the array to end."""

from __future__ import annotations

import shutil
import threading
import time
from typing import Any, Callable

from evalfleet.errors import UserError
from evalfleet.execution.output_dir import mark_runs_running
from evalfleet.execution.slurm.paths import TASK_HEARTBEAT, TASK_STATUS, WIRED_EXPERIMENT, task_glob
from evalfleet.execution.slurm.commands import SlurmCommandError, TaskState, queued, sacct, sbatch, scancel
from evalfleet.execution.slurm.render import Rendering, write_jobs
from evalfleet.secrets import exported

POLL_S = 2.0
ACCOUNTING_LAG_S = 30.0  # how long an ended array task may take to show its final state in sacct


def reset_state(rendering: Rendering) -> None:
    """What an earlier submission into this folder left that would mislead this one: claims (they would strand
    shards on tasks that no longer exist; the records, not the claims, say what is done), server addresses,
    the array tasks' watchdog files."""
    paths = rendering.paths
    shutil.rmtree(paths.claims, ignore_errors=True)
    shutil.rmtree(paths.servers, ignore_errors=True)
    for pattern in map(task_glob, (TASK_HEARTBEAT, TASK_STATUS, WIRED_EXPERIMENT)):
        for old in paths.root.glob(pattern):
            old.unlink(missing_ok=True)
    for folder in (paths.claims, paths.servers, paths.logs):
        folder.mkdir(parents=True, exist_ok=True)


def launch(rendering: Rendering, loaded: Any, plan: Any, *, log: Callable[[str], None]) -> dict[str, Any]:
    """Write the scripts and submit them in order (servers, the array, the collect job when rendered); the job
    ids, also in jobs.json. A refusal by sbatch cancels what was submitted before it (UserError)."""
    paths = rendering.paths
    paths.root.mkdir(parents=True, exist_ok=True)
    reset_state(rendering)
    written = {s.name: p for s, p in zip(rendering.scripts, rendering.write(paths.root))}
    mark_runs_running(paths.out, plan)
    jobs: dict[str, Any] = {"server_jobs": {}}
    try:
        with exported(loaded.secrets):  # sbatch's --export=ALL carries them; no script holds them
            for script in rendering.scripts:
                if script.kind == "server":
                    jobs["server_jobs"][script.server] = sbatch(written[script.name])
            runners = rendering.script("runners")
            assert runners is not None
            jobs["runners"] = sbatch(written[runners.name])
            write_jobs(paths, rendering, jobs)
            collect = rendering.script("collect")
            if collect is not None:
                jobs["collect"] = sbatch(written[collect.name], dependency=f"afterany:{jobs['runners']}")
                write_jobs(paths, rendering, jobs)
    except SlurmCommandError as exc:
        scancel(all_jobs(jobs))
        raise UserError(f"{exc}; nothing of this submission is left queued", where="sbatch") from None
    log(f"slurm: runner array {jobs['runners']} ({rendering.workers} tasks)"
        + (f", server jobs {', '.join(jobs['server_jobs'].values())}" if jobs["server_jobs"] else "")
        + (f", collect job {jobs['collect']}" if "collect" in jobs else "") + f"; logs in {paths.logs}")
    return jobs


def all_jobs(jobs: dict[str, Any]) -> list[str]:
    return [j for j in [jobs.get("runners"), jobs.get("collect"), *(jobs.get("server_jobs") or {}).values()] if j]


def cancel(jobs: list[str], *, wait_s: float = 60.0) -> None:
    """scancel every job, then wait (at most `wait_s`) until squeue no longer shows them: their runners have
    stopped, so a `--resume` right after reads every record they kept."""
    scancel(jobs)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            left = queued(jobs)
        except (SlurmCommandError, UserError):
            return
        if not left:
            return
        time.sleep(0.5)


class ArrayWatch:
    """A thread that ends when the runner array has left the queue (squeue) and, where there is accounting,
    every task's final state is known (sacct); `states` then holds them (None without accounting)."""

    def __init__(self, array: str, workers: int, poll_s: float = POLL_S):
        self.array = array
        self.workers = workers
        self.poll_s = poll_s
        self.stop = threading.Event()
        self.states: dict[str, TaskState] | None = None
        self.thread = threading.Thread(target=self._watch, daemon=True, name="slurm-array-watch")

    def start(self) -> "ArrayWatch":
        self.thread.start()
        return self

    def _final(self, states: dict[str, TaskState] | None) -> bool:
        if states is None:
            return True
        tasks = [states.get(f"{self.array}_{i}") for i in range(self.workers)]
        return all(t is not None and t.final for t in tasks)

    def _watch(self) -> None:
        while not self.stop.wait(self.poll_s):
            try:
                left = queued([self.array])
            except (SlurmCommandError, UserError):
                left = None
            if left:
                continue
            if left is None:  # squeue failed: ask the accounting
                states = sacct([self.array])
                if states is None or not self._final(states):
                    continue
            break
        deadline = time.monotonic() + ACCOUNTING_LAG_S
        while True:
            self.states = sacct([self.array])
            if self._final(self.states) or time.monotonic() >= deadline or self.stop.is_set():
                return
            time.sleep(self.poll_s)
