"""The local backend: every shard on N worker processes of this machine, each under the watchdog.

Every worker is one `evalfleet runner` process given the whole shard list; it claims shards one at a
time (an atomic file per shard), so a fast worker takes more of them and a worker that dies or gives
up strands only the shard it was on. When the watchdog relaunches a worker it resumes its own claims
from the logs.
Progress comes from the growing logs. Ctrl-C stops every worker and leaves a folder that `--resume`
completes; a Run whose worker gives up is marked failed while the others finish.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import yaml

from evalfleet.backends.local.runner_template import RunnerTemplate, start_runner_template
from evalfleet.backends.local.settings import LocalSettings
from evalfleet.execution.backends import BackendBase, ExecutionJob, WorkerResult
from evalfleet.execution.claims import claimed_by
from evalfleet.execution.invocation import runner_command
from evalfleet.execution.output_dir import mark_runs_running, write_atomic
from evalfleet.execution.progress import ProgressTracker, watch_progress
from evalfleet.execution.servers import LocalServers
from evalfleet.backends.local.standby import StandbyRunner, can_fork, fresh_runners_requested, runner_argv
from evalfleet.execution.threads import WorkerThread, wait_all
from evalfleet.execution.watchdog import WatchdogConfig, supervise
from evalfleet.experiment.loading import LoadedExperiment
from evalfleet.experiment.plan import Shard
from evalfleet.layout import CLAIMS_DIR, EXPERIMENT_FILE, WIRED_EXPERIMENT_FILE, internal_dir, worker_file
from evalfleet.policies.base import HOST_RUNNERS_ENV
from evalfleet.serving.planning import check_server_programs


class LocalBackend(BackendBase):
    name = "local"
    resume_hint = ""
    cheap_shards = True  # each worker claims shard after shard in one process: small last shards even out the end
    keeps_runners = True  # a job's feed: each worker's runner takes the shards released there until it closes

    def __init__(self, *, settings: LocalSettings | None = None, workers: int | None = None):
        self.settings = settings or LocalSettings()
        # `workers` was checked by the caller (execution.api.check_workers: the CLI's and the API's one rule)
        self.workers = workers if workers is not None else (os.cpu_count() or 1)
        self._runs: list[LocalRun] = []
        self._template: RunnerTemplate | None = None  # forked at check_experiment, used by the first execute

    def check(self) -> None:
        fresh_runners_requested()  # a value it cannot read is refused before the output folder exists

    def check_experiment(self, loaded: LoadedExperiment, out: Path) -> None:
        """Its policy servers start here: their programs must exist here. Then, in the `evalfleet` command's
        own process, the template its first runners are forked from starts importing their simulators
        (runner_template.py; never in a library caller's process, nor with local.fresh_runners=true)."""
        check_server_programs(loaded.experiment.runs, loaded.path)
        if not self.settings.fresh_runners and self._template is None:
            self._template = start_runner_template(loaded)

    def open(self) -> int:
        return self.workers

    @contextlib.contextmanager
    def serve(self, job: ExecutionJob) -> Iterator[Path]:
        """Start the plan's policy servers on loopback; the runners load the Experiment wired to them."""
        servers = LocalServers({n: rp.run for n, rp in job.plan.runs.items()}, job.loaded.experiment.server_sharing,
                               job.out, job.loaded.experiment.seed, log=job.log)
        if not servers:
            yield job.out / EXPERIMENT_FILE
            return
        try:
            servers.start()
            # Ports change from run to run, so the wiring lives beside experiment.yaml, not in it.
            wired = internal_dir(job.out) / WIRED_EXPERIMENT_FILE
            write_atomic(wired, yaml.safe_dump(servers.wired_document(job.loaded.resolved_document()),
                                               sort_keys=False))
            yield wired
        finally:
            servers.stop()

    def execute(self, job: ExecutionJob, experiment_file: Path) -> list[WorkerResult]:
        template, self._template = self._template, None  # used once: later waves fork from here, or start afresh
        run = LocalRun(job, self.workers, experiment_file, fork=not self.settings.fresh_runners, template=template)
        return run.execute()

    def close(self) -> None:
        if self._template is not None:  # never used (the run ended before its first execute)
            self._template.close()
            self._template = None


@dataclass
class LocalRun:
    job: ExecutionJob
    workers: int
    experiment_file: Path  # what workers load
    fork: bool = True  # first attempts may be forked (standby.py); local.fresh_runners=true: never
    template: RunnerTemplate | None = None  # where the standbys are forked from (runner_template.py), if any
    stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    @property
    def plan(self):  # evalfleet.experiment.plan.Plan
        return self.job.plan

    @property
    def out(self) -> Path:
        return self.job.out

    @property
    def watchdog(self) -> WatchdogConfig:
        return self.job.watchdog

    @property
    def claim_dir(self) -> Path:
        return internal_dir(self.out) / CLAIMS_DIR

    def worker_command(self, worker: int, shards: list[Shard]) -> list[str]:
        feed = self.job.feed
        if feed is not None:  # shards come from the feed, as the driver releases them
            return runner_command(self.experiment_file, self.out, claim_dir=self.claim_dir, worker_id=worker,
                                  feed=feed.folder)
        return runner_command(self.experiment_file, self.out, shards, claim_dir=self.claim_dir, worker_id=worker)

    def claimed_by(self, worker: int) -> list[Shard]:
        feed = self.job.feed
        return claimed_by(self.claim_dir, feed.shards if feed is not None else self.plan.shards, worker)

    def execute(self) -> list[WorkerResult]:
        internal_dir(self.out).mkdir(parents=True, exist_ok=True)
        mark_runs_running(self.out, self.plan)
        # Claims of an earlier invocation would strand shards on workers that no longer exist; the
        # logs, not the claims, say what is done.
        shutil.rmtree(self.claim_dir, ignore_errors=True)
        self.claim_dir.mkdir(parents=True)
        shards = self.job.ordered_shards()
        results = [WorkerResult(i, shards) for i in range(max(1, min(self.workers, len(shards))))]
        background = self.job.background_work
        if background is not None and self.template is not None:
            background()  # nothing is forked here then: it runs while the template finishes its imports
            background = None
        standbys = self._standby_runners(results)  # forked here before any thread exists
        threads = [WorkerThread(self._supervise, (r, standbys.get(r.worker))) for r in results]
        self._threads = threads
        for t in threads:
            t.start()
        if background is not None:  # after the standbys' fork: they need none of it
            background()
        tracker = ProgressTracker.for_plan(self.out, self.plan)
        try:
            watch_progress(threads, tracker, self.job.show_progress)
        except KeyboardInterrupt:
            self.stop.set()
            wait_all(threads)  # not join(): an interrupted join can leave a running thread marked stopped
            raise
        wait_all(threads)
        return results

    def _standby_runners(self, results: list[WorkerResult]) -> dict[int, StandbyRunner]:
        """worker → a child forked now to become its first attempt (backends/local/standby.py), where allowed: from
        the job's runner template where it has one that can (backends/local/runner_template.py), else from here."""
        template, self.template = self.template, None  # used once
        if not self.fork or runner_argv(self.worker_command(0, [])) is None:
            if template is not None:
                template.close()
            return {}
        logs = [worker_file(self.out, r.worker, ".log") for r in results]
        if template is not None:
            forked = template.standbys(logs, timeout=self.watchdog.startup_timeout)
            if forked is not None:
                return {r.worker: standby for r, standby in zip(results, forked)}
        if not can_fork():
            return {}
        return {r.worker: StandbyRunner(log) for r, log in zip(results, logs)}

    def _supervise(self, result: WorkerResult, standby: StandbyRunner | None = None) -> None:
        log_path = worker_file(self.out, result.worker, ".log")
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env[HOST_RUNNERS_ENV] = str(len(self._threads))  # a CPU policy's share of the cores (policies.base)
        try:
            with open(log_path, "ab") as log:
                result.result = supervise(
                    self.worker_command(result.worker, result.shards),
                    worker_file(self.out, result.worker, ".heartbeat"),
                    self.watchdog,
                    env=env,
                    stdout=log,
                    stderr=log,
                    status_file=worker_file(self.out, result.worker, ".status.json"),
                    stop_event=self.stop,
                    log=lambda line: _append(log_path, f"evalfleet watchdog: {line}\n"),
                    standby=standby,
                )
        except Exception as exc:  # noqa: BLE001 - reported as this worker's failure
            result.error = f"{type(exc).__name__}: {exc}"
        finally:
            if standby is not None:
                standby.discard()  # a no-op once the watchdog released it
        if result.problem and self.job.feed is not None:
            self.job.feed.close()  # its shard will not finish: nothing more is released (the pipeline reports it)
        result.shards = self.claimed_by(result.worker)


def _append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
