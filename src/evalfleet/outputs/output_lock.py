"""The output folder's lock (OUT/.evalfleet/lock): one process writes an output folder at a time.

`evalfleet run` (and `evalfleet.run`, `evalfleet.evaluate`: the same pipeline) takes it before it writes anything
and holds it until the run ends; `evalfleet submit --backend slurm` holds it while it prepares the folder; `evalfleet
collect` into a local folder that has one holds it while it writes. A second writer is refused with a UserError
(exit 2, nothing written) naming the holder: the pid, host and start time the holder wrote into the file.

It is `flock`, so the kernel drops it when its process ends, however it ends: a killed run never leaves the folder
locked. It belongs to the process that took it alone: its descriptor is close-on-exec (started runners and servers
never get it) and closed in every forked child (standby runners, collect's second half), so the holder a refusal
names is the one holding it, and a runner outliving its run holds nothing (it stops itself once its supervisor is
gone: execution/worker.py). Where the filesystem has no flock (some NFS and Lustre mounts) the folder is written
unlocked, after one warning line.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import json
import os
import socket
import sys
import weakref
from pathlib import Path
from typing import Iterator

from evalfleet.errors import UserError
from evalfleet.layout import internal_dir, lock_path

NO_FLOCK = (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP)  # the filesystem cannot lock (NFS without lockd, Lustre)
_HOLDER_BYTES = 4096

_live: "weakref.WeakSet[OutputLock]" = weakref.WeakSet()  # every lock this process holds, for the fork hook
_held: set[str] = set()  # the folders (real paths) this process holds


class OutputLock:
    """A folder's lock held by this process (`fd` None: a filesystem without flock). Released by `release()`, at
    the end of a `with` block, or when dropped; closing its one descriptor is what drops the flock."""

    def __init__(self, folder: Path, fd: int | None):
        self.folder = folder
        self._fd = fd
        self._key = os.path.realpath(folder)
        if fd is not None:
            _live.add(self)
            _held.add(self._key)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        _held.discard(self._key)
        os.close(fd)

    def _forget_in_child(self) -> None:
        """In a forked child: close this copy of the descriptor, never LOCK_UN, which would unlock the parent's."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self) -> "OutputLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()


def _after_fork_in_child() -> None:
    for lock in list(_live):
        lock._forget_in_child()
    _held.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def held_here(out: str | os.PathLike[str]) -> bool:
    """Whether this process holds `out`'s lock (the run whose finalize collects into its own folder)."""
    return os.path.realpath(out) in _held


@contextlib.contextmanager
def writing(folder: str | os.PathLike[str], *, flag: str = "--output") -> Iterator[None]:
    """Hold a local folder's lock while the block writes it (collect), where the folder has one and this process
    does not hold it already (the run's own finalize collecting into its folder); refused while another has it."""
    if held_here(folder) or not os.path.isdir(folder):
        yield
        return
    try:
        lock = lock_output(Path(folder), flag=flag, create=False)
    except OSError as exc:  # a lock file that cannot be opened (a link planted in its place, no permission)
        raise UserError(f"cannot open its lock file ({exc.strerror or exc})", where=str(folder)) from None
    with lock or contextlib.nullcontext():
        yield


def lock_output(out: Path, *, flag: str = "--output", create: bool = True) -> OutputLock | None:
    """`out`'s lock, taken for this process, or a UserError naming its holder when another process has it
    (`flag`: the option whose other value is the way out). `create`: make OUT/.evalfleet/lock (OUT must exist);
    without it a folder that has no lock file gives None and nothing is created."""
    path = lock_path(out)
    flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW  # never through a link planted in the folder
    if create:
        internal_dir(out).mkdir(exist_ok=True)
        flags |= os.O_CREAT
    try:
        fd = os.open(path, flags, 0o644)
    except FileNotFoundError:
        if create:
            raise
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise UserError(f"in use by another evalfleet run{holder}; wait for it to end, or use another {flag}",
                        where=str(out)) from None
    except OSError as exc:
        os.close(fd)
        if exc.errno not in NO_FLOCK:
            raise
        print(f"evalfleet: {out}: this filesystem cannot lock ({exc.strerror}); nothing keeps a second run from "
              "writing this folder at the same time", file=sys.stderr)
        return OutputLock(out, None)
    lock = OutputLock(out, fd)
    try:
        _write_holder(fd)
    except OSError:  # a full disk: the lock holds all the same, its holder is just not named
        pass
    return lock


def _write_holder(fd: int) -> None:
    since = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    text = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": since}) + "\n"
    os.ftruncate(fd, 0)
    os.pwrite(fd, text.encode(), 0)


def _holder(fd: int) -> str:
    """" (pid N on host H, since T)" from the lock file, or "" where it does not say (yet)."""
    try:
        doc = json.loads(os.pread(fd, _HOLDER_BYTES, 0))
    except (OSError, ValueError):
        return ""
    if not isinstance(doc, dict):
        return ""
    pid, host, since = doc.get("pid"), doc.get("host"), doc.get("since")
    return f" (pid {pid} on host {host}, since {since})" if pid and host and since else ""
