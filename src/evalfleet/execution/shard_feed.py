"""A shard feed: shards the driver releases while its runners are already running (issue #57).

Sequential stopping decides, look by look, how many episodes each Run needs; without a feed every look is a new
`backend.execute`, whose runners start again (a simulator built, a policy loaded) and wait for the slowest
episode of the wave. With a feed the runners start once: each takes shards from the feed until the driver closes
it, and waits, idle, while the driver has nothing for it yet.

The feed is a folder the driver writes and runners read (a local disk, or a cluster's shared file system):

    shards    every shard released so far, one RUN:START:STOP per line, in the order to take them; only ever
              grows, and is replaced whole (atomically), so a reader sees a released shard whole or not at all
    closed    exists once nothing more will be released

Runners claim the shards they take as any workers sharing a shard list do (execution/claims.py), so a shard runs
once, and a relaunched runner resumes its own claims. A runner ends when the feed is closed and no shard in it is
left to claim; it reads `closed` before the list, so a shard released before the close is always seen.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Iterator

from evalfleet.execution.claims import claim_shards
from evalfleet.execution.invocation import parse_shard, shard_arg
from evalfleet.execution.output_dir import write_atomic
from evalfleet.experiment.plan import Plan, Shard

SHARDS_FILE = "shards"
CLOSED_FILE = "closed"
POLL_S = 0.05  # how often a waiting runner looks for new shards: a file read of a few lines


class ShardFeed:
    """The driver's side: release shards, then close."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._shards: list[Shard] = []
        self._finished: set[str] = set()  # Runs nothing more will be released for (the driver's side only)
        self._lock = threading.Lock()

    def start(self) -> "ShardFeed":
        """An empty, open feed (what an earlier invocation left is gone: the records say what is done)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / CLOSED_FILE).unlink(missing_ok=True)
        write_atomic(self.folder / SHARDS_FILE, "")
        return self

    def release(self, shards: list[Shard]) -> bool:
        """Add `shards` for the runners to take; False (nothing added) once the feed is closed: a worker that gave
        up may close it while the driver decides."""
        with self._lock:
            if self.closed:
                return False
            if shards:
                self._shards += shards
                write_atomic(self.folder / SHARDS_FILE, "".join(shard_arg(s) + "\n" for s in self._shards))
            return True

    def finish(self, runs: "set[str] | list[str]") -> None:
        """Say that nothing more will be released for these Runs (decided, or fixed-N and whole): a backend whose
        workers are tied to some Runs (Ray's pools of a server) lets those go before the feed closes."""
        with self._lock:
            self._finished.update(runs)

    @property
    def finished_runs(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._finished)

    def close(self) -> None:
        with self._lock:
            (self.folder / CLOSED_FILE).touch()

    @property
    def closed(self) -> bool:
        return (self.folder / CLOSED_FILE).exists()

    @property
    def shards(self) -> list[Shard]:
        with self._lock:
            return list(self._shards)


def fed_shards(folder: Path, plan: Plan, claim_dir: Path, worker: str, stop: threading.Event,
               heartbeat: Any = None, where: str = "the shard feed") -> Iterator[Shard]:
    """The runner's side: the shards this runner claims from the feed, one at a time, right before it runs each;
    while none is left to claim and the feed is open, it waits (heartbeat state "waiting", rewritten as it polls,
    so the watchdog sees it alive but idle). Ends when the feed is closed and nothing is left, or on `stop`."""
    offered = 0  # shards of the list already offered to claim_shards
    while not stop.is_set():
        closed = (folder / CLOSED_FILE).exists()  # before the list: what was released before the close is in it
        lines = [line for line in _read(folder / SHARDS_FILE).splitlines() if line.strip()]
        fresh = [parse_shard(line, plan, where) for line in lines[offered:]]
        offered = len(lines)
        took = False
        for shard in claim_shards(fresh, claim_dir, worker):
            took = True
            yield shard
        if closed and not took:
            return
        if not took and heartbeat is not None:
            heartbeat.beat(state="waiting")
        if not took:
            stop.wait(POLL_S)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
