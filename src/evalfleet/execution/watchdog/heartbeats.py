"""Reading liveness for the watchdog: `heartbeat_is_current` (a heartbeat of this attempt, not one left by an
earlier one) and `files_heartbeat` (a heartbeat made from the growth of output files, for a child that writes
none). The heartbeat file itself is `evalfleet.rollout.heartbeat`'s."""

from __future__ import annotations

import glob
import os
import time
from typing import Sequence

# Without an "attempt" field, a heartbeat written this long before the launch is taken as left over.
STALE_HEARTBEAT_SLACK_S = 1.0


def files_heartbeat(patterns: Sequence[str], attempt: int) -> dict:
    """A heartbeat made from output files (for a child that writes none): steps = bytes in the files matching
    `patterns` ("{attempt}" filled in; `**` recursive), episodes = how many of them are not empty."""
    size = nonempty = 0
    seen: set[str] = set()
    for pattern in patterns:
        for path in glob.glob(pattern.format(attempt=attempt), recursive=True):
            if path in seen:
                continue
            seen.add(path)
            try:
                st = os.stat(path)
            except OSError:
                continue
            if not os.path.isfile(path):
                continue
            size += st.st_size
            nonempty += st.st_size > 0
    return {"pid": 0, "steps": size, "episodes": nonempty, "time": time.time(),
            "state": "running" if size else "starting", "attempt": attempt}


def heartbeat_is_current(beat: dict, attempt: int, launched_wall: float) -> bool:
    """False for a heartbeat written by another attempt (or, lacking "attempt", written before this launch)."""
    if "attempt" in beat and beat["attempt"] not in (0, attempt):
        return False
    if ("attempt" not in beat or beat["attempt"] == 0) and beat["time"] < launched_wall - STALE_HEARTBEAT_SLACK_S:
        return False
    return True

