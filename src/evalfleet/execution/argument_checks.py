"""Checks of an argument shared by the command line and the Python API (execution/api.py): each takes the
`where`/`key` that names the argument, so the same rule speaks of `--workers` there and of `workers=...` here.
Light to import: `evalfleet run` checks its flags with them before it imports the pipeline."""

from __future__ import annotations

from typing import Any

from evalfleet.errors import UserError


def shown(value: Any) -> str:
    """A value as an error quotes it: its repr, cut at 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def check_count(value: Any, *, where: str, key: str | None = None, optional: bool = True) -> int | None:
    """An integer >= 1 (a bool, float or string is refused), or None when `optional`."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"expected an integer >= 1, got {shown(value)}", where=where, key=key)
    return value


def check_workers(workers: Any, *, where: str = "command line", key: str | None = "--workers") -> int | None:
    """The one rule for the number of workers, for `evalfleet run`/`plan` and the Python API."""
    return check_count(workers, where=where, key=key)
