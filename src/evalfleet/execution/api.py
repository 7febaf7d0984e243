"""The Python API's own checks: `evalfleet.run(...)` and `evalfleet.evaluate(...)` refuse a wrong argument with
a UserError that names the argument ("evalfleet.run(workers=...): expected an integer >= 1, got '2'"),
before anything is written. The checks shared with the command line (`check_workers`, execution/argument_checks.py)
take a `where`, so that the same rule speaks of `--workers` there and of `workers=...` here.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable

from evalfleet.backend_registry import DEFAULT_BACKEND
from evalfleet.errors import UserError
from evalfleet.execution.argument_checks import check_count, check_workers, shown
from evalfleet.execution.pipeline import run as pipeline_run
from evalfleet.execution.pipeline import stderr_log
from evalfleet.execution.watchdog import WatchdogConfig
from evalfleet.experiment.loading import LoadedExperiment
from evalfleet.outputs.result import ExperimentResult


def argument(function: str, name: str) -> str:
    """How an error names an argument of the API: `evalfleet.run(workers=...)`."""
    return f"evalfleet.{function}({name}=...)"


def check_flag(value: Any, *, where: str) -> bool:
    if not isinstance(value, bool):
        raise UserError(f"expected True or False, got {shown(value)}", where=where)
    return value


def check_strings(value: Any, *, where: str, what: str, optional: bool = False) -> list[str] | None:
    """A list (any iterable but a string) of strings."""
    if value is None and optional:
        return None
    if isinstance(value, (str, bytes)):
        raise UserError(f"expected a list of {what}, got the single string {shown(value)} (write [{value!r}])",
                        where=where)
    try:
        items = list(value)
    except TypeError:
        raise UserError(f"expected a list of {what}, got {shown(value)}", where=where) from None
    wrong = [item for item in items if not isinstance(item, str)]
    if wrong:
        raise UserError(f"expected a list of {what}, got {shown(wrong[0])} in it", where=where)
    return items


def check_experiment(value: Any, *, where: str) -> None:
    if not isinstance(value, (str, os.PathLike, LoadedExperiment)):
        raise UserError("expected the path of an Experiment file (str or os.PathLike) or a LoadedExperiment, "
                        f"got {type(value).__name__}", where=where)


def check_path(value: Any, *, where: str) -> None:
    if value is not None and not isinstance(value, (str, os.PathLike)):
        raise UserError(f"expected a folder path (str or os.PathLike) or None, got {type(value).__name__}",
                        where=where)


def check_common(function: str, *, experiment: Any, overrides: Any, output: Any, workers: Any, progress: Any,
                 watchdog: Any, log: Any) -> list[str]:
    """What `run` and `evaluate` share; the overrides as a list."""
    check_experiment(experiment, where=argument(function, "experiment"))
    listed = check_strings(overrides, where=argument(function, "overrides"), what="'key=value' strings")
    check_path(output, where=argument(function, "output"))
    check_workers(workers, where=argument(function, "workers"), key=None)
    check_flag(progress, where=argument(function, "progress"))
    if watchdog is not None and not isinstance(watchdog, WatchdogConfig):
        raise UserError(f"expected a WatchdogConfig or None, got {type(watchdog).__name__}",
                        where=argument(function, "watchdog"))
    if not callable(log):
        raise UserError(
            f"expected a function taking one line of text, got {shown(log)}", where=argument(function, "log")
        )
    return listed or []


def run(experiment: str | os.PathLike[str] | LoadedExperiment, *, overrides: Iterable[str] = (),
        output: str | os.PathLike[str] | None = None, backend: str = DEFAULT_BACKEND, workers: int | None = None,
        resume: bool = False, progress: bool = True, shard_size: int | None = None,
        watchdog: WatchdogConfig | None = None,
        log: Callable[[str], None] = stderr_log) -> ExperimentResult:
    """`evalfleet.run`: every argument checked (a UserError naming it), then `execution.pipeline.run`, whose
    docstring says what each one means."""
    from evalfleet.backend_registry import BACKENDS
    from evalfleet.execution.backends import load_backends

    listed = check_common("run", experiment=experiment, overrides=overrides, output=output, workers=workers,
                          progress=progress, watchdog=watchdog, log=log)
    check_flag(resume, where=argument("run", "resume"))
    check_count(shard_size, where=argument("run", "shard_size"))
    if not isinstance(backend, str):
        raise UserError(f"expected a backend's name (str), got {shown(backend)}", where=argument("run", "backend"))
    load_backends()
    if BACKENDS.get(backend) is None:
        raise UserError(f"unknown backend {backend!r}{BACKENDS.suggest(backend)}", where=argument("run", "backend"))
    return pipeline_run(experiment, overrides=listed, output=output, backend=backend, workers=workers, resume=resume,
                        progress=progress, shard_size=shard_size, watchdog=watchdog, log=log)
