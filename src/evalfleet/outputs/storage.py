"""Where outputs live: local folders or fsspec URLs (s3://bucket/prefix, gs://..., file://...).

A `Location` is one folder on one filesystem. Local paths use plain file operations (atomic writes:
temporary file + rename); URLs go through fsspec, and s3fs is imported only when an s3:// URL is used.
S3-compatible stores take their endpoint from `--s3-endpoint` or the environment
(`EVALFLEET_S3_ENDPOINT`, then `AWS_ENDPOINT_URL`); credentials come from the usual AWS variables.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from evalfleet.errors import UserError

S3_ENDPOINT_ENV = ("EVALFLEET_S3_ENDPOINT", "AWS_ENDPOINT_URL")


def is_url(target: str) -> bool:
    return "://" in target and not target.startswith("file://")


def s3_endpoint(explicit: str | None = None) -> str | None:
    if explicit:
        return explicit
    for name in S3_ENDPOINT_ENV:
        if os.environ.get(name):
            return os.environ[name]
    return None


@dataclass
class Location:
    """A folder: `root` is a local path (fs is None) or a path inside an fsspec filesystem."""

    url: str
    root: str
    fs: Any = None  # fsspec AbstractFileSystem for URLs, None for local paths

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
        """(name, is_dir) of the entries of a folder; empty when it does not exist."""
        path = self.join(rel)
        if self.is_local:
            try:
                with os.scandir(path) as it:
                    return sorted((e.name, e.is_dir()) for e in it)
            except (FileNotFoundError, NotADirectoryError):
                return []
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
            for dirpath, dirnames, filenames in os.walk(path):
                dirnames.sort()
                sub = os.path.relpath(dirpath, self.root).replace(os.sep, "/")
                for name in sorted(filenames):
                    yield f"{sub}/{name}"
            return
        root = self.root.rstrip("/") + "/"
        for full in sorted(self.fs.find(path)):
            if full.startswith(root):
                yield full[len(root):]

    def read_bytes(self, rel: str) -> bytes:
        path = self.join(rel)
        if self.is_local:
            with open(path, "rb") as f:
                return f.read()
        return self.fs.cat_file(path)

    def size(self, rel: str) -> int | None:
        path = self.join(rel)
        try:
            return os.path.getsize(path) if self.is_local else int(self.fs.size(path))
        except (FileNotFoundError, OSError):
            return None

    # --- writing -------------------------------------------------------------------------------
    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write a whole file; locally through a temporary file and a rename, so readers never see half of it."""
        path = self.join(rel)
        if self.is_local:
            atomic_write_bytes(path, data)
        else:
            self.fs.pipe_file(path, data)

    def copy_from(self, src: "Location", rel_src: str, rel_dst: str) -> None:
        dst_path = self.join(rel_dst)
        src_path = src.join(rel_src)
        if self.is_local and src.is_local:
            os.makedirs(os.path.dirname(dst_path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dst_path), prefix=".tmp-")
            os.close(fd)
            try:
                shutil.copyfile(src_path, tmp)
                os.replace(tmp, dst_path)
            except BaseException:
                _unlink(tmp)
                raise
        elif src.is_local:
            self.fs.put_file(src_path, dst_path)
        elif self.is_local:
            os.makedirs(os.path.dirname(dst_path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dst_path), prefix=".tmp-")
            os.close(fd)
            try:
                src.fs.get_file(src_path, tmp)
                os.replace(tmp, dst_path)
            except BaseException:
                _unlink(tmp)
                raise
        else:
            with src.fs.open(src_path, "rb") as fin, self.fs.open(dst_path, "wb") as fout:
                shutil.copyfileobj(fin, fout, length=1 << 20)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-" + os.path.basename(path) + "-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
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


def open_location(target: str, *, endpoint_url: str | None = None, role: str = "source") -> Location:
    """A Location for a local path or URL. Raises UserError when the URL's filesystem is not available."""
    if not is_url(target):
        local = target[len("file://"):] if target.startswith("file://") else target
        return Location(url=target, root=str(Path(local).expanduser()))
    protocol = target.split("://", 1)[0].lower()
    options: dict[str, Any] = {}
    if protocol in ("s3", "s3a"):
        if importlib.util.find_spec("s3fs") is None:  # only s3:// users need s3fs; fsspec imports it lazily
            raise UserError("s3:// URLs need the s3fs package (pip install s3fs)", where=target)
        endpoint = s3_endpoint(endpoint_url)
        # No region_name in client_kwargs: S3-compatible stores refuse bucket creation with it.
        options = {"client_kwargs": {"endpoint_url": endpoint} if endpoint else {},
                   "skip_instance_cache": True, "use_listings_cache": False}
        target = "s3://" + target.split("://", 1)[1]
    try:
        import fsspec

        fs, root = fsspec.core.url_to_fs(target, **options)
    except ImportError as exc:
        raise UserError(f"no filesystem for {protocol}:// URLs is installed ({exc})", where=target) from None
    except ValueError as exc:
        raise UserError(f"cannot open this {role} URL: {exc}", where=target) from None
    return Location(url=target, root=root, fs=fs)
