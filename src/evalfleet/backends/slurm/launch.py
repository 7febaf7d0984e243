"""Submitting a rendering: the scripts written to OUT/.evalfleet/slurm/, a fresh shard queue, then `sbatch` of
each server job, the runner array and (for `evalfleet submit`) the collect job after the array; the blocking
driver's wait for the array to end, resubmitting a server job that ended meanwhile (`ServerKeeper`). The blocking
driver submits the server jobs once per serve (`launch_servers`) and one array per wave (`launch_array`)."""

from __future__ import annotations

import shutil
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from evalfleet.errors import UserError
from evalfleet.execution.output_dir import mark_runs_running
from evalfleet.backends.slurm.paths import TASK_HEARTBEAT, TASK_STATUS, WIRED_EXPERIMENT, task_glob
from evalfleet.backends.slurm.commands import (SlurmCommandError, TaskState, all_final, queued, sacct, sbatch,
                                               scancel, settled_array_states)
from evalfleet.backends.slurm.render import Rendering, write_jobs
from evalfleet.backends.slurm.scripts import server_script_name
from evalfleet.secrets import exported

POLL_S = 2.0


def reset_state(rendering: Rendering, *, servers: bool = True) -> None:
    """What an earlier submission (or wave) into this folder left that would mislead this one: claims (they would
    strand shards on tasks that no longer exist; the records, not the claims, say what is done), the array
    tasks' watchdog files and, unless `servers` is false (a later wave, its server jobs still running), the
    server addresses."""
    paths = rendering.paths
    shutil.rmtree(paths.claims, ignore_errors=True)
    if servers:
        shutil.rmtree(paths.servers, ignore_errors=True)
    for pattern in map(task_glob, (TASK_HEARTBEAT, TASK_STATUS, WIRED_EXPERIMENT)):
        for old in paths.root.glob(pattern):
            old.unlink(missing_ok=True)
    for folder in (paths.claims, paths.servers, paths.logs):
        folder.mkdir(parents=True, exist_ok=True)


def write_scripts(rendering: Rendering, kinds: tuple[str, ...] | None = None) -> dict[str, Path]:
    """The rendering's scripts (those of `kinds`, or all) written into OUT/.evalfleet/slurm/: name → path."""
    root = rendering.paths.root
    root.mkdir(parents=True, exist_ok=True)
    written = {}
    for script in rendering.scripts:
        if kinds is None or script.kind in kinds:
            written[script.name] = root / script.name
            written[script.name].write_text(script.text, encoding="utf-8")
    return written


def _refused(exc: SlurmCommandError, jobs: dict[str, Any]) -> UserError:
    scancel(all_jobs(jobs))
    return UserError(f"{exc}; nothing of this submission is left queued", where="sbatch")


def launch_servers(rendering: Rendering, loaded: Any, jobs: dict[str, Any], servers: list[str] | None = None) -> None:
    """sbatch the server jobs (`servers`, or every one) from their written scripts; `jobs["server_jobs"]` and
    jobs.json follow. A refusal by sbatch cancels every job in `jobs` (UserError)."""
    try:
        with exported(loaded.secrets):  # sbatch's --export=ALL carries them; no script holds them
            for script in rendering.scripts:
                if script.kind == "server" and (servers is None or script.server in servers):
                    assert script.server is not None
                    jobs["server_jobs"][script.server] = sbatch(rendering.paths.root / script.name)
    except SlurmCommandError as exc:
        raise _refused(exc, jobs) from None
    write_jobs(rendering.paths, rendering, jobs)


def launch_array(rendering: Rendering, loaded: Any, plan: Any, jobs: dict[str, Any], *,
                 log: Callable[[str], None], fed: bool = False) -> dict[str, Any]:
    """The blocking driver's array (its whole plan, one wave of it, or, `fed`, tasks that take the shards the
    driver releases): a fresh shard queue, the runner script written and its array submitted, the server jobs in
    `jobs` left running; `jobs` (and jobs.json) updated."""
    reset_state(rendering, servers=False)
    write_scripts(rendering, ("runners",))
    mark_runs_running(rendering.paths.out, plan)
    runners = rendering.script("runners")
    assert runners is not None
    try:
        with exported(loaded.secrets):
            jobs["runners"] = sbatch(rendering.paths.root / runners.name)
    except SlurmCommandError as exc:
        raise _refused(exc, jobs) from None
    write_jobs(rendering.paths, rendering, jobs)
    if fed:
        log(f"slurm: runner array {jobs['runners']} ({rendering.workers} tasks, taking the shards the driver"
            " releases until every Run is decided)")
    else:
        episodes = sum((s.stop or 0) - s.start for s in rendering.shards)
        log(f"slurm: runner array {jobs['runners']} ({rendering.workers} tasks, {len(rendering.shards)} shards,"
            f" {episodes} episodes)")
    return jobs


def launch(rendering: Rendering, loaded: Any, plan: Any, *, log: Callable[[str], None]) -> dict[str, Any]:
    """Write the scripts and submit them in order (servers, the array, the collect job when rendered); the job
    ids, also in jobs.json. A refusal by sbatch cancels what was submitted before it (UserError)."""
    paths = rendering.paths
    reset_state(rendering)
    written = write_scripts(rendering)
    mark_runs_running(paths.out, plan)
    jobs: dict[str, Any] = {"server_jobs": {}}
    launch_servers(rendering, loaded, jobs)
    try:
        with exported(loaded.secrets):  # sbatch's --export=ALL carries them; no script holds them
            runners = rendering.script("runners")
            assert runners is not None
            jobs["runners"] = sbatch(written[runners.name])
            write_jobs(paths, rendering, jobs)
            collect = rendering.script("collect")
            if collect is not None:
                jobs["collect"] = sbatch(written[collect.name], dependency=f"afterany:{jobs['runners']}")
                write_jobs(paths, rendering, jobs)
    except SlurmCommandError as exc:
        raise _refused(exc, jobs) from None
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


