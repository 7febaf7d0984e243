"""What every side of the Ray backend shares: Ray imported on first use (a UserError when it is missing) and
appending a text to a file, writing a task's timings files and its episodes' files."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Any

from evalfleet.errors import UserError
from evalfleet.layout import RUN_TIMINGS_DIR, TRAJECTORIES_DIR, VIDEOS_DIR

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


def write_timings(out: Path, run: str, files: dict[str, str]) -> None:
    """A shard task's phase-timings files (name → text), into OUT/<run>/timings/ where collect merges them."""
    for name, text in files.items():
        if Path(name).name != name or not name.endswith(".json"):
            continue  # only plain file names of the runner's own shape
        path = out / run / RUN_TIMINGS_DIR / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def write_episode_file(out: Path, run: str, rel: str, data: bytes) -> None:
    """An episode's file a shard task sent (worker_task.episode_files) into OUT/<run>/<rel>, whole (written aside and
    renamed into place, so a reader never sees half of it); only a path of the runner's own shape: a trajectory
    or one of its camera videos, or a recorded video (videos/<camera>/episode_N.mp4)."""
    path = PurePosixPath(rel)
    parts = path.parts
    trajectory = len(parts) in (2, 3) and parts[0] == TRAJECTORIES_DIR and path.suffix in (".arrow", ".mp4")
    video = len(parts) == 3 and parts[0] == VIDEOS_DIR and path.suffix == ".mp4"
    if path.is_absolute() or not (trajectory or video) or any(p in ("", ".", "..") or p.startswith(".") for p in parts):
        return
    dest = out / run / Path(*path.parts)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".tmp-{os.getpid()}-{dest.name}")
    tmp.write_bytes(data)
    os.replace(tmp, dest)
