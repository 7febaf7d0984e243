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
        """One line, always: a line break or control character inside a name or value is shown escaped."""
        parts = [p for p in (self.where, self.key) if p]
        prefix = ": ".join(parts)
        return _one_line(f"{prefix}: {self.message}" if prefix else self.message)


def _one_line(text: str) -> str:
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class InfrastructureError(Exception):
    """Not the policy's fault (server down, timeout, crash): the episode is `status: error` and retried."""
