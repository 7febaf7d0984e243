"""Gather concurrent inference requests into one `policy.act_batch` call.

A server owns one `PolicyWorker`. Every connection handler awaits `worker.act(obs, env_id)`; the worker
collects requests until it has `max_batch` of them or the oldest has waited `max_wait_ms`, then calls
`policy.act_batch` once (in a single worker thread, so the policy is never called concurrently) and hands
each caller its own action. `max_batch=1` turns batching off: one `act_batch` call per request. Resets and
other policy calls go through the same thread, in order.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np


@dataclass
class BatchStats:
    calls: int = 0  # act_batch calls
    requests: int = 0  # observations served
    largest_batch: int = 0
    sizes: list[int] = field(default_factory=list)


@dataclass
class _Pending:
    observation: dict[str, Any]
    env_id: int
    future: asyncio.Future
    arrived: float


class PolicyWorker:
    def __init__(self, policy: Any, *, max_batch: int = 1, max_wait_ms: float = 0.0):
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if max_wait_ms < 0:
            raise ValueError("max_wait_ms must be >= 0")
        self.policy = policy
        self.max_batch = max_batch
        self.max_wait_s = max_wait_ms / 1000.0
        self.stats = BatchStats()
        # How many clients could send right now (open connections). When a batch already holds that
        # many requests no more can arrive, so it goes at once instead of waiting out max_wait_ms.
        self.active_clients: Callable[[], int] | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="policy")
        self._queue: asyncio.Queue[_Pending] | None = None
        self._task: asyncio.Task | None = None

    # The queue and collector task belong to the running loop; create them lazily inside it.
    def _ensure_started(self) -> asyncio.Queue:
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._task = asyncio.get_running_loop().create_task(self._collect_forever())
        return self._queue

    async def act(self, observation: dict[str, Any], env_id: int) -> np.ndarray:
        loop = asyncio.get_running_loop()
        if self.max_batch == 1:  # no batching: straight to the policy thread (which serialises calls)
            pending = _Pending(observation, env_id, None, 0.0)  # type: ignore[arg-type]
            return (await loop.run_in_executor(self._executor, self._run_batch, [pending]))[0]
        queue = self._ensure_started()
        future = loop.create_future()
        queue.put_nowait(_Pending(observation, env_id, future, time.monotonic()))
        return await future

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run any other policy call (reset, metadata) on the policy thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def _collect_forever(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            first = await self._queue.get()
            batch = [first]
            deadline = first.arrived + self.max_wait_s
            while len(batch) < self.max_batch:
                if self.active_clients is not None and len(batch) >= self.active_clients():
                    break
                if not self._queue.empty():
                    batch.append(self._queue.get_nowait())
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self._queue.get(), remaining))
                except asyncio.TimeoutError:
                    break
            batch = [p for p in batch if not p.future.cancelled()]
            if not batch:
                continue
            try:
                actions = await loop.run_in_executor(self._executor, self._run_batch, batch)
            except Exception as exc:  # noqa: BLE001 - the policy failed: every caller in the batch gets the error
                for pending in batch:
                    if not pending.future.done():
                        pending.future.set_exception(exc)
                continue
            for pending, action in zip(batch, actions):
                if not pending.future.done():
                    pending.future.set_result(action)

    def _run_batch(self, batch: list[_Pending]) -> list[np.ndarray]:
        actions = self.policy.act_batch([p.observation for p in batch], [p.env_id for p in batch])
        actions = list(actions)
        if len(actions) != len(batch):
            raise RuntimeError(f"act_batch returned {len(actions)} actions for {len(batch)} observations")
        self.stats.calls += 1
        self.stats.requests += len(batch)
        self.stats.largest_batch = max(self.stats.largest_batch, len(batch))
        self.stats.sizes.append(len(batch))
        return [np.asarray(a) for a in actions]

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - handed to every caller of the batch
                pass
            self._task = None
        self._queue = None
        self._executor.shutdown(wait=False, cancel_futures=True)

    def join(self) -> None:
        """After `aclose`, from outside the event loop: wait for the policy thread to end."""
        self._executor.shutdown(wait=True, cancel_futures=True)
