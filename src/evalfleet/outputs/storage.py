"""Where outputs live: local folders or fsspec URLs (s3://bucket/prefix, gs://..., file://...).

A `Location` is one folder on one filesystem. Local paths use plain file operations (atomic writes:
temporary file + rename); URLs go through fsspec, and s3fs is imported only when an s3:// URL is used.
S3-compatible stores take their endpoint from `--s3-endpoint` or the environment
(`EVALFLEET_S3_ENDPOINT`, then `AWS_ENDPOINT_URL`), an http(s)://host[:port] URL; credentials come from the
usual AWS variables.

What a local Location reads is only what lies in its folder: a link leading out of it, a broken link, and
anything that is not a regular file or a folder (a FIFO, a device, a socket) is skipped, never opened, and
recorded in `Location.skipped` (collect lists them in experiment_result.json's `skipped_files` and the
report). Copies of local files are never more readable than their source (owner rw, group/other read only
where the source allowed it). Nothing is written through a link leading out of the output folder.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from evalfleet.analysis.local_files import LINK_OUT, RefusedFile, inside, kind_inside, open_regular
from evalfleet.errors import UserError
from evalfleet.secrets import carries_credentials, mask_url

log = logging.getLogger("evalfleet.outputs")

S3_ENDPOINT_ENV = ("EVALFLEET_S3_ENDPOINT", "AWS_ENDPOINT_URL")
COPY_MODE = 0o600  # owner read/write; group and other read only where the source allows it (mode & 0o044)


def is_url(target: str) -> bool:
    return "://" in target and not target.startswith("file://")


def s3_endpoint(explicit: str | None = None) -> str | None:
    """The S3 endpoint to use: `--s3-endpoint`, else the first variable of S3_ENDPOINT_ENV that is set,
    checked to be an http(s)://host[:port] URL (UserError naming the flag or variable otherwise)."""
    if explicit:
        return check_endpoint(explicit, where="command line", key="--s3-endpoint")
    for name in S3_ENDPOINT_ENV:
        if os.environ.get(name):
            return check_endpoint(os.environ[name], where="environment", key=name)
    return None


def check_endpoint(value: str, *, where: str, key: str) -> str:
    """`value` if it is an http(s)://host[:port] URL (a path after it is allowed), else a UserError."""
    from urllib.parse import urlsplit

    problem = None
    try:
        parts = urlsplit(value)
        port = parts.port  # ValueError when not a number in 0..65535
    except ValueError as exc:
        parts, port, problem = None, None, str(exc)
    if parts is not None and parts.scheme.lower() not in ("http", "https"):
        problem = "the scheme must be http or https"
    elif parts is not None and not parts.hostname:
        problem = "no host"
    elif port == 0:
        problem = "port 0"
    elif carries_credentials(value):
        problem = "it carries credentials; put them in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY"
    if problem:
        raise UserError(f"expected an http(s)://host[:port] URL, got {mask_url(value)!r} ({problem})",
                        where=where, key=key)
    return value


