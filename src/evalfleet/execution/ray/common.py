"""What every side of the Ray backend shares: Ray imported on first use (a UserError when it is missing) and
appending a text to a file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalfleet.errors import UserError

RAY_MISSING = "the Ray backend needs Ray: pip install 'evalfleet[ray]' (or 'ray[default]>=2.60')"


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise UserError(RAY_MISSING, where="--backend ray") from exc
    return ray


def append_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
