"""Episode records: one JSON line per finished episode, append-only, flushed per line.

Readers tolerate a torn last line (a crash mid-write) and duplicate episodes (the last complete
record of an episode wins), so a log can always be resumed or collected.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

RECORDS_FILE = "episode_results.jsonl"
STATUSES = ("success", "failure", "error")


@dataclass
class EpisodeRecord:
    run: str
    task: str
    policy: str
    episode: int
    seed: int
    status: str  # success | failure | error (infrastructure: excluded from rates, retried)
    success: bool | None
    episode_length: int
    duration_s: float
    variations: dict[str, Any] = field(default_factory=dict)
    attempt: int = 1
    timestamp: float = field(default_factory=time.time)
    error: str | None = None
    video: dict[str, str] | None = None
    policy_latency_ms: float | None = None
    progress: float | None = None

    def to_json(self) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if v is not None or k == "success"}
        # Arena-compatible aliases so Arena's readers work on evalfleet output.
        data["job_name"] = self.run
        data["env_id"] = self.episode
        data["episode_in_env"] = 0
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "EpisodeRecord":
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)


def encode_record(record: EpisodeRecord | dict[str, Any]) -> str:
    data = record.to_json() if isinstance(record, EpisodeRecord) else record
    return json.dumps(data, separators=(",", ":"), default=_json_default) + "\n"


def _json_default(value: Any) -> Any:
    # numpy scalars and arrays appear in variation values.
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


class RecordWriter:
    """Appends records to a JSONL file, one flushed line per episode. A flushed line survives the
    process being killed; `fsync=True` also makes it survive a machine crash, at a cost per episode."""

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._file: IO[str] = open(self.path, "a", encoding="utf-8")
        self._repair_torn_tail()

    def _repair_torn_tail(self) -> None:
        # A crash mid-write leaves a line without "\n"; start on a fresh line so the next record stays whole.
        size = self.path.stat().st_size
        if size == 0:
            return
        with open(self.path, "rb") as f:
            f.seek(size - 1)
            if f.read(1) != b"\n":
                self._file.write("\n")
                self._file.flush()

    def append(self, record: EpisodeRecord | dict[str, Any]) -> None:
        self._file.write(encode_record(record))
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_record_dicts(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Every complete JSON object line in a file; torn or garbled lines are skipped."""
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.endswith("\n"):
                    break  # torn last line
                line = line.strip()
                if not line:
                    continue
                try:
                    data = json.loads(line)
                except json.JSONDecodeError:
                    continue
                # Only objects, and only with a numeric attempt (readers take int() of it): garbled lines are skipped.
                if isinstance(data, dict) and _numeric(data.get("attempt", 1)):
                    yield data
    except FileNotFoundError:
        return


def _numeric(value: Any) -> bool:
    return isinstance(value, int) or (isinstance(value, float) and value == value and abs(value) != float("inf"))


def latest_by_episode(records: Iterable[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """(run, episode) → the last complete record of it (later lines win)."""
    latest: dict[tuple[str, int], dict[str, Any]] = {}
    for rec in records:
        run = rec.get("run", rec.get("job_name"))
        episode = rec.get("episode", rec.get("env_id"))
        if run is None or episode is None:
            continue
        try:
            latest[(str(run), int(episode))] = rec
        except (TypeError, ValueError, OverflowError):  # a garbled record ("x", [1], 1e400): skipped like a torn line
            continue
    return latest


def read_records(paths: Iterable[str | os.PathLike[str]]) -> list[dict[str, Any]]:
    """Records from several files, deduplicated (last wins, files in the order given), sorted by (run, episode)."""
    def all_lines() -> Iterator[dict[str, Any]]:
        for p in paths:
            yield from iter_record_dicts(p)

    latest = latest_by_episode(all_lines())
    return [latest[k] for k in sorted(latest)]
