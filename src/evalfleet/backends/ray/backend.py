"""The `ray` backend (`evalfleet run/submit --backend ray`): connect to a cluster or start a local instance, run
the plan's shards through `driver.RayRun`, or hand the whole evaluation to the cluster as a Ray job (`jobs`)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Iterator

from evalfleet.errors import UserError
from evalfleet.backends.ray.settings import RaySettings
from evalfleet.execution.backends import BackendBase, ExecutionJob, WorkerResult
from evalfleet.execution.output_dir import mark_runs_running
from evalfleet.backends.ray.common import import_ray
from evalfleet.backends.ray.driver import RayRun
from evalfleet.backends.ray.jobs import submit_ray_job
from evalfleet.backends.ray.serving import RayServing
from evalfleet.execution.threads import WorkerThread, wait_all
from evalfleet.layout import EXPERIMENT_FILE
from evalfleet.secrets import ENV_PREFIX


def check_ray_arguments(address: str | None) -> None:
    """What can be refused before anything is written: Ray missing, a Jobs API address given to `run`."""
    import_ray()
    if address and address.startswith(("http://", "https://")):
        raise UserError(f"{address} looks like the Ray Jobs API (dashboard) address: give `evalfleet run` the "
                        "cluster address (HOST:6379, or auto), or submit with `evalfleet submit --backend ray "
                        f"--ray-address {address}`", where="command line", key="ray.address (--ray-address)")


class RayBackend(BackendBase):
    """`ray.address`: an existing cluster ("auto", "HOST:6379", "ray://..."), or None for a local instance sized to
    `workers` CPUs (default: this machine), dashboard off. If Ray is already initialised in this process it
    is used as is (and left connected)."""

    name = "ray"
    resume_hint = " --backend ray"
    cheap_shards = True  # a worker task's runner runs shard after shard: small last shards even out the end
    keeps_runners = True  # its worker tasks take the looks the driver releases in a job's feed (driver.py)

    def __init__(self, *, settings: RaySettings | None = None, workers: int | None = None):
        self.settings = settings or RaySettings()
        self.workers = workers  # checked by the caller (execution.api.check_workers)
        self.address = self.settings.address
        self._started = False
        self._workers = workers or 1  # what open() planned for: the room of the unserved Runs' workers
        self._serving: RayServing | None = None  # while serve(job) runs: its sink and servers, for every execute

    def check(self) -> None:
        check_ray_arguments(self.address)

    def check_experiment(self, loaded: Any, out: Path) -> None:
        """Its servers bind the node's address: each needs a key, or allow_unauthenticated."""
        from evalfleet.serving.planning import server_commands

        server_commands(loaded.experiment.runs, loaded.path, host="0.0.0.0")

    def open(self) -> int:
        ray = import_ray()
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": "WARNING"}
            secrets = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}  # exported by the pipeline
            if secrets:  # a cluster's workers get them through Ray's runtime env, never through a file
                kwargs["runtime_env"] = {"env_vars": secrets}
            if self.address:
                try:
                    ray.init(address=self.address, **kwargs)
                except Exception as exc:  # noqa: BLE001 - an unreachable or refusing cluster is the user's to fix
                    first = (str(exc).splitlines() or [""])[0]
                    raise UserError(f"cannot connect to the Ray cluster at {self.address}: {type(exc).__name__}: "
                                    f"{first} (is it running? does RAY_AUTH_MODE / the auth token match the "
                                    "cluster's?)", where="command line", key="ray.address (--ray-address)") from None
            else:
                # Records flow through actor calls, not the object store: a small one is plenty.
                ray.init(num_cpus=self.workers or os.cpu_count() or 1, include_dashboard=False,
                         object_store_memory=self.settings.object_store_mb * 1024 * 1024, **kwargs)
            self._started = True
        self._workers = self.workers or int(ray.cluster_resources().get("CPU", 1))
        return self._workers

    @contextlib.contextmanager
    def serve(self, job: ExecutionJob) -> Iterator[Path]:
        """The record sink and the plan's policy servers (placement groups, server actors), kept for the
        `execute` in this serve (serving.py)."""
        ray = import_ray()
        serving = RayServing(job.plan, job.out)
        self._serving = serving
        try:
            serving.open(ray)
            yield job.out / EXPERIMENT_FILE
        finally:
            self._serving = None
            serving.close(ray)

    def execute(self, job: ExecutionJob, experiment_file: Path) -> list[WorkerResult]:
        """Worker tasks that each start one runner and take the plan's shards (or, given the job's feed, the
        shards released there) from a queue; served Runs' workers in their server's placement group (RayRun)."""
        if self._serving is None:  # called outside serve: one of its own, for this execute alone
            with self.serve(job) as served_file:
                return self.execute(job, served_file)
        from evalfleet.execution.progress import ProgressTracker, watch_progress

        run = RayRun(job.plan, job.out, job.watchdog, self._serving, workers=self._workers, feed=job.feed)
        mark_runs_running(job.out, job.plan)
        thread = WorkerThread(run.execute, name="ray-driver")
        thread.start()
        try:
            watch_progress([thread], ProgressTracker.for_plan(job.out, job.plan), job.show_progress)
        except KeyboardInterrupt:
            run.stop.set()
            wait_all([thread])  # not join(): an interrupted join can leave a running thread marked stopped
            raise
        wait_all([thread])
        if run.crash is not None:
            raise run.crash
        return run.results

    def close(self) -> None:
        if self._started:
            import_ray().shutdown()
            self._started = False

    def submit(self, loaded: Any, *, dry_run: bool, output_dir: str | None, stream: Any) -> int:
        """The whole evaluation as one Ray job (`submit_ray_job`); `address` is the Jobs API."""
        if not self.address:
            raise UserError("--backend ray needs --ray-address http://HEAD:8265 (or ray.address=...: the Ray Jobs "
                            "API of the cluster)", where="command line", key="ray.address (--ray-address)")
        if dry_run:
            print(f"# would submit a Ray job to {self.address}: evalfleet run {EXPERIMENT_FILE} --backend ray"
                  f" --ray-address auto --no-progress, with this {EXPERIMENT_FILE}:", file=stream)
            print(loaded.resolved_yaml(), end="", file=stream)
            return 0
        job_id = submit_ray_job(loaded.path, list(loaded.overrides), self.address)
        print(f"submitted Ray job {job_id} to {self.address}", file=stream)
        return 0
