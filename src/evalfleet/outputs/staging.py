"""Files collect writes for an output, staged in a temporary folder and moved into it only at the end.

Collect streams the Runs one at a time, so a problem it finds in the last Run (a run_status.json that is not
JSON, one Run's records under two protocol identities: a UserError) comes after the first Runs' merged files
were made. They are made here, not in the output: `commit()` moves them in once every Run has been read, and a
UserError before it leaves the output as it was. The folder lies beside a local output (the same filesystem:
a rename, no copy) or, for a bucket or an unwritable parent, in the system's temporary folder.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import IO

from evalfleet.outputs.storage import Location


class Staging:
    """Files for `dest`, written under a temporary folder (`open`, `write_bytes`), moved into `dest` by
    `commit()` in the order they were made; `close()` deletes what is left. A context manager."""

    def __init__(self, dest: Location):
        self.dest = dest
        parent = os.path.dirname(os.path.abspath(dest.root)) if dest.is_local else None
        try:
            self.folder = tempfile.mkdtemp(prefix=".evalfleet-collect-", dir=parent)
        except OSError:
            self.folder = tempfile.mkdtemp(prefix="evalfleet-collect-")
        self._files: list[str] = []

    def path(self, rel: str) -> str:
        return os.path.join(self.folder, *rel.split("/"))

    def open(self, rel: str) -> IO[bytes]:
        """A new file to write, to be moved to `rel` in the output."""
        path = self.path(rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self._files.append(rel)
        return open(path, "wb")

    def write_bytes(self, rel: str, data: bytes) -> None:
        with self.open(rel) as f:
            f.write(data)

    def staged(self) -> list[str]:
        """What was staged so far (relative paths, in order); a forked child of the collecting process returns
        its own share with its result, and the parent `adopt`s it."""
        return list(self._files)

    def adopt(self, rels: list[str]) -> None:
        """Files another process staged in this folder, to be committed after those staged here so far."""
        self._files.extend(rels)

    def commit(self) -> None:
        for rel in self._files:
            self.dest.move_in(self.path(rel), rel)
        self._files = []

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> "Staging":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
