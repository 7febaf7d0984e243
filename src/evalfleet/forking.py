"""Work in forked children of this process: whether forking is safe here (`fork_allowed`), what to do before a
fork (`flush_std_streams`) and after (`reap`); `in_child`: a task whose result comes back pickled (collect reads
the second half of a large Experiment's Runs there; whatever fails in the child is done again by the caller, so
errors are raised where they always were); whether this process is the `evalfleet` command's own
(`mark_command_process`: the local backend forks its runners only there).
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
from typing import Callable, Generic, NoReturn, TypeVar

T = TypeVar("T")


_COMMAND_PROCESS = False


def mark_command_process() -> None:
    """Called by the `evalfleet` command's entry point: this process is evalfleet's own, so the local backend may
    fork its runners from it (backends/local/standby.py). A library caller's process never is."""
    global _COMMAND_PROCESS
    _COMMAND_PROCESS = True


def command_process() -> bool:
    return _COMMAND_PROCESS


def fork_allowed() -> bool:
    """Linux, and no thread but this one: a lock another thread holds at the fork would stay held in the child
    for good (and Python 3.12 warns of a fork with threads)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork") and threading.active_count() == 1


def flush_std_streams() -> None:
    """Write out what stdout and stderr (and the originals they may have replaced) buffered: before a fork, else
    the child would write it again; before `os._exit`, else it is lost."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # noqa: BLE001 - a reader gone away, a detached buffer: nothing left to write
            pass


def reap(pid: int) -> int | None:
    """Wait for child `pid` to exit (at once if it has); its exit code as `subprocess` gives it (negative: the
    signal that ended it), None when it was reaped already."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status)


def _run_in_child(task: Callable[[], object], result_fd: int | None = None) -> NoReturn:
    """In the forked child: quiet, run `task` (its result pickled to `result_fd` when given), exit 0, or 1 where
    anything failed (the parent then does the work itself and raises what it raises)."""
    code = 1
    try:
        _quiet_child()
        result = task()
        if result_fd is not None:
            data = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
            with os.fdopen(result_fd, "wb") as pipe:
                pipe.write(data)
        code = 0
    except BaseException:  # noqa: BLE001 - see above
        pass
    finally:
        os._exit(code)


def _quiet_child() -> None:
    """A child's first step: nothing on stdout or stderr; Ctrl-C or a TERM for the group ends it at once (its
    parent, stopping too, redoes nothing then)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)


class Forked(Generic[T]):
    """A task running in a forked child (`in_child`); `result()` waits for it and gives what it returned."""

    def __init__(self, task: Callable[[], T]):
        read_end, write_end = os.pipe()
        flush_std_streams()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            _run_in_child(task, write_end)
        os.close(write_end)
        self.pid, self._read_end = pid, read_end

    def result(self) -> tuple[bool, T | None]:
        """(True, what the task returned), or (False, None) where it raised or the child died; the child is
        reaped either way. Call once."""
        chunks = []
        with os.fdopen(self._read_end, "rb") as pipe:  # read to the end first: a large result fills the pipe
            while chunk := pipe.read(1 << 20):
                chunks.append(chunk)
        code = reap(self.pid)
        if code != 0 or not chunks:
            return False, None
        try:
            return True, pickle.loads(b"".join(chunks))
        except Exception:  # noqa: BLE001 - a torn result is a failed child
            return False, None

    def discard(self) -> None:
        """End the child if it still runs and reap it (its result is not wanted)."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(self._read_end)
        reap(self.pid)


def in_child(task: Callable[[], T]) -> Forked[T] | None:
    """`task()` started in a forked child, its result to be pickled back (`Forked.result()`), where forking is
    allowed; else None (run it here). The child writes nothing on stdout or stderr."""
    return Forked(task) if fork_allowed() else None
