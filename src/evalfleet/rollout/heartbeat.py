"""The runner's heartbeat: progress (env steps, episodes) a watchdog judges liveness from.

A small JSON file replaced atomically: {"pid", "steps", "episodes", "time", "state", "shard"}.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

HEARTBEAT_ENV = "EVALFLEET_HEARTBEAT"


class HeartbeatWriter:
    def __init__(self, path: str | os.PathLike[str] | None, shard: str = "", min_interval_s: float = 0.5):
        self.path = Path(path) if path else None
        self.shard = shard
        self.min_interval_s = min_interval_s
        self.steps = 0
        self.episodes = 0
        self._state = ""
        self._last_write = 0.0

    def beat(self, *, steps: int = 0, episodes: int = 0, state: str = "running", shard: str | None = None) -> None:
        """Add progress; written at most every `min_interval_s` unless the state or shard changes."""
        self.steps += steps
        self.episodes += episodes
        changed = state != self._state or (shard is not None and shard != self.shard)
        if shard is not None:
            self.shard = shard
        now = time.monotonic()
        if self.path is None or (not changed and now - self._last_write < self.min_interval_s):
            return
        self._state = state
        self._last_write = now
        self._write()

    def _write(self) -> None:
        assert self.path is not None
        data = {"pid": os.getpid(), "steps": self.steps, "episodes": self.episodes, "time": time.time(),
                "state": self._state, "shard": self.shard}
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.path)


def read_heartbeat(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
