"""The in-process policy of `evalfleet.evaluate`, called on a daemon thread of its own, with a deadline.

The server's policy thread never calls the user's code itself: it hands each call (`act_batch`, `reset`)
to `GuardedPolicy`, which runs it on the `evalfleet-policy` daemon thread and waits at most `deadline_s`
(the Runs' `episode_timeout_s`). A call that does not return in time is an error of that call (the episode
becomes an `error` record, as a remote policy's timeout does); while it still runs, every further call
fails at once instead of queueing behind it, so a blocked policy costs one deadline, not one per episode.
`SystemExit`, `KeyboardInterrupt` or any other BaseException raised by the policy is reported like any
exception of the policy: it never reaches the server's event loop. `close()` makes a waiting call give up
at once; a call stuck in the user's code cannot be interrupted, and its thread (a daemon) ends as soon as
that call returns.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable

THREAD_NAME = "evalfleet-policy"


class PolicyCallError(RuntimeError):
    """The in-process policy failed, timed out, or is still blocked in an earlier call."""


class _Call:
    def __init__(self, what: str, fn: Callable[..., Any], args: tuple[Any, ...]):
        self.what = what
        self.fn = fn
        self.args = args
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.started = time.monotonic()


class GuardedPolicy:
    """`act_batch` and `reset` of `policy` (the policy protocol), each run on one daemon thread."""

    def __init__(self, policy: Any, *, deadline_s: float, name: str = "policy"):
        self._policy = policy
        self._deadline_s = float(deadline_s)
        self._name = name
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._current: _Call | None = None  # the call handed to the thread and not finished yet
        self._closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, name=THREAD_NAME, daemon=True)
        self._thread.start()

    # -- the policy protocol (called from the server's policy thread, one call at a time)
    def act_batch(self, observations: list[dict[str, Any]], env_ids: list[int]) -> Any:
        return self._call("act_batch", self._policy.act_batch, observations, env_ids)

    def reset(self, episode_seed: int, env_id: int = 0) -> None:
        self._call("reset", self._policy.reset, episode_seed, env_id)

    def _call(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        with self._lock:
            if self._closed:
                raise PolicyCallError(f"{self._name}: evaluate() is stopping; {what} was not called")
            stuck = self._current
            if stuck is not None:
                raise PolicyCallError(
                    f"{self._name} is still blocked in the {stuck.what} call made "
                    f"{time.monotonic() - stuck.started:.1f} s ago (over the {self._deadline_s:g} s "
                    f"episode_timeout_s); {what} was not called")
            call = self._current = _Call(what, fn, args)
        self._calls.put(call)
        if not call.done.wait(self._deadline_s):
            raise PolicyCallError(f"{self._name}: {what} did not return within {self._deadline_s:g} s "
                                  "(the Run's episode_timeout_s); every call fails until it returns")
        if call.error is not None:
            if isinstance(call.error, Exception):
                raise call.error
            raise PolicyCallError(f"{self._name}: {what} raised {type(call.error).__name__}: {call.error}"
                                  " (evaluate() reports it as an error of the policy)") from None
        return call.result

    # -- the daemon thread
    def _serve(self) -> None:
        while True:
            call = self._calls.get()
            if call is None:
                return
            try:
                call.result = call.fn(*call.args)
            except BaseException as exc:  # noqa: BLE001 - SystemExit too: an error of the policy
                call.error = exc
            with self._lock:
                if self._current is call:
                    self._current = None
            call.done.set()

    def close(self) -> None:
        """No further calls; a waiting call gives up at once. The thread ends when its call (if any) returns."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            current = self._current
        if current is not None and not current.done.is_set():
            current.error = PolicyCallError(f"{self._name}: evaluate() stopped while {current.what} was running")
            current.done.set()
        self._calls.put(None)

    def join(self) -> bool:
        """After close: wait for the thread to end, unless it is blocked in the policy's code (then False at once:
        a daemon, it ends when that call returns)."""
        with self._lock:
            blocked = self._current is not None
        if not blocked:
            self._thread.join()
        return not self._thread.is_alive()
