"""How an `evalfleet` process ends (`exit_now`), for the command line and for a runner forked from it; SIGTERM
ending a block like Ctrl-C (`sigterm_interrupts`), so its cleanup runs."""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator, NoReturn

from evalfleet.forking import flush_std_streams

# A runner's step that stopped it because its policy server moved to a new address (EX_TEMPFAIL): the watchdog
# starts it again, rewired; the episodes it had in flight are `server_lost` (rollout/inflight.py).
EXIT_SERVER_MOVED = 75


def exit_now(code: int) -> NoReturn:
    """End the process with `code` after everything of a normal exit that can matter (non-daemon threads
    joined, atexit handlers run, which flushes logging, every open file flushed), without the interpreter's
    module teardown: with MuJoCo, SciPy or matplotlib loaded that costs 0.1-0.2 s, which whoever waits
    for this process (the watchdog for a runner, a user for `run`) would pay at the end of every run."""
    import atexit
    import threading

    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # what a normal exit runs first (logging.shutdown is one of them)
    flush_std_streams()
    if _other_files_open_for_writing():
        _flush_open_files()
    os._exit(code)


def _other_files_open_for_writing() -> bool:
    """Whether a descriptor besides 0-2 is open for writing (Linux's /proc/self/fd), so that a file object
    holding unwritten data may exist; True where that cannot be listed. A runner or `run` at its exit usually has
    none: the search of every object for files (`_flush_open_files`, 45-60 ms in a runner) is then skipped, and
    only the standard streams are flushed (as multiprocessing flushes its children's before `os._exit`). A second
    buffered wrapper of descriptor 1 or 2 itself, other than sys.stdout / sys.stderr, is the one file not seen."""
    import fcntl

    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return True
    for name in names:
        fd = int(name)
        if fd <= 2:
            continue
        try:
            mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
        except OSError:
            continue  # the listing's own descriptor, closed by now
        if mode != os.O_RDONLY:
            return True
    return False


def _flush_open_files() -> None:
    """Flush the files a plugin left open, as the teardown skipped by `exit_now` would."""
    import _io
    import gc
    import itertools

    # Found by their type: type(), not isinstance(), since a weak proxy would forward the check to a referent that
    # may be gone; the C base every file class derives from, not the io.IOBase ABC. Each distinct type is checked
    # once and the objects are picked by C-level iteration: a runner holds ~90,000 objects, and a loop over them
    # in Python costs ~35 ms.
    objects = gc.get_objects()
    file_types = {kind for kind in set(map(type, objects)) if issubclass(kind, _io._IOBase)}
    for obj in itertools.compress(objects, map(file_types.__contains__, map(type, objects))):
        try:
            if not obj.closed and obj.writable():
                obj.flush()
        except Exception:  # noqa: BLE001 - a reader gone away, a detached buffer: nothing left to save
            pass


class Terminated(KeyboardInterrupt):
    """SIGTERM inside `sigterm_interrupts()`: the work stops as on Ctrl-C, its `finally` blocks and `with` exits
    run (a run's metadata says interrupted, collect's staging folder is removed)."""


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """While the block runs, SIGTERM raises Terminated in it, where nobody else handles SIGTERM: in the main
    thread, with SIGTERM's default action in place (a caller's own handler is left alone, and an outer block's
    stays). A forked child that inherited the handler takes the default action instead."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    owner = os.getpid()

    def on_term(signum: int, frame: Any) -> None:
        if os.getpid() != owner:  # a forked child that inherited the handler: the default action
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise Terminated()

    restore = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, restore)
