"""Feedback during long library work (reading many record files, writing a big report).

Library code reports through `logging` (loggers under `evalfleet.`) at INFO, and only when the work is
long (`is_long`: at least `LONG_FILES` files or `LONG_EPISODES` episodes), so a small folder stays
quiet and library callers see nothing unless they configure logging. A command line handler calls
`enable_cli_feedback()`: INFO lines of those loggers go to stderr, one line each, and `track()` draws a
rich progress bar on stderr instead when stderr is a terminal (transient: it is gone when the work is).
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Iterable, Iterator, Sequence, TypeVar

T = TypeVar("T")

LONG_FILES = 20
LONG_EPISODES = 10_000
_FORMAT = "evalfleet: %(message)s"
_bars = False


def is_long(*, files: int = 0, episodes: int = 0) -> bool:
    """Work worth a word to the user while it happens."""
    return files >= LONG_FILES or episodes >= LONG_EPISODES


class _CliHandler(logging.StreamHandler):
    """The one stderr handler the command line adds (tagged by its class, so it is added once). It writes
    to whatever `sys.stderr` is when a line is logged (a caller may have replaced it since)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def enable_cli_feedback(stream: Any = None) -> None:
    """For command line handlers: INFO lines of the `evalfleet` loggers on stderr, progress bars when
    `stream` (default stderr) is a terminal."""
    global _bars
    stream = stream or sys.stderr
    root = logging.getLogger("evalfleet")
    if not any(isinstance(h, _CliHandler) for h in root.handlers):
        handler = _CliHandler()
        handler.setFormatter(logging.Formatter(_FORMAT))
        root.addHandler(handler)
    if root.getEffectiveLevel() > logging.INFO:
        root.setLevel(logging.INFO)
    try:
        _bars = bool(stream.isatty())
    except (AttributeError, ValueError):
        _bars = False


def disable_cli_feedback() -> None:
    """Undo `enable_cli_feedback` (the command is done: in-process callers of `evalfleet.cli.main`, such as
    tests or notebooks, get the library's quiet logging back)."""
    global _bars
    root = logging.getLogger("evalfleet")
    for handler in [h for h in root.handlers if isinstance(h, _CliHandler)]:
        root.removeHandler(handler)
    root.setLevel(logging.NOTSET)
    _bars = False


def track(items: Sequence[T] | Iterable[T], description: str, *, total: int | None = None) -> Iterator[T]:
    """The items, with a progress bar on stderr while they are consumed, when the command line asked
    for feedback, stderr is a terminal and the work is long; otherwise just the items."""
    size = total if total is not None else (len(items) if hasattr(items, "__len__") else 0)  # type: ignore[arg-type]
    if not (_bars and is_long(files=size)):
        yield from items
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=size)
        for item in items:
            yield item
            bar.advance(task)
