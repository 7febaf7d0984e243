"""The runner → watchdog heartbeat: a small JSON file the runner rewrites while it works.

Contract (written by `HeartbeatWriter`, read by `read_heartbeat`):

    {"pid": int,          # the writing process
     "steps": int,        # cumulative env steps taken by this process
     "episodes": int,     # episodes finished by this process
     "time": float,       # time.time() when written
     "state": "starting" | "running" | "waiting" | "done",
     "shard": str,        # which shard this process runs
     "attempt": int}      # EVALFLEET_ATTEMPT of this process (0 when not supervised)

The file is replaced atomically (temporary file in the same folder, then `os.replace`), so a reader never sees a
half-written file. The watchdog passes the path in the environment variable `EVALFLEET_HEARTBEAT` and the attempt
number (1 for the first launch) in `EVALFLEET_ATTEMPT`. A runner should beat at least every second or so while it
works; `HeartbeatWriter` drops writes that come faster than `min_interval` unless the state changes.

Liveness is judged from *progress* (steps, episodes, state changing), never from the file merely being rewritten:
see `evalfleet.execution.watchdog` and docs/watchdog.md. It lives in rollout/ because the runner writes it;
the watchdog (execution/) only reads it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable

HEARTBEAT_ENV = "EVALFLEET_HEARTBEAT"
ATTEMPT_ENV = "EVALFLEET_ATTEMPT"
SUPERVISOR_ENV = "EVALFLEET_SUPERVISOR_PID"  # the watchdog's process, which a runner stops without
# "waiting": between shards, for the driver to release more (execution/shard_feed.py); idle by the driver's choice,
# so the watchdog takes each rewrite of a waiting heartbeat as a sign of life instead of asking for progress
STATES = ("starting", "running", "waiting", "done")


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    """Write `data` as JSON to `path` so that readers see either the old file or the new one, never a mix."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class HeartbeatWriter:
    """Writes the heartbeat file. `path=None` makes a writer that does nothing (runner not supervised).

    `beat()` records the newest counters and writes them when the state changed or at least `min_interval`
    seconds passed since the last write; `flush()` writes whatever is newer than the last write.
    """

    def __init__(
        self,
        path: str | os.PathLike | None,
        shard: str,
        *,
        min_interval: float = 0.5,
        attempt: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.path = Path(path) if path else None
        self.shard = str(shard)
        self.min_interval = float(min_interval)
        self.attempt = int(attempt) if attempt is not None else _attempt_from_env()
        self._clock = clock
        self.steps = 0
        self.episodes = 0
        self.state = "starting"
        self._last_write: float | None = None
        self._written: tuple[int, int, str] | None = None
        self.writes = 0

    @classmethod
    def from_env(cls, shard: str, **kwargs: Any) -> "HeartbeatWriter":
        """A writer for the path in EVALFLEET_HEARTBEAT, or a do-nothing writer when that is unset."""
        return cls(os.environ.get(HEARTBEAT_ENV) or None, shard, **kwargs)

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def beat(
        self,
        *,
        steps: int | None = None,
        episodes: int | None = None,
        state: str | None = None,
        force: bool = False,
    ) -> bool:
        """Record progress; write the file if due. Returns True when the file was written."""
        if steps is not None:
            self.steps = int(steps)
        if episodes is not None:
            self.episodes = int(episodes)
        if state is not None:
            if state not in STATES:
                raise ValueError(f"heartbeat state must be one of {', '.join(STATES)}, got {state!r}")
            self.state = state
        if self.path is None:
            return False
        now = self._clock()
        if not (force or self._due(now)):
            return False
        self._write(now)
        return True

    def advance(self, *, steps: int = 0, episodes: int = 0) -> bool:
        """Add progress to the running totals; write the file if due. `beat` without its argument handling: the
        runner calls it after every step."""
        self.steps += steps
        self.episodes += episodes
        if self.path is None:
            return False
        now = self._clock()
        if not self._due(now):
            return False
        self._write(now)
        return True

    def _due(self, now: float) -> bool:
        """A write is due: the state changed since the last one (or none was made), or `min_interval` passed."""
        written, last = self._written, self._last_write
        return written is None or written[2] != self.state or last is None or now - last >= self.min_interval

    def flush(self) -> bool:
        """Write now if the recorded counters differ from what was last written."""
        if self.path is None or self._written == (self.steps, self.episodes, self.state):
            return False
        self._write(self._clock())
        return True

    def done(self) -> None:
        """Say the work is finished (the process is about to exit)."""
        self.beat(state="done", force=True)

    def _write(self, now: float) -> None:
        assert self.path is not None
        write_json_atomic(
            self.path,
            {
                "pid": os.getpid(),
                "steps": self.steps,
                "episodes": self.episodes,
                "time": time.time(),
                "state": self.state,
                "shard": self.shard,
                "attempt": self.attempt,
            },
        )
        self._last_write = now
        self._written = (self.steps, self.episodes, self.state)
        self.writes += 1


def _attempt_from_env() -> int:
    try:
        return int(os.environ.get(ATTEMPT_ENV, "0"))
    except ValueError:
        return 0


def read_heartbeat(path: str | os.PathLike) -> dict[str, Any] | None:
    """The heartbeat in `path`, or None when it is missing, unreadable, not JSON or not shaped like a heartbeat."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    try:
        beat = {
            "pid": _as_int(data["pid"]),
            "steps": _as_int(data["steps"]),
            "episodes": _as_int(data["episodes"]),
            "time": _as_float(data["time"]),
            "state": data["state"],
            "shard": str(data.get("shard", "")),
        }
    except (KeyError, TypeError, ValueError):
        return None
    if beat["state"] not in STATES or beat["steps"] < 0 or beat["episodes"] < 0:
        return None
    if "attempt" in data:
        try:
            beat["attempt"] = _as_int(data["attempt"])
        except (TypeError, ValueError):
            return None
    return beat


def _as_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _as_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"expected a number, got {value!r}")
    return float(value)
