"""The watchdog's settings: `WatchdogConfig` (the defaults of cluster tasks, and the `local()` preset for runners
evalfleet starts itself) and `config_problems`, the one check of every value, with the flag the user typed."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from evalfleet.errors import UserError

# The command-line flag of each setting: what an error about a bad value names.
FLAGS = {
    "startup_timeout": "--startup-timeout",
    "stall_timeout": "--stall-timeout",
    "max_restarts": "--max-restarts",
    "poll": "--poll",
    "term_grace": "--term-grace",
    "backoff": "--backoff",
    "backoff_max": "--backoff-max",
}


@dataclass(frozen=True)
class WatchdogConfig:
    """Timeouts in seconds. `max_restarts` relaunches at most (so at most max_restarts + 1 attempts)."""

    startup_timeout: float = 600.0
    stall_timeout: float = 180.0
    max_restarts: int = 3
    poll: float = 1.0
    term_grace: float = 10.0
    backoff: float = 5.0
    backoff_max: float = 300.0
    backoff_factor: float = 2.0

    def __post_init__(self) -> None:
        # Checked here so every caller (the CLI, `evalfleet run`, a Ray task) refuses a bad value before
        # anything is written, with the flag the user typed.
        for name, problem in config_problems(self):
            raise UserError(problem, where="command line", key=FLAGS.get(name, name))

    @classmethod
    def local(cls, **changes: Any) -> "WatchdogConfig":
        """The preset for runners evalfleet starts and watches itself (the local and Ray backends): their Python
        starts in seconds, so the startup grace is shorter and polling and restarts quicker than a cluster
        task's defaults above."""
        return dataclasses.replace(cls(startup_timeout=300.0, poll=0.5, term_grace=5.0, backoff=1.0,
                                       backoff_max=30.0), **changes)

    def backoff_delay(self, restart: int) -> float:
        """Seconds to wait before relaunch number `restart` (1-based)."""
        try:
            return min(self.backoff * self.backoff_factor ** max(restart - 1, 0), self.backoff_max)
        except OverflowError:  # factor ** restart beyond a float: long past backoff_max
            return self.backoff_max


MAX_WATCHDOG_SECONDS = 30 * 24 * 3600.0  # far beyond any timeout, far below threading.TIMEOUT_MAX
MAX_RESTARTS = 10_000


def config_problems(cfg: Any) -> list[tuple[str, str]]:
    """(field, problem) for every bad value in anything shaped like a WatchdogConfig: every number finite,
    of the right kind, within bounds (NaN compares false to everything, so each test is written to fail on it)."""
    out = []

    def seconds(name: str, *, zero_ok: bool) -> None:
        value = getattr(cfg, name)
        kind = "zero or more" if zero_ok else "a positive number of"
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            (0 <= value if zero_ok else 0 < value) and value <= MAX_WATCHDOG_SECONDS
        ):
            out.append((name, f"must be {kind} seconds, at most {MAX_WATCHDOG_SECONDS:.0f} (30 days), got {value!r}"))

    for name in ("startup_timeout", "stall_timeout", "poll"):
        seconds(name, zero_ok=False)
    for name in ("term_grace", "backoff", "backoff_max"):
        seconds(name, zero_ok=True)
    restarts = cfg.max_restarts
    if isinstance(restarts, bool) or not isinstance(restarts, int) or not 0 <= restarts <= MAX_RESTARTS:
        out.append(("max_restarts", f"must be a whole number from 0 to {MAX_RESTARTS}, got {restarts!r}"))
    factor = cfg.backoff_factor
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 1 <= factor <= 100:
        out.append(("backoff_factor", f"must be a number from 1 to 100, got {factor!r}"))
    return out
