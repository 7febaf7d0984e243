"""Work in forked children of this process: whether forking is safe here (`fork_allowed`), what to do before a
fork (`flush_std_streams`) and after (`reap`), and `at_once`: tasks run in children while this process does
its own share (the end of a run draws its two plots, ~0.1 s each, on two cores instead of one after the other).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Callable, NoReturn, Sequence, TypeVar

T = TypeVar("T")


def fork_allowed() -> bool:
    """Linux, and no thread but this one: a lock another thread holds at the fork would stay held in the child
    for good (and Python 3.12 warns of a fork with threads)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork") and threading.active_count() == 1


def flush_std_streams() -> None:
    """Before a fork: else what stdout and stderr buffered would be written again by the child."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


def reap(pid: int) -> int | None:
    """Wait for child `pid` to exit (at once if it has); its exit code as `subprocess` gives it (negative: the
    signal that ended it), None when it was reaped already."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status)


def at_once(first: Callable[[], T], others: Sequence[Callable[[], object]]) -> T:
    """`first()`'s result, each of `others` run meanwhile in a forked child of its own where forking is allowed.
    A task that cannot be forked, or fails in its child (any exit but 0), runs here once `first` is done, in
    order, so that what it raises is raised here as if every task had run here one after the other. Children
    write nothing on stdout or stderr (give tasks that print nothing) and are reaped before this returns or
    raises. Tasks share nothing with this process but the files they write."""
    here: list[Callable[[], object]] = list(others)
    children: list[tuple[int, Callable[[], object]]] = []
    if here and fork_allowed():
        flush_std_streams()
        for task in here:
            pid = os.fork()
            if pid == 0:
                _run_in_child(task)
            children.append((pid, task))
        here = []
    try:
        result = first()
    finally:
        failed = [task for pid, task in children if reap(pid) != 0]
    for task in failed or here:
        task()
    return result


def _run_in_child(task: Callable[[], object]) -> NoReturn:
    code = 1
    try:
        # Ctrl-C or a TERM for the group ends the child at once; this process redoes nothing then (it is stopping)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)
        task()
        code = 0
    except BaseException:  # noqa: BLE001 - the parent runs the task again and raises what it raises
        pass
    finally:
        os._exit(code)
