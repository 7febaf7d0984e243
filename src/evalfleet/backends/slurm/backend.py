"""The `slurm` backend: `evalfleet submit --backend slurm [--dry-run]` (server jobs, the runner array, a collect
job after it; returns) and `evalfleet run --backend slurm` (the same without the collect job, then blocks: live
progress from the growing logs, the array's end from squeue/sacct; the pipeline finishes the Runs and
finalizes; Ctrl-C cancels every job, keeps what finished, and `--resume` continues). Under sequential stopping
`run` submits one array whose tasks take the looks the driver releases into the shard feed in the output folder
(execution/shard_feed.py), the server jobs once per serve (serving.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, TextIO

from evalfleet.execution.backends import BackendBase, ExecutionJob, WorkerResult
from evalfleet.execution.progress import ProgressTracker, watch_progress
from evalfleet.execution.shard_feed import ShardFeed
from evalfleet.layout import EXPERIMENT_FILE
from evalfleet.backends.slurm.commands import executable
from evalfleet.backends.slurm.launch import ArrayWatch, all_jobs, cancel, launch, launch_array
from evalfleet.backends.slurm.paths import check_output_path
from evalfleet.backends.slurm.driver import submit_driver
from evalfleet.backends.slurm.render import WORKERS_CAP, job_name, render, slurm_settings
from evalfleet.execution.waves import has_stopping
from evalfleet.backends.slurm.serving import SlurmServing
from evalfleet.backends.slurm.task_steps import blame_lost_servers, server_runs, worker_results


class SlurmBackend(BackendBase):
    name = "slurm"
    resume_hint = " --backend slurm"
    keeps_runners = True  # a job's feed: one array whose tasks take the looks the driver releases (shard_feed.py)

    def __init__(self, *, settings: Any = None, workers: int | None = None):
        # slurm.* is read from the Experiment where used (render.slurm_settings keeps a time as typed)
        self.workers = workers  # checked by the caller (execution.api.check_workers)
        self._serving: SlurmServing | None = None  # while serve(job) runs: its server jobs, for every execute

    def check(self) -> None:
        for name in ("sbatch", "squeue", "scancel"):
            executable(name)

    def check_experiment(self, loaded: Any, out: Path) -> None:
        """What `evalfleet run` refuses before the output folder exists: the slurm.* settings, an output path an
        `#SBATCH` line cannot carry, servers bound to the node's address without a key."""
        from evalfleet.backends.slurm.render import check_servers

        slurm_settings(loaded)
        check_output_path(out)
        check_servers(loaded)

    def open(self) -> int:
        return self.workers or WORKERS_CAP  # shards are planned for this many array tasks (slurm.workers caps it)

    @contextlib.contextmanager
    def serve(self, job: ExecutionJob) -> Iterator[Path]:
        """Every check, then the server jobs submitted once for every `execute` in this serve (each wave of
        sequential stopping: serving.py); all of them cancelled when it ends."""
        serving = SlurmServing.open(job, self.workers)
        self._serving = serving
        try:
            yield job.out / EXPERIMENT_FILE  # each array task wires its own copy to the servers (task_steps.wire)
        finally:
            self._serving = None
            serving.close()

    def execute(self, job: ExecutionJob, experiment_file: Path) -> list[WorkerResult]:
        """One runner array, followed to its end: of exactly `job.plan.shards`, or, given the job's feed, whose
        tasks take the shards the driver releases there until it closes it (sequential stopping: the runners
        start once for every look)."""
        serving = self._serving
        if serving is None:  # called outside serve: one of its own, for this execute alone
            with self.serve(job) as file:
                return self.execute(job, file)
        feed = job.feed
        serving.begin_wave(job.plan.shards)
        rendering = render(job.loaded, job.out, job.plan, workers=self.workers, watchdog=job.watchdog,
                           collect=False, experiment_file=experiment_file,
                           feed=feed.folder if feed is not None else None)
        jobs = launch_array(rendering, job.loaded, job.plan, serving.jobs, log=job.log, fed=feed is not None)
        keeper = serving.keeper
        assert keeper is not None
        closing = None if feed is None else _closing_feed_when_a_task_ends(feed, jobs["runners"], rendering.workers,
                                                                           job.log)
        watch = ArrayWatch(jobs["runners"], rendering.workers, while_queued=keeper.poll,
                           tasks_queued=closing).start()
        try:
            watch_progress([watch.thread], ProgressTracker.for_plan(job.out, job.plan), job.show_progress)
        except KeyboardInterrupt:
            watch.stop.set()
            keeper.close()
            cancel(all_jobs(jobs))
            job.log(f"slurm: cancelled jobs {', '.join(all_jobs(jobs))}")
            raise
        if feed is not None:
            feed.close()  # the array ended: nothing more will run what the feed would release
        ran = job.plan if feed is None else dataclasses.replace(job.plan, shards=feed.shards)
        results = worker_results(rendering.paths, ran, jobs["runners"], rendering.workers, watch.states,
                                 rendering.settings.signal_lead_s)
        blame_lost_servers(results, job.plan, keeper.lost, server_runs(job.loaded))
        return results

    def submit(self, loaded: Any, *, dry_run: bool, output_dir: str | None, stream: TextIO,
               resume: bool = False) -> int:
        """Dry run: every batch script written into `output_dir` (one file each) and listed, or printed when no
        folder is given; nothing submitted. Otherwise the scripts go to OUT/.evalfleet/slurm/ and are submitted."""
        from evalfleet.execution.output_dir import default_output, output_folder, prepare_output
        from evalfleet.experiment.plan import make_plan
        from evalfleet.experiment.validation import require_executable

        settings = slurm_settings(loaded)  # every slurm.* key checked before anything is written
        require_executable(loaded.experiment.runs, loaded.path)
        out = output_folder(output_dir, key="--output-dir") if output_dir else default_output(loaded)
        out = check_output_path(out, key="--output-dir")
        plan = make_plan(loaded, workers=self.workers or settings.workers or WORKERS_CAP)
        if has_stopping(plan) or resume:  # waves need a driver: one job running `evalfleet run` (driver.py)
            if not dry_run:
                self.check()
            return submit_driver(loaded, out, settings, job_name=f"{job_name(settings, loaded.experiment.name)}"
                                 "-driver", workers=self.workers, dry_run=dry_run, resume=resume,
                                 to_folder=bool(output_dir), stream=stream)
        rendering = render(loaded, out, plan, workers=self.workers)
        if dry_run:
            if output_dir:
                for path in rendering.write(out):
                    print(path, file=stream)
            else:
                for script in rendering.scripts:
                    stream.write(f"# ==> {script.name} <==\n{script.text}")
            print(f"# dry run: {len(rendering.scripts)} batch scripts, nothing submitted", file=sys.stderr)
            return 0
        self.check()
        # A folder a run is writing is refused; the lock is given up before the jobs start (their collect step
        # takes it), which may be before this process ends
        prepare_output(out, loaded, resume=False, flag="--output-dir").release()
        jobs = launch(rendering, loaded, plan, log=lambda line: print(line, file=stream))
        from evalfleet.execution.cluster_metadata import write_submitted

        write_submitted(out, loaded, backend=self.name, submission={  # status submitted; the collect job ends it
            "runner_array": jobs["runners"], "collect_job": jobs.get("collect"), "server_jobs": jobs["server_jobs"]})
        print(f"submitted: runner array {jobs['runners']}, collect job {jobs['collect']}", file=stream)
        print(f"watch: squeue -j {','.join(all_jobs(jobs))}; logs in {rendering.paths.logs}", file=stream)
        print(f"results: {out}/index.html once collect job {jobs['collect']} has run (or later: evalfleet collect"
              f" {out})", file=stream)
        return 0


def _closing_feed_when_a_task_ends(feed: ShardFeed, array: str, workers: int,
                                   log: Callable[[str], None]) -> Callable[[set[str]], None]:
    """What to do with the ids squeue shows: a task of a fed array ends only once the feed is closed, so one that
    left the queue while it is open gave up (its watchdog, a time limit, too many requeues; a requeued task stays
    queued). Its shard will not finish and no decision waits on the others: the feed is closed, they finish what
    they took, and the array ends (the pipeline reports the Runs)."""
    tasks = {f"{array}_{i}" for i in range(workers)}

    def check(left: set[str]) -> None:
        if feed.closed or not tasks & left:
            return  # closed already, or the array not listed task by task
        gone = sorted(tasks - left)
        if gone:
            feed.close()
            log(f"slurm: array task {gone[0]} ended while the driver could still release shards: nothing more"
                " is released")

    return check
