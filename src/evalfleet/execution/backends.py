"""Backends: where the shards of a plan run. A registry, so a cluster engine plugs in like an environment.

The pipeline (execution/pipeline.py) drives a backend through one protocol:

    check()            refuse what can be refused before anything is written (missing package, bad address)
    open() -> int      connect; how many workers to plan shards for (this machine's CPUs, a Ray cluster's)
    serve(job)         a context manager: start the policy servers the plan needs where this backend runs
                       them, and yield the experiment file runners load (wired to those servers)
    execute(job, experiment_file) -> [WorkerResult]
                       run every pending shard under the watchdog (a backend that `keeps_runners`: every
                       shard released in `job.feed` until it closes, when the job has one), appending records
                       to OUT/<run>/parts/, showing progress from the growing logs; a worker that gives up is
                       reported in its WorkerResult (its Runs are marked failed by the pipeline); Ctrl-C stops
                       everything, keeps what finished and propagates KeyboardInterrupt
    close()            disconnect
    submit(loaded, ...) -> int
                       hand the whole Experiment to a cluster instead (`evalfleet submit`): OSMO workflows,
                       a Ray job

A backend registers its spec (factory, settings model, capabilities) in evalfleet/backend_registry.py;
`get_backend` builds one from its name and the Experiment's settings under its root (`ray.address=...`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterable, Iterator, Protocol, TextIO

from evalfleet.backend_registry import BACKENDS, spec_of
from evalfleet.backend_registry import backend_settings as typed_settings
from evalfleet.errors import UserError
from evalfleet.execution.watchdog import WatchdogConfig
from evalfleet.experiment.loading import LoadedExperiment
from evalfleet.experiment.plan import Plan, Shard
from evalfleet.execution.shard_feed import ShardFeed
from evalfleet.layout import EXPERIMENT_FILE


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
    # Given only to a backend that `keeps_runners`: its runners take the shards the driver releases in this feed
    # until it is closed (execution/shard_feed.py), instead of `plan.shards`; the plan still covers every shard
    # that may be released (for sizes, progress and the Runs' folders).
    feed: "ShardFeed | None" = None

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
    keeps_runners: bool  # its runners take shards from a job's `feed` while they run (sequential stopping's looks)

    def check(self) -> None: ...

    def check_experiment(self, loaded: LoadedExperiment, out: Path) -> None: ...

    def open(self) -> int: ...

    def serve(self, job: ExecutionJob) -> ContextManager[Path]: ...

    def execute(self, job: ExecutionJob, experiment_file: Path) -> list[WorkerResult]: ...

    def close(self) -> None: ...

    # A backend whose spec says `resubmits` also takes `resume=True` (submit again for a folder whose run died).
    def submit(self, loaded: LoadedExperiment, *, dry_run: bool, output_dir: str | None, stream: TextIO) -> int: ...


class BackendBase:
    """Defaults: a backend that can only execute or only submit says so in one line."""

    name = "?"
    resume_hint = ""
    cheap_shards = False  # a shard is a process or a task of its own (Ray, Slurm, OSMO): as few as balance allows
    keeps_runners = False  # each `execute` starts its runners: sequential stopping's looks are one execute each

    def check(self) -> None:
        pass

    def open(self) -> int:
        raise UserError(f"the {self.name} backend submits to a cluster: use `evalfleet submit --backend {self.name}`",
                        where="command line", key="--backend")

    def check_experiment(self, loaded: LoadedExperiment, out: Path) -> None:
        """What this backend refuses in the Experiment before the output folder `out` is made (its servers'
        programs, its settings); nothing by default."""

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


def load_backends() -> None:
    """Every backend's spec registered: the built-in ones and the plug-ins' (plugins.load_registries)."""
    from evalfleet.plugins import load_registries

    load_registries()


def get_backend(name: str, settings: dict[str, Any] | None = None, *, workers: int | None = None) -> Backend:
    """The backend `name`, built with its typed settings from `settings` (the Experiment's backend settings,
    `LoadedExperiment.backend_settings`); an unknown name or setting is a UserError."""
    load_backends()
    spec_of(name)  # an unknown name: a UserError listing the known ones
    entry = BACKENDS.get(name)
    assert entry is not None
    return entry.factory(settings=typed_settings(name, settings), workers=workers)


def either(names: Iterable[str]) -> str:
    """`local, ray or slurm`."""
    listed = list(names)
    return " or ".join(filter(None, [", ".join(listed[:-1]), listed[-1] if listed else ""]))


def check_capabilities(loaded: LoadedExperiment, name: str, *, submitting: bool) -> None:
    """What the Experiment needs against what backend `name` declares (its spec), before anything is written:
    running or submitting at all, waves for sequential stopping, policy servers."""
    spec = spec_of(name)
    exp = loaded.experiment
    if submitting and not spec.submits:
        raise UserError(f"the {name} backend runs here: use `evalfleet run --backend {name}`", where="command line",
                        key="--backend")
    if not submitting and not spec.executes:
        raise UserError(f"the {name} backend submits to a cluster: use `evalfleet submit --backend {name}`",
                        where="command line", key="--backend")
    if not spec.sequential_waves:
        for run_name, run in exp.runs.items():
            if run.stopping is not None:
                key = "stopping" if exp.stopping is not None else f"runs.{run_name}.stopping"
                waves = either(n for n in BACKENDS.names() if spec_of(n).sequential_waves)
                raise UserError(
                    f"sequential stopping releases episodes a wave at a time, which the {name} backend cannot do "
                    f"(its tasks are fixed at submission): run it with --backend {waves}, or remove `stopping`",
                    where=loaded.path, key=key)
    from evalfleet.serving.bindings import binding_for, needs_server

    for run_name, run in exp.runs.items():
        options = run.policy.options()
        if not needs_server(run.policy.type, options):
            continue
        if not spec.served_policies:
            raise UserError(f"Run {run_name!r} needs a policy server, which the {name} backend does not start: "
                            "give its policy a client of a running server, or choose another --backend",
                            where=loaded.path, key=f"runs.{run_name}.policy.type")
        binding = binding_for(run.policy.type)
        gpus = binding.resources(options).gpus if binding is not None else 0
        if gpus and not spec.gpus:
            able = either(n for n in BACKENDS.names() if spec_of(n).gpus)
            raise UserError(f"Run {run_name!r}'s policy server needs {gpus} GPU(s), which the {name} backend cannot "
                            f"give it: run it with --backend {able}, or ask for none", where=loaded.path,
                            key=f"runs.{run_name}.policy.server_resources.gpus")
