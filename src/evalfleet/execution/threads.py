"""Worker threads whose end can be waited for after Ctrl-C.

CPython up to 3.11 can mark a thread stopped when a KeyboardInterrupt lands inside `Thread.join()` while the
thread still runs (python/cpython#90882): `join()` then returns at once and `is_alive()` says False. The pipeline
stops its runners on Ctrl-C by setting an event and waiting for the supervising threads to end; with a plain
`join()` that wait could end early and leave the runner processes behind. `WorkerThread.finished` is set only
when the thread's target has returned, so it can be trusted after an interrupt."""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable


class WorkerThread(threading.Thread):
    """A daemon thread with a `finished` event set once its target has returned (or raised)."""

    def __init__(self, target: Callable[..., Any], args: tuple = (), name: str | None = None) -> None:
        super().__init__(target=target, args=args, daemon=True, name=name)
        self.finished = threading.Event()

    def run(self) -> None:
        try:
            super().run()
        finally:
            self.finished.set()


def wait_all(threads: Iterable[threading.Thread]) -> None:
    """Until every thread has ended; for a WorkerThread its `finished` event, which an interrupted join cannot
    corrupt."""
    for thread in threads:
        if isinstance(thread, WorkerThread):
            thread.finished.wait()
        else:
            thread.join()


def wait_any(threads: Iterable[threading.Thread], timeout: float) -> None:
    """Sleep up to `timeout`, waking early when the first thread still running ends."""
    for thread in threads:
        if isinstance(thread, WorkerThread):
            if not thread.finished.is_set():
                thread.finished.wait(timeout)
                return
        elif thread.is_alive():
            thread.join(timeout)
            return


def any_running(threads: Iterable[threading.Thread]) -> bool:
    return any(not t.finished.is_set() if isinstance(t, WorkerThread) else t.is_alive() for t in threads)
