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
    """`path` opened for reading if it is a regular file inside `root`. RefusedFile otherwise;
    FileNotFoundError when missing.

    Links are resolved first (one inside the folder is followed), then the resolved path is opened component by
    component from a descriptor of the folder, none of them followed as a link (`open_beneath`): a folder or
    file swapped for a link between the check and the open is refused, never followed out. The open does not
    block, so a FIFO swapped in is refused, not waited on."""
    kind, why = kind_inside(root, path)
    if kind != "file":
        if why is None and kind is None:
            raise FileNotFoundError(path)
        raise RefusedFile(path, why or file_type(stat.S_IFDIR))
    base = os.path.realpath(root)
    rel = os.path.relpath(os.path.realpath(path), base)
    if rel == os.curdir or rel == os.pardir or rel.startswith(os.pardir + os.sep):
        raise RefusedFile(path, LINK_OUT)
    return open_beneath(base, rel.split(os.sep), shown=path)


NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def open_beneath(base: str, names: list[str], *, shown: str) -> BinaryIO:
    """The regular file `base/names...` opened without following any link on the way (each folder opened
    relative to its parent's descriptor): RefusedFile when a part is a link or the file is not regular."""
    if os.open not in os.supports_dir_fd:  # no descriptor-relative opens here: check the resolved path again
        if not inside(base, os.path.join(base, *names)):
            raise RefusedFile(shown, LINK_OUT)
        return _open_file(os.path.join(base, *names), None, shown)
    parent = os.open(base, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        for name in names[:-1]:
            try:
                child = os.open(name, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | NOFOLLOW, dir_fd=parent)
            except FileNotFoundError:
                raise
            except OSError:  # ELOOP or ENOTDIR: the folder became a link or a file
                raise RefusedFile(shown, "a folder on its path was replaced (by a link or a file)") from None
            os.close(parent)
            parent = child
        return _open_file(names[-1], parent, shown)
    finally:
        os.close(parent)


def _open_file(name: str, dir_fd: int | None, shown: str) -> BinaryIO:
    try:
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | NOFOLLOW, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:  # ELOOP: the file became a link
        raise RefusedFile(shown, f"not opened ({exc.strerror or exc})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise RefusedFile(shown, f"not a regular file ({file_type(mode)})")
    if getattr(os, "O_NONBLOCK", 0):
        os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")
