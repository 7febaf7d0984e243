"""User-facing errors. A UserError is bad input: the CLI prints its one line and exits 2. OutOfSpace is a run
whose output folder's disk filled up: one line too, and exit 1 as for a run whose Runs failed."""

from __future__ import annotations

import errno


class UserError(Exception):
    """Bad input. `where` is the file (or "command line"), `key` the key path inside it."""

    exit_code = 2

    def __init__(self, message: str, *, where: str | None = None, key: str | None = None):
        self.message = message
        self.where = where
        self.key = key
        super().__init__(self.line())

    def line(self) -> str:
        """One line, always: a line break or control character inside a name or value is shown escaped."""
        parts = [p for p in (self.where, self.key) if p]
        prefix = ": ".join(parts)
        return _one_line(f"{prefix}: {self.message}" if prefix else self.message)


# A disk full (ENOSPC) or a quota used up (EDQUOT): not the Experiment's fault, the user's to fix.
OUT_OF_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def out_of_space(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in OUT_OF_SPACE_ERRNOS


class OutOfSpace(OSError):
    """A run stopped because its output folder's filesystem is full: an OSError with the errno it had, its
    message one line naming the folder, the file it could not write and the fix."""

    exit_code = 1

    def __init__(self, cause: OSError, *, where: str, fix: str):
        what = (cause.strerror or str(cause)).lower()
        self.message = f"{what} (writing {cause.filename}); {fix}" if cause.filename else f"{what}; {fix}"
        self.where = where
        super().__init__(cause.errno, self.message, cause.filename)

    def line(self) -> str:
        return _one_line(f"{self.where}: {self.message}")

    def __str__(self) -> str:
        return self.line()


def _one_line(text: str) -> str:
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class InfrastructureError(Exception):
    """Not the policy's fault (server down, timeout, crash): the episode is `status: error` and retried."""