@dataclass
class Location:
    """A folder: `root` is a local path (fs is None) or a path inside an fsspec filesystem."""

    url: str
    root: str
    fs: Any = None  # fsspec AbstractFileSystem for URLs, None for local paths
    skipped: dict[str, str] = field(default_factory=dict, compare=False)  # rel -> why it was not read

    def __post_init__(self) -> None:
        self.url = mask_url(self.url)  # shown in every message and file: never a URL's credentials

    @property
    def is_local(self) -> bool:
        return self.fs is None

    def join(self, *parts: str) -> str:
        rel = "/".join(p.strip("/") for p in parts if p)
        if not rel:
            return self.root
        if self.is_local:
            return os.path.join(self.root, *rel.split("/"))
        return self.root.rstrip("/") + "/" + rel

    def display(self, rel: str = "") -> str:
        return self.url.rstrip("/") + ("/" + rel if rel else "")

    def same_place(self, other: "Location") -> bool:
        if self.is_local and other.is_local:
            return os.path.realpath(self.root) == os.path.realpath(other.root)
        if self.is_local or other.is_local:
            return False
        return _protocol(self.fs) == _protocol(other.fs) and self.root.rstrip("/") == other.root.rstrip("/")

    # --- reading -------------------------------------------------------------------------------
    def exists(self, rel: str = "") -> bool:
        path = self.join(rel)
        return os.path.exists(path) if self.is_local else self.fs.exists(path)

    def isdir(self, rel: str = "") -> bool:
        path = self.join(rel)
        return os.path.isdir(path) if self.is_local else self.fs.isdir(path)

    def listdir(self, rel: str = "") -> list[tuple[str, bool]]:
        """(name, is_dir) of the entries of a folder; empty when it does not exist. Locally only folders and
        regular files inside this Location (the rest is recorded in `skipped`)."""
        path = self.join(rel)
        if self.is_local:
            if rel and self._local_kind(rel) != "dir":
                return []
            try:
                with os.scandir(path) as it:
                    entries = list(it)
            except (FileNotFoundError, NotADirectoryError):
                return []
            out = []
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    out.append((e.name, True))
                elif e.is_file(follow_symlinks=False):
                    out.append((e.name, False))
                else:  # a link (followed only while it stays inside) or a FIFO, device, socket
                    kind = self._local_kind("/".join(p for p in (rel, e.name) if p))
                    if kind is not None:
                        out.append((e.name, kind == "dir"))
            return sorted(out)
        try:
            entries = self.fs.ls(path, detail=True)
        except FileNotFoundError:
            return []
        out = []
        base = path.rstrip("/")
        for e in entries:
            name = e["name"].rstrip("/")
            if name == base:
                continue
            out.append((name.rsplit("/", 1)[-1], e.get("type") == "directory"))
        return sorted(out)

    def walk_files(self, rel: str) -> Iterator[str]:
        """Paths (relative to this Location) of every file under `rel`."""
        path = self.join(rel)
        if self.is_local:
            yield from self._walk_local(rel.strip("/"), set())
            return
        root = self.root.rstrip("/") + "/"
        for full in sorted(self.fs.find(path)):
            if full.startswith(root):
                yield full[len(root):]

    def read_bytes(self, rel: str) -> bytes:
        path = self.join(rel)
        if self.is_local:
            with self.open_local(rel) as f:
                return f.read()
        return self.fs.cat_file(path)

    def is_file(self, rel: str) -> bool:
        """A regular file that may be read (locally: inside this Location; a refusal is recorded)."""
        if self.is_local:
            return self._local_kind(rel) == "file"
        return bool(self.fs.isfile(self.join(rel)))

    # --- the local rule: only what lies in this folder ------------------------------------------
    def _skip(self, rel: str, why: str) -> None:
        if rel not in self.skipped:
            self.skipped[rel] = why
            log.warning("%s: skipped, %s", self.display(rel), why)

    def _local_kind(self, rel: str) -> str | None:
        """"file" or "dir" when `rel` is a regular file or folder inside this Location (analysis.local_files'
        rule), else None: missing, or refused and recorded in `skipped`. Never opens anything."""
        kind, why = kind_inside(self.root, self.join(rel))
        if why is not None:
            self._skip(rel, why)
        return kind

    def open_local(self, rel: str) -> BinaryIO:
        """A local regular file inside this Location, opened for reading (analysis.local_files.open_regular);
        a refusal is recorded in `skipped` and raised as a UserError naming the file."""
        try:
            return open_regular(self.root, self.join(rel))
        except RefusedFile as exc:
            self._skip(rel, exc.why)
            raise UserError(f"not read: {exc.why}", where=self.display(rel)) from None

    def copy_mode(self, rel: str) -> int:
        """The mode a copy of `rel` gets: never more readable than the source (objects in a bucket: 0644)."""
        if not self.is_local:
            return COPY_MODE | 0o044
        return COPY_MODE | (stat.S_IMODE(os.stat(os.path.realpath(self.join(rel))).st_mode) & 0o044)

    def _walk_local(self, rel: str, seen: set[str]) -> Iterator[str]:
        if self._local_kind(rel) != "dir":
            return
        real = os.path.realpath(self.join(rel))
        if real in seen:  # a link back up the tree
            return
        seen.add(real)
        entries = self.listdir(rel)
        for name, is_dir in entries:
            if not is_dir:
                yield f"{rel}/{name}" if rel else name
        for name, is_dir in entries:
            if is_dir:
                yield from self._walk_local(f"{rel}/{name}" if rel else name, seen)

    def _writable_local(self, path: str) -> None:
        """Refuse to write through a link leading out of this (output) folder (the file itself is replaced by
        a rename, so a link in its place is replaced, never followed)."""
        if not inside(self.root, os.path.dirname(path)):
            raise UserError(f"not written: {os.path.relpath(path, self.root)} lies behind {LINK_OUT}; remove "
                            "the link or choose another output", where=self.display())

    def size(self, rel: str) -> int | None:
        path = self.join(rel)
        try:
            return os.path.getsize(path) if self.is_local else int(self.fs.size(path))
        except (FileNotFoundError, OSError):
            return None

    # --- writing -------------------------------------------------------------------------------
    def write_bytes(self, rel: str, data: bytes, *, mode: int = 0o644) -> None:
        """Write a whole file; locally through a temporary file and a rename, so readers never see half of it."""
        path = self.join(rel)
        if self.is_local:
            self._writable_local(path)
            atomic_write_bytes(path, data, mode=mode)
        else:
            self.fs.pipe_file(path, data)

    def remove(self, rel: str) -> None:
        """Delete one file if it is there (locally never through a link leading out of this folder)."""
        path = self.join(rel)
        if self.is_local:
            self._writable_local(path)
            _unlink(path)
        elif self.fs.exists(path):
            self.fs.rm_file(path)

    def move_in(self, local_path: str, rel: str) -> None:
        """Put a local file (a staged one, `outputs.staging`) at `rel`: renamed into place on the same local
        filesystem, else copied (and the local file left for its owner to delete)."""
        path = self.join(rel)
        if not self.is_local:
            self.fs.put_file(local_path, path)
            return
        self._writable_local(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            os.replace(local_path, path)
        except OSError:  # another filesystem: copy through a temporary file, then rename
            folder = os.path.dirname(local_path)
            self.copy_from(Location(url=folder, root=folder), os.path.basename(local_path), rel)

    def copy_from(self, src: "Location", rel_src: str, rel_dst: str) -> None:
        """Copy one file; a local source must be a regular file inside `src` (Location.open_local)."""
        dst_path = self.join(rel_dst)
        src_path = src.join(rel_src)
        if self.is_local:
            self._writable_local(dst_path)
            mode = src.copy_mode(rel_src)
            os.makedirs(os.path.dirname(dst_path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dst_path), prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as fout:
                    if src.is_local:
                        with src.open_local(rel_src) as fin:
                            shutil.copyfileobj(fin, fout, length=1 << 20)
                    else:
                        with src.fs.open(src_path, "rb") as fin:
                            shutil.copyfileobj(fin, fout, length=1 << 20)
                os.chmod(tmp, mode)
                os.replace(tmp, dst_path)
            except BaseException:
                _unlink(tmp)
                raise
        elif src.is_local:
            with src.open_local(rel_src) as fin, self.fs.open(dst_path, "wb") as fout:
                shutil.copyfileobj(fin, fout, length=1 << 20)
        else:
            with src.fs.open(src_path, "rb") as fin, self.fs.open(dst_path, "wb") as fout:
                shutil.copyfileobj(fin, fout, length=1 << 20)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o644) -> None:
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-" + os.path.basename(path) + "-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _protocol(fs: Any) -> str:
    proto = getattr(fs, "protocol", "")
    return proto[0] if isinstance(proto, (tuple, list)) else str(proto)


REMOTE_LIBRARIES = ("botocore", "aiobotocore", "aiohttp", "s3fs", "gcsfs")


@contextlib.contextmanager
def storage_errors(where: str) -> Iterator[None]:
    """Remote storage failures (access denied, no credentials, an endpoint that does not answer) as one UserError
    naming `where` and what to check; any other error passes through."""
    try:
        yield
    except PermissionError as exc:
        raise UserError(f"access denied ({mask_url(str(exc))}); check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY "
                        "and the endpoint (--s3-endpoint or EVALFLEET_S3_ENDPOINT)", where=where) from None
    except Exception as exc:
        if type(exc).__module__.split(".")[0] not in REMOTE_LIBRARIES:
            raise
        raise UserError(f"storage error: {type(exc).__name__}: {mask_url(str(exc))}; check the endpoint "
                        "(--s3-endpoint or EVALFLEET_S3_ENDPOINT) and credentials (AWS_ACCESS_KEY_ID / "
                        "AWS_SECRET_ACCESS_KEY)", where=where) from None


def open_location(target: str, *, endpoint_url: str | None = None, role: str = "source") -> Location:
    """A Location for a local path or URL. Raises UserError when the URL's filesystem is not available, when
    the URL carries credentials (they belong in the environment: never in a command line, a log or a file),
    or when the S3 endpoint is not an http(s) URL. Every message shows the URL masked (secrets.mask_url)."""
    if not is_url(target):
        local = target[len("file://"):] if target.startswith("file://") else target
        return Location(url=target, root=str(Path(local).expanduser()))
    where = mask_url(target)
    if carries_credentials(target):
        raise UserError(f"this {role} URL carries credentials; give the URL without them and put them in the "
                        "environment (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY for s3://)", where=where)
    protocol = target.split("://", 1)[0].lower()
    options: dict[str, Any] = {}
    if protocol in ("s3", "s3a"):
        if importlib.util.find_spec("s3fs") is None:  # only s3:// users need s3fs; fsspec imports it lazily
            raise UserError("s3:// URLs need the s3fs package (pip install s3fs)", where=where)
        endpoint = s3_endpoint(endpoint_url)
        # No region_name in client_kwargs: S3-compatible stores refuse bucket creation with it.
        options = {"client_kwargs": {"endpoint_url": endpoint} if endpoint else {},
                   "skip_instance_cache": True, "use_listings_cache": False}
        target = "s3://" + target.split("://", 1)[1]
    try:
        import fsspec

        fs, root = fsspec.core.url_to_fs(target, **options)
    except ImportError as exc:
        raise UserError(f"no filesystem for {protocol}:// URLs is installed ({mask_url(str(exc))})",
                        where=where) from None
    except ValueError as exc:
        raise UserError(f"cannot open this {role} URL: {mask_url(str(exc))}", where=where) from None
    return Location(url=target, root=root, fs=fs)
