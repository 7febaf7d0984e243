"""Checks that backend settings share (a plug-in backend may use them too): numbers that are not booleans, values
placed on one line of a script."""

from __future__ import annotations

import re
from typing import Any

CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def not_bool(v: Any) -> Any:
    """true/false is not a number (pydantic would read true as 1)."""
    if isinstance(v, bool):
        raise ValueError(f"must be a number, not {str(v).lower()}")  # noqa: TRY004 (pydantic reports ValueError)
    return v


def one_line(v: Any, what: str) -> Any:
    """A path, URL or requirement on one line: no NUL, line break or other control character."""
    if isinstance(v, str) and CONTROL.search(v):
        raise ValueError(f"must be {what} on one line: no NUL, line break or other control character")
    return v