class ServerKeeper:
    """The blocking driver's watch over the server jobs while the runner array is queued: a server job that ended
    (scancel, NODE_FAIL, any final state; a requeued one stays queued and is left to Slurm) is submitted again
    from its script, its address file removed first (its runners wait for the new one, and the wire step
    restarts them on it), at most slurm.max_requeues times per server; jobs.json follows (Ctrl-C cancels the
    new id). `lost`: server → why it was not resubmitted (its Runs fail with it)."""

    def __init__(self, rendering: Rendering, jobs: dict[str, Any], secrets: Any, *, log: Callable[[str], None]):
        self.rendering = rendering
        self.jobs = jobs
        self.secrets = secrets
        self.log = log
        self.resubmitted: dict[str, int] = {}
        self.lost: dict[str, str] = {}
        self.lock = threading.Lock()
        self.closed = False

    def close(self) -> None:
        """No resubmission after this (the driver is cancelling or has finished)."""
        with self.lock:
            self.closed = True

    def poll(self) -> None:
        live = {s: j for s, j in self.jobs["server_jobs"].items() if s not in self.lost}
        if not live:
            return
        try:
            left = queued(live.values())
        except (SlurmCommandError, UserError):
            return
        if left is None:  # squeue failed: ask the accounting
            states = sacct(live.values())
            ended = [s for s, j in live.items() if states and j in states and states[j].final]
        else:
            ended = [s for s, j in live.items() if j not in left]
        for server in ended:
            with self.lock:
                if not self.closed:
                    try:
                        self._resubmit(server, live[server])
                    except (SlurmCommandError, UserError):  # sacct or sbatch did not answer: the next poll
                        pass

    def _resubmit(self, server: str, job: str) -> None:
        states = sacct([job])
        state = states.get(job) if states else None
        how = state.state if state is not None and state.final else "left the queue"
        limit = self.rendering.settings.max_requeues
        done = self.resubmitted.get(server, 0)
        if done >= limit:
            self.lost[server] = (f"server job {job} (server {server}) ended ({how}) after {done} resubmissions"
                                 f" (slurm.max_requeues={limit}): not resubmitted")
            self.log(f"slurm: {self.lost[server]}")
            return
        paths = self.rendering.paths
        paths.server_address(server).unlink(missing_ok=True)
        try:
            with exported(self.secrets):
                new = sbatch(paths.root / server_script_name(server))
        except SlurmCommandError as exc:
            self.lost[server] = f"server job {job} (server {server}) ended ({how}); resubmitting it failed: {exc}"
            self.log(f"slurm: {self.lost[server]}")
            return
        self.resubmitted[server] = done + 1
        self.jobs["server_jobs"][server] = new
        write_jobs(paths, self.rendering, self.jobs)
        self.log(f"slurm: server job {job} ended ({how}); resubmitted as {new}")


class ArrayWatch:
    """A thread that ends when the runner array has left the queue (squeue) and, where there is accounting,
    every task's final state is known (sacct); `states` then holds them (None without accounting). While the
    array is queued, each poll also calls `while_queued` (the ServerKeeper's poll), and `tasks_queued` with the
    array's task ids squeue still shows (a fed array's check for a task that left early)."""

    def __init__(self, array: str, workers: int, poll_s: float = POLL_S,
                 while_queued: Callable[[], None] | None = None,
                 tasks_queued: Callable[[set[str]], None] | None = None):
        self.array = array
        self.workers = workers
        self.poll_s = poll_s
        self.while_queued = while_queued
        self.tasks_queued = tasks_queued
        self.stop = threading.Event()
        self.states: dict[str, TaskState] | None = None
        self.thread = threading.Thread(target=self._watch, daemon=True, name="slurm-array-watch")

    def start(self) -> "ArrayWatch":
        self.thread.start()
        return self

    def _while_queued(self) -> None:
        try:
            self.while_queued()  # type: ignore[misc]
        except Exception as exc:  # noqa: BLE001 - the watch over the array goes on; the failure is said
            print(f"evalfleet: slurm: following the server jobs failed: {exc!r}\n{traceback.format_exc()}",
                  file=sys.stderr, flush=True)

    def _final(self, states: dict[str, TaskState] | None) -> bool:
        return all_final(states, self.array, self.workers)

    def _watch(self) -> None:
        while not self.stop.wait(self.poll_s):
            try:
                left = queued([self.array])
            except (SlurmCommandError, UserError):
                left = None
            if left:
                if self.while_queued is not None:
                    self._while_queued()
                if self.tasks_queued is not None:
                    self.tasks_queued(left)
                continue
            if left is None:  # squeue failed: ask the accounting
                states = sacct([self.array])
                if states is None or not self._final(states):
                    if self.while_queued is not None:
                        self._while_queued()
                    continue
            break
        self.states = settled_array_states(self.array, self.workers, poll_s=self.poll_s, stopped=self.stop.is_set)
