"""The shard queue (a Ray actor) the workers of a Ray evaluation take their shards from (issue #57).

A Ray worker (`worker_task.run_worker`) starts its runner once and keeps it for every shard it takes, as a local
worker does; the queue hands the shards out one at a time, to the workers of the shard's pool: the Runs that share
a policy server run in that server's placement group (a pool per server), every other Run in the pool of unserved
Runs (""). The driver puts the shards in (all at once for a fixed plan; look by look, as sequential stopping
releases them) and closes a pool once nothing more will come for it.

`take` answers a worker with a shard, "wait" (its pool is open but has nothing yet: the driver may release more)
or "done" (its pool is closed and empty, or the driver asked idle workers to give their room back). The queue
remembers which worker took which shard, so a worker task that Ray runs again (its process or node died) resumes
its own shards first."""

from __future__ import annotations

import collections
from typing import Iterable

ShardTuple = tuple[str, int, "int | None"]  # (run, start, stop): what travels between driver, actor and workers

UNSERVED = ""  # the pool of Runs without a policy server


class ShardQueue:
    def __init__(self, pool_of: dict[str, str]):
        self.pool_of = dict(pool_of)  # Run → its pool
        self.pending: dict[str, collections.deque] = {pool: collections.deque() for pool in set(pool_of.values())}
        self.closed: set[str] = set()
        self.taken: dict[int, list[ShardTuple]] = {}  # worker → the shards it took, in order
        self.yielding = False  # idle workers end (another pool's placement group waits for their room)

    def put(self, shards: Iterable[ShardTuple]) -> None:
        for shard in shards:
            self.pending[self.pool_of[shard[0]]].append(tuple(shard))

    def close(self, pools: Iterable[str] | None = None) -> None:
        """Nothing more will be put for these pools (all of them by default)."""
        self.closed.update(self.pending if pools is None else pools)

    def set_yielding(self, yielding: bool) -> None:
        self.yielding = bool(yielding)

    def take(self, pool: str, worker: int) -> tuple[str, ShardTuple | None]:
        queue = self.pending[pool]
        if queue:
            shard = queue.popleft()
            self.taken.setdefault(worker, []).append(shard)
            return "shard", shard
        if pool in self.closed or self.yielding:
            return "done", None
        return "wait", None

    def resume(self, worker: int) -> list[ShardTuple]:
        """The shards this worker took before (a task Ray runs again): its runner skips what was recorded."""
        return list(self.taken.get(worker, []))

    def state(self) -> dict[str, tuple[int, bool]]:
        """Pool → (shards waiting to be taken, closed)."""
        return {pool: (len(queue), pool in self.closed) for pool, queue in self.pending.items()}
