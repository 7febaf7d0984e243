"""The record sink (a Ray actor): every record line of the evaluation, and those the driver has not yet written."""

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
    lines the driver has not yet written."""

    def __init__(self, existing: dict[str, list[str]]):
        self.lines = {run: list(lines) for run, lines in existing.items()}
        self.unwritten: list[tuple[str, str, str]] = []

    def known(self, run: str, start: int, stop: int | None) -> list[str]:
        lines = self.lines.get(run, [])
        if stop is None:
            return list(lines)
        return [line for line in lines if (ep := _episode_of(line)) is not None and start <= ep < stop]

    def push(self, run: str, shard_id: str, lines: list[str]) -> None:
        self.lines.setdefault(run, []).extend(lines)
        self.unwritten.extend((run, shard_id, line) for line in lines)

    def drain(self) -> list[tuple[str, str, str]]:
        out, self.unwritten = self.unwritten, []
        return out
