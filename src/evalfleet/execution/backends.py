"""Backends: where the shards of a plan run. A registry, so a cluster engine plugs in like an environment.

The pipeline (execution/pipeline.py) drives a backend through one protocol:

    check()            refuse what can be refused before anything is written (missing package, bad address)
    open() -> int      connect; how many workers to plan shards for (this machine's CPUs, a Ray cluster's)
    serve(job)         a context manager: start the policy servers the plan needs where this backend runs
                       them, and yield the experiment file runners load (wired to those servers)
    execute(job, experiment_file) -> [WorkerResult]
                       run every pending shard under the watchdog, appending records to OUT/<run>/parts/,
                       showing progress from the growing logs; a worker that gives up is reported in its
                       WorkerResult (its Runs are marked failed by the pipeline); Ctrl-C stops everything,
                       keeps what finished and propagates KeyboardInterrupt
    close()            disconnect
    submit(loaded, ...) -> int
                       hand the whole Experiment to a cluster instead (`evalfleet submit`): OSMO workflows,
                       a Ray job

`local` and `ray` execute; `osmo` and `ray` submit. A backend module registers a factory
`factory(workers=..., address=...) -> Backend` with `@BACKENDS.register(name)`.
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator, Protocol, TextIO

from evalfleet.errors import UserError
from evalfleet.execution.standby import EvalfleetMain
from evalfleet.execution.watchdog import WatchdogConfig
from evalfleet.experiment.loading import LoadedExperiment
from evalfleet.experiment.plan import Plan, Shard
from evalfleet.layout import EXPERIMENT_FILE
from evalfleet.registry import Registry

BUILTIN_BACKENDS = {  # name -> the module that registers it
    "local": "evalfleet.execution.local",
    "ray": "evalfleet.execution.ray.backend",
    "osmo": "evalfleet.execution.osmo",
    "slurm": "evalfleet.execution.slurm",
}


@dataclass
class ExecutionJob:
    """What a backend is given to execute."""

    loaded: LoadedExperiment
    plan: Plan
    out: Path  # the prepared output folder
    watchdog: WatchdogConfig = field(default_factory=WatchdogConfig.local)
    show_progress: bool = True
    log: Callable[[str], None] = print
    # Driver-side work worth starting while the workers run (the pipeline preloads what finalize imports, on a
    # thread of its own: the call returns at once); a backend may call it once, or never. On cores the workers
    # fill, it then shares every core's time with them, instead of holding one core alone at the end.
    background_work: Callable[[], None] | None = None
    # `evalfleet run` (whose process is evalfleet's own) hands down the command's own main: with it, runners'
    # first attempts may be forked from this process and run it (execution/standby.py). A backend that
    # cannot fork ignores it.
    fork_runners: EvalfleetMain | None = None
    # ... and, where it could start one, a template process those runners are forked from instead, which has
    # imported what they need (execution/runner_template.RunnerTemplate; not imported here: it imports the runner's
    # modules, and they import this one).
    runner_template: Any = None

    def ordered_shards(self) -> list[Shard]:
        return ordered_shards(self.plan)


def ordered_shards(plan: Plan) -> list[Shard]:
    """Earliest episodes of every Run first, so every Run makes progress from the start."""
    order = list(plan.runs)
    return sorted(plan.shards, key=lambda s: (s.start, order.index(s.run)))


@dataclass
class WorkerResult:
    """How one worker (a local process, a Ray shard task) ended, and the shards it ran."""

    worker: int
    shards: list[Shard]
    result: Any = None  # watchdog.WatchdogResult
    error: str | None = None

    @property
    def problem(self) -> str | None:
        if self.error:
            return self.error
        if self.result is not None and self.result.state != "completed":
            return self.result.reason
        return None


class Backend(Protocol):
    name: str
    resume_hint: str  # the flags that continue an interrupted run on this backend
    cheap_shards: bool  # one process runs many shards, so a default plan ends each Run with smaller ones

    def check(self) -> None: ...

    def open(self) -> int: ...

    def serve(self, job: ExecutionJob) -> ContextManager[Path]: ...

    def execute(self, job: ExecutionJob, experiment_file: Path) -> list[WorkerResult]: ...

    def close(self) -> None: ...

    def submit(self, loaded: LoadedExperiment, *, dry_run: bool, output_dir: str | None, stream: TextIO) -> int: ...


class BackendBase:
    """Defaults: a backend that can only execute or only submit says so in one line."""

    name = "?"
    resume_hint = ""
    cheap_shards = False  # a shard is a process or a task of its own (Ray, Slurm, OSMO): as few as balance allows

    def check(self) -> None:
        pass

    def open(self) -> int:
        raise UserError(f"the {self.name} backend submits to a cluster: use `evalfleet submit --backend {self.name}`",
                        where="command line", key="--backend")

    @contextlib.contextmanager
    def serve(self, job: ExecutionJob) -> Iterator[Path]:
        yield job.out / EXPERIMENT_FILE

    def execute(self, job: ExecutionJob, experiment_file: Path) -> list[WorkerResult]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def submit(self, loaded: LoadedExperiment, *, dry_run: bool, output_dir: str | None, stream: TextIO) -> int:
        raise UserError(f"the {self.name} backend runs here: use `evalfleet run --backend {self.name}`",
                        where="command line", key="--backend")


BACKENDS: Registry[Backend] = Registry("backend")


def load_backends() -> None:
    from evalfleet.plugins import load_registries

    for module in BUILTIN_BACKENDS.values():
        importlib.import_module(module)
    load_registries()  # plugins may add backends


def get_backend(name: str, *, workers: int | None = None, address: str | None = None) -> Backend:
    if name in BUILTIN_BACKENDS:  # only its own module: the others' imports cost `evalfleet run` ~50 ms
        importlib.import_module(BUILTIN_BACKENDS[name])
    else:
        load_backends()
    entry = BACKENDS.get(name)
    if entry is None:
        raise UserError(f"unknown backend {name!r}{BACKENDS.suggest(name)}", where="command line", key="--backend")
    return entry.factory(workers=workers, address=address)
