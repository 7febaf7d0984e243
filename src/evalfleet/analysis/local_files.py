"""One rule for what a reader takes from a local folder: only regular files and folders that lie inside it.

A link is followed only while it stays inside the folder being read; a link leading out of it, a broken
link, and anything that is not a regular file or a folder (a FIFO, a device, a socket) is refused before it
is opened, so nothing outside a source folder is read, counted or copied, and a FIFO never blocks a reader.
`outputs.storage.Location` (collect, report, finalize, copies) and `analysis.loading` (plot, compare,
sensitivity) both use it.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

LINK_OUT = "a link leading out of its folder"
BROKEN_LINK = "a broken link"


def inside(root: str, path: str) -> bool:
    """`path` (resolved) lies in `root` (resolved) or is it."""
    base = os.path.realpath(root)
    real = os.path.realpath(path)
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def file_type(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"


def kind_inside(root: str, path: str) -> tuple[str | None, str | None]:
    """("file" | "dir", None) for a regular file or folder inside `root`; (None, why) when refused;
    (None, None) when nothing is there. Never opens `path`."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        return None, (BROKEN_LINK if os.path.islink(path) else None)
    except OSError as exc:
        return None, f"unreadable ({exc.strerror or exc})"
    if not inside(root, real):
        return None, LINK_OUT
    if stat.S_ISDIR(st.st_mode):
        return "dir", None
    if stat.S_ISREG(st.st_mode):
        return "file", None
    return None, f"not a regular file ({file_type(st.st_mode)})"


class RefusedFile(OSError):
    """A path that is not a regular file inside its folder (its `why` says what it is)."""

    def __init__(self, path: str, why: str):
        super().__init__(f"{path}: {why}")
        self.path = path
        self.why = why


def open_regular(root: str, path: str) -> BinaryIO:
    """`path` opened for reading if it is a regular file inside `root`: resolved, then opened without
    following a last link and without blocking, and checked again on the open file (a FIFO or a link swapped
    in meanwhile is refused, not waited on). RefusedFile otherwise; FileNotFoundError when missing."""
    kind, why = kind_inside(root, path)
    if kind != "file":
        if why is None and kind is None:
            raise FileNotFoundError(path)
        raise RefusedFile(path, why or file_type(stat.S_IFDIR))
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(os.path.realpath(path), flags)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise RefusedFile(path, f"not a regular file ({file_type(mode)})")
    if getattr(os, "O_NONBLOCK", 0):
        os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")
