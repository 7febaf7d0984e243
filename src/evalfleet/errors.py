"""User-facing errors. A UserError is bad input: the CLI prints its one line and exits 2."""

from __future__ import annotations


class UserError(Exception):
    """Bad input. `where` is the file (or "command line"), `key` the key path inside it."""

    exit_code = 2

    def __init__(self, message: str, *, where: str | None = None, key: str | None = None):
        self.message = message
        self.where = where
        self.key = key
        super().__init__(self.line())

    def line(self) -> str:
        parts = [p for p in (self.where, self.key) if p]
        prefix = ": ".join(parts)
        return f"{prefix}: {self.message}" if prefix else self.message


class InfrastructureError(Exception):
    """Not the policy's fault (server down, timeout, crash): the episode is `status: error` and retried."""
