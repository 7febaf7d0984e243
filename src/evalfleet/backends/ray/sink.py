"""The record sink (a Ray actor): every record line of the evaluation, and those the driver has not yet written,
with the files of their episodes (trajectories) it has not yet written either."""

from __future__ import annotations

import json


def _episode_of(line: str) -> int | None:
    try:
        ep = json.loads(line).get("episode")
    except (ValueError, AttributeError):
        return None
    return ep if isinstance(ep, int) else None


class RecordSink:
    """Holds every record line of the evaluation (those found at the start and those tasks push) and the
    lines the driver has not yet written, and the episode files pushed with them until the driver writes them
    (only those: a file is not kept once drained)."""

    def __init__(self, existing: dict[str, list[str]]):
        self.lines = {run: list(lines) for run, lines in existing.items()}
        self.unwritten: list[tuple[str, str, str]] = []
        self.unwritten_files: list[tuple[str, str, bytes]] = []  # (run, path in the Run folder, content)

    def known(self, run: str, start: int, stop: int | None) -> list[str]:
        lines = self.lines.get(run, [])
        if stop is None:
            return list(lines)
        return [line for line in lines if (ep := _episode_of(line)) is not None and start <= ep < stop]

    def push(self, run: str, shard_id: str, lines: list[str], files: list[tuple[str, bytes]] | None = None) -> None:
        """New record lines of a shard and the files of their episodes (path in the Run folder, content), in one
        call: the driver writes the files before the lines, so a record it has always has its files."""
        self.unwritten_files.extend((run, rel, data) for rel, data in files or ())
        self.lines.setdefault(run, []).extend(lines)
        self.unwritten.extend((run, shard_id, line) for line in lines)

    def drain(self) -> tuple[list[tuple[str, str, bytes]], list[tuple[str, str, str]]]:
        """(the files, the record lines) not yet written, to be written in that order."""
        files, self.unwritten_files = self.unwritten_files, []
        out, self.unwritten = self.unwritten, []
        return files, out
