"""Logging one Point to every configured sink without ever failing or blocking the run.

Each sink runs on a daemon thread for at most `tracking.timeout_s` (its own network waits are bounded
shorter); the trackers' own chatter (stdout, stderr, their loggers) is held back while it runs. What a sink
would log is always kept as one JSON line of OUT/tracking/<sink>.jsonl (with `delivered` and, when it was
not, the problem); a sink that fails or does not finish in time is one warning line, and the run's results
are untouched."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

from evalfleet.experiment.loading import LoadedExperiment
from evalfleet.experiment.tracking import SinkOptions
from evalfleet.outputs.result import ExperimentResult
from evalfleet.outputs.tracking.payload import Point, build_point, tracker_run_name
from evalfleet.outputs.tracking.sinks import SINKS, SinkContext
from evalfleet.secrets import mask_url

TRACKING_DIR = "tracking"  # OUT/tracking/: the local copies, default stores of the offline sinks
QUIET_LOGGERS = ("mlflow", "alembic", "urllib3", "requests", "wandb", "trackio", "httpx", "httpcore",
                 "huggingface_hub", "tensorboardX", "sqlalchemy", "git")


def log_to_trackers(loaded: LoadedExperiment, out: Path, result: ExperimentResult, *, step: int | None,
                    log: Callable[[str], None]) -> dict[str, str | None]:
    """Log the finished run to every sink of `tracking:`; sink → None (delivered) or the problem."""
    tracking = loaded.experiment.tracking
    if tracking is None or not tracking.sinks():
        return {}
    folder = out / TRACKING_DIR
    folder.mkdir(parents=True, exist_ok=True)
    point = build_point(loaded, out, result, step)
    outcome: dict[str, str | None] = {}
    for name, options in tracking.sinks().items():
        context = SinkContext(out, folder, tracker_run_name(options, loaded, out, step is not None), tracking.timeout_s)
        problem = deliver(name, options, point, context)
        keep_copy(folder / f"{name}.jsonl", {**point.copy_line(name, context.tracker_run),
                                             "delivered": problem is None, "problem": problem})
        if problem is not None:
            log(f"tracking: {name} not logged ({problem}); what it would log is in {folder / (name + '.jsonl')}")
        outcome[name] = problem
    return outcome


def deliver(name: str, options: SinkOptions, point: Point, context: SinkContext) -> str | None:
    """Run one sink on its own thread within the timeout; None when it logged, else the problem in one line."""
    failure: list[BaseException] = []

    def target() -> None:
        try:
            SINKS.get(name).factory(options, point, context)
        except BaseException as exc:  # noqa: BLE001 -- any failure of a tracker becomes one warning, never the run's
            failure.append(exc)

    thread = threading.Thread(target=target, name=f"evalfleet-tracking-{name}", daemon=True)
    with quiet():
        thread.start()
        thread.join(context.timeout_s)
    if thread.is_alive():
        return f"no answer within {context.timeout_s:g} s (tracking.timeout_s)"
    if failure:
        exc = failure[0]
        text = " ".join(str(exc).split())[:300] or "no message"
        return mask_url(f"{type(exc).__name__}: {text}")
    return None


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The trackers' prints and log records held back (their banners would drown the run's own lines)."""
    loggers = [logging.getLogger(name) for name in QUIET_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def keep_copy(path: Path, line: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(line, default=str) + "\n")
