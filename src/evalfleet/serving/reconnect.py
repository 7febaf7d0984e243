"""How every remote client (openpi, GR00T, vla-eval) reconnects: one policy for how long it waits for a server,
how often it re-sends a request after a lost connection, how it paces the attempts and which errors count.

    reconnect = ReconnectPolicy.of(options, unreachable=(OSError, TimeoutError), lost=(OSError, TimeoutError))
    conn = reconnect.connect(open_one, gave_up=lambda last: InfrastructureError(...))
    reply = reconnect.request(send_one, gave_up=lambda failure, attempts: InfrastructureError(...))

Errors outside `unreachable`/`lost` (a refused key, an error the server reported) are never retried.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

T = TypeVar("T")
Errors = tuple[type[BaseException], ...]


@dataclass
class Backoff:
    """Exponential backoff between reconnect attempts, never sleeping past `deadline`."""

    initial_s: float = 0.05
    factor: float = 2.0
    max_s: float = 2.0

    def __post_init__(self) -> None:
        self._next = self.initial_s

    def sleep(self, deadline: float) -> bool:
        """Sleep before the next attempt. False when the deadline leaves no time for one."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(self._next, remaining))
        self._next = min(self._next * self.factor, self.max_s)
        return time.monotonic() < deadline


@dataclass(frozen=True)
class ReconnectPolicy:
    """`timeout_s`: how long to wait for a server to become ready, and to come back after it is lost;
    `max_retries`: re-sends of one request after a lost connection; `backoff_s`/`backoff_max_s`: the pacing;
    `unreachable`: the errors that mean "not up (yet)" while connecting; `lost`: the errors that mean the
    connection went away during a request."""

    timeout_s: float
    max_retries: int
    backoff_s: float = 0.05
    backoff_max_s: float = 2.0
    unreachable: Errors = (OSError, TimeoutError)
    lost: Errors = (OSError, TimeoutError)

    @classmethod
    def of(cls, options: Any, *, unreachable: Errors, lost: Errors) -> "ReconnectPolicy":
        """From a remote client's options (`connect_timeout_s`, `max_retries`, `backoff_s`, `backoff_max_s`)."""
        return cls(timeout_s=options.connect_timeout_s, max_retries=options.max_retries,
                   backoff_s=options.backoff_s, backoff_max_s=options.backoff_max_s,
                   unreachable=unreachable, lost=lost)

    def backoff(self) -> Backoff:
        return Backoff(initial_s=self.backoff_s, max_s=self.backoff_max_s)

    def connect(self, attempt: Callable[[float], T], *, gave_up: Callable[[BaseException | None], Exception],
                deadline: float | None = None, on_failure: Callable[[], None] = lambda: None) -> T:
        """`attempt(remaining_s)` until it returns. An `unreachable` error is retried (after `on_failure()`),
        paced by the backoff, until `deadline` (default: `timeout_s` from now); then `gave_up(last error)` is
        raised."""
        deadline = time.monotonic() + self.timeout_s if deadline is None else deadline
        backoff = self.backoff()
        last: BaseException | None = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                return attempt(remaining)
            except self.unreachable as exc:
                on_failure()
                last = exc
            if not backoff.sleep(deadline):
                break
        raise gave_up(last)

    def request(self, attempt: Callable[[float | None], T], *, gave_up: Callable[[BaseException, int], Exception],
                failure: BaseException | None = None, on_failure: Callable[[], None] = lambda: None) -> T:
        """`attempt(deadline)` until it returns: `deadline` is None on a first try, and after a `lost` error
        (or when `failure` says the first send was lost already) the time by which the server must be back
        (`timeout_s` after the first loss). A lost connection is re-tried (after `on_failure()`) at most
        `max_retries` times, paced by the backoff; then `gave_up(last error, attempts)` is raised from it."""
        deadline = None if failure is None else time.monotonic() + self.timeout_s
        backoff = self.backoff()
        attempts = 0 if failure is None else 1
        while True:
            if failure is not None:
                if attempts > self.max_retries or deadline is None or not backoff.sleep(deadline):
                    raise gave_up(failure, attempts) from failure
            try:
                return attempt(deadline)
            except self.lost as exc:
                on_failure()
                failure = exc
                attempts += 1
                if deadline is None:
                    deadline = time.monotonic() + self.timeout_s

    def together(self, env_ids: list[int], payloads: list[Any], *, send: Callable[[int, Any], None],
                 receive: Callable[[int], T], retry: Callable[[int, Any, BaseException], T],
                 drop: Callable[[int], None]) -> list[T]:
        """One request per env, all in flight together (every payload sent before any reply is read, so the
        server sees them at once and can batch them), the replies taken in order. A connection lost on the way
        is dropped and its request retried alone (`retry(env_id, payload, failure)`, e.g. through `request`).
        If anything raises, the connections whose replies are still owed are dropped: they start afresh."""
        failures: dict[int, BaseException | None] = {}
        for env_id, payload in zip(env_ids, payloads):
            try:
                send(env_id, payload)
                failures[env_id] = None
            except self.lost as exc:
                drop(env_id)
                failures[env_id] = exc
        results: list[T] = []
        try:
            for env_id, payload in zip(env_ids, payloads):
                failure = failures[env_id]
                if failure is None:
                    try:
                        results.append(receive(env_id))
                        continue
                    except self.lost as exc:
                        drop(env_id)
                        failure = exc
                results.append(retry(env_id, payload, failure))
        except BaseException:
            for env_id in env_ids[len(results):]:
                drop(env_id)
            raise
        return results
