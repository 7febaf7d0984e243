"""Follow an output folder or bucket prefix while a run writes it, reading only what is new.

Per record file (`<run>/episode_results.jsonl`, `<run>/parts/*.jsonl`) a `FileTail` keeps the byte offset read so
far; a refresh reads from that offset (a local seek, an S3 ranged GET) up to the last complete line, so a torn
last line is read once it is whole. A file that shrank (or, locally, was replaced by another file) makes its
Run be read again from the start. Which records count is `records.RunRecords`' one rule; the counts shown are
those of the record that counts per episode (`records.precedence`, as the progress bar does). A refresh costs a
listing of the Run folders and one read per grown file: it grows with what is new, not with the folder.
Arena's own record files are not followed live (the final page, collect's index.html, holds them).
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from evalfleet import bounded_json
from evalfleet.errors import UserError
from evalfleet.layout import EXPERIMENT_FILE, METADATA_FILE, REPORT_FILE, RESULT_FILE
from evalfleet.outputs.run_sources import find_runs
from evalfleet.outputs.storage import Location
from evalfleet.rollout.records import RunRecords, RunScope, precedence, record_episode
from evalfleet.rollout.run_folder import (experiment_document, merge_statuses, parse_record_lines, planned_episodes,
                                          read_status)

NEWEST_VIDEOS = 6  # per Run
RUNNING_STATES = ("starting", "running")
OVERLAP = 64  # bytes before the offset read again to tell an append from a rewrite


@dataclass
class FileTail:
    """How far one record file has been read: `offset` bytes, up to its last complete line, and the last bytes
    before it (`seen`): a file whose bytes there changed was rewritten, not appended to, and is read again."""

    rel: str
    offset: int = 0
    seen: bytes = b""  # the last OVERLAP bytes before `offset`, read again with the new bytes and compared
    ident: Any = None  # a local file's (device, inode): another file in its place is read from the start

    def read_new(self, loc: Location) -> tuple[bytes, bool] | None:
        """(the complete lines appended since the last call, whether the file was replaced and must be read
        from the start); None when it cannot be read now (gone, or refused by the Location's rule)."""
        start = self.offset - len(self.seen)
        try:
            if loc.is_local:
                if self.unchanged(loc):
                    return b"", False
                with loc.open_local(self.rel) as f:
                    st = os.fstat(f.fileno())
                    if self.ident is not None and self.ident != (st.st_dev, st.st_ino):
                        return b"", True
                    self.ident, size = (st.st_dev, st.st_ino), st.st_size
                    if size <= self.offset:
                        return b"", size < self.offset
                    f.seek(start)
                    data = f.read(size - start)
            else:
                path = loc.join(self.rel)
                size = int(loc.fs.size(path))
                if size <= self.offset:
                    return b"", size < self.offset
                data = loc.fs.cat_file(path, start=start, end=size)  # a ranged GET
        except (UserError, OSError):
            return None
        if data[:len(self.seen)] != self.seen:
            return b"", True  # rewritten with other bytes before the offset (a collect's merged file)
        new = data[len(self.seen):]
        end = new.rfind(b"\n")
        if end < 0:
            return b"", False  # only a torn line so far
        self.offset += end + 1
        self.seen = (self.seen + new[:end + 1])[-OVERLAP:]
        return new[:end + 1], False

    def unchanged(self, loc: Location) -> bool:
        """A local file that is still the one read, of the size read: one stat, nothing opened (a file that
        changed is opened by `Location.open_local`'s rule: only inside the folder)."""
        try:
            st = os.stat(loc.join(self.rel))
        except OSError:
            return False
        return self.ident == (st.st_dev, st.st_ino) and st.st_size == self.offset


@dataclass
class LiveRun:
    """What is known of one Run so far."""

    name: str
    planned: int | None = None
    status: dict[str, Any] | None = None  # run_status.json
    tails: dict[str, FileTail] = field(default_factory=dict)
    records: RunRecords = field(init=False)
    counted: dict[int, tuple[tuple[int, float], str]] = field(default_factory=dict)  # episode -> (precedence, status)
    counts: dict[str, int] = field(default_factory=lambda: {"success": 0, "failure": 0, "error": 0})
    first_start: float | None = None
    last_end: float | None = None
    videos: deque = field(default_factory=lambda: deque(maxlen=NEWEST_VIDEOS))  # (timestamp, episode, video)
    changed: bool = True

    def __post_init__(self) -> None:
        self.records = RunRecords(RunScope(self.name, self.planned))

    def restart(self, planned: int | None) -> None:
        """Forget everything read: every file of this Run is read again from its start."""
        self.planned = planned
        self.records = RunRecords(RunScope(self.name, planned))
        self.tails = {rel: FileTail(rel) for rel in self.tails}
        self.counted, self.counts = {}, {"success": 0, "failure": 0, "error": 0}
        self.first_start = self.last_end = None
        self.videos.clear()
        self.changed = True

    def add(self, rec: dict[str, Any], line: str, where: str) -> None:
        self.records.add(rec, line, where)
        if self.records.scope.reason_to_reject(rec):
            return
        ep = record_episode(rec)
        assert ep is not None
        rank = precedence(rec)
        before = self.counted.get(ep)
        if before is not None and rank < before[0]:
            return  # a stale duplicate: the record that counts stays
        status = rec.get("status") if rec.get("status") in self.counts else "error"
        if before is not None:
            self.counts[before[1]] -= 1
        self.counts[status] += 1
        self.counted[ep] = (rank, status)
        self.changed = True
        end = rec.get("timestamp")
        if isinstance(end, (int, float)) and not isinstance(end, bool):
            duration = rec.get("duration_s")
            start = end - duration if isinstance(duration, (int, float)) and duration >= 0 else end
            self.first_start = start if self.first_start is None else min(self.first_start, start)
            self.last_end = end if self.last_end is None else max(self.last_end, end)
            if isinstance(rec.get("video"), dict):
                self.videos.append((float(end), ep, rec["video"]))

    @property
    def done(self) -> int:
        return len(self.counted)


class FolderFollower:
    """The live state of one output folder or bucket prefix; `refresh()` reads what is new."""

    def __init__(self, location: Location):
        self.location = location
        self.runs: dict[str, LiveRun] = {}
        self.order: list[str] = []  # the Experiment's Run order, once experiment.yaml is there
        self.named: dict[str, Any] = {}  # experiment.yaml's Runs, `shared` merged in
        self.plan: dict[str, int | None] = {}
        self.metadata: dict[str, Any] | None = None
        self.finished = False  # collect wrote index.html and the run is no longer running
        self.version = 0  # incremented whenever what the page shows changed
        self._statuses: dict[str, tuple[Any, dict[str, Any]]] = {}  # run_status.json by path: (stamp, content)

    def refresh(self) -> bool:
        """Read what is new; True when anything the page shows changed."""
        loc = self.location
        changed = self._read_experiment()
        metadata = self._small_json(METADATA_FILE)
        if metadata != self.metadata:
            self.metadata, changed = metadata, True
        sources: dict[str, list] = {}
        for name, src in find_runs(loc) if loc.exists() else []:
            sources.setdefault(name, []).append(src)
        for name, srcs in sources.items():
            changed |= self._refresh_run(name, srcs)
        finished = (self._exists(REPORT_FILE) and self._exists(RESULT_FILE)
                    and (self.metadata or {}).get("status") not in RUNNING_STATES)
        if finished != self.finished:
            self.finished, changed = finished, True
        if changed:
            self.version += 1
        return changed

    def _refresh_run(self, name: str, srcs: list) -> bool:
        run = self.runs.get(name)
        if run is None:
            run = self.runs[name] = LiveRun(name, self.plan.get(name))
        statuses = [s for s in (self._status(src.status_file) for src in srcs if src.status_file) if s is not None]
        status = merge_statuses(statuses)
        if status != run.status:
            run.status, run.changed = status, True
        planned = (status or {}).get("planned_episodes")
        planned = planned if isinstance(planned, int) else self.plan.get(name)
        if planned != run.planned:
            run.restart(planned)  # the records are held to another plan: count them again
        for src in srcs:
            for rel in src.record_files:
                run.tails.setdefault(rel, FileTail(rel))
        for _ in range(2):  # a replaced file: its Run once more from the start
            if not self._read_tails(run):
                break
            run.restart(run.planned)
        changed, run.changed = run.changed, False
        return changed

    def _read_tails(self, run: LiveRun) -> bool:
        """Read every tail of a Run; True when one was replaced (the Run must be read again)."""
        for tail in run.tails.values():
            new = tail.read_new(self.location)
            if new is None:
                continue
            data, replaced = new
            if replaced:
                return True
            if data:
                where = self.location.display(tail.rel)
                for rec, line in parse_record_lines(data):
                    run.add(rec, line, where)
        return False

    def _status(self, rel: str) -> dict[str, Any] | None:
        """A run_status.json (locally read again only when its size or time changed); None when unreadable now."""
        stamp = None
        if self.location.is_local:
            try:
                st = os.stat(self.location.join(rel))
                stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
            except OSError:
                return None
            if rel in self._statuses and self._statuses[rel][0] == stamp:
                return self._statuses[rel][1]
        try:
            status = read_status(self.location, rel)
        except (UserError, OSError):
            return None  # half written or refused: read again at the next refresh
        self._statuses[rel] = (stamp, status)
        return status

    def _read_experiment(self) -> bool:
        if self.order or not self._exists(EXPERIMENT_FILE):
            return False
        try:
            self.named = experiment_document(self.location.read_bytes(EXPERIMENT_FILE),
                                             self.location.display(EXPERIMENT_FILE))
        except (UserError, OSError):
            return False
        self.order = [str(n) for n in self.named]
        self.plan = planned_episodes(self.named)
        return True

    def _exists(self, rel: str) -> bool:
        try:
            return self.location.is_file(rel)
        except OSError:
            return False

    def _small_json(self, rel: str) -> dict[str, Any] | None:
        if not self._exists(rel):
            return None
        try:
            doc = bounded_json.loads(self.location.read_bytes(rel))
        except (UserError, OSError, ValueError):
            return self.metadata if rel == METADATA_FILE else None  # being rewritten: keep what was read
        return doc if isinstance(doc, dict) else None

    def run_names(self) -> list[str]:
        """The Runs to show: the Experiment's, in its order, then any other found, by name."""
        return self.order + sorted(n for n in self.runs if n not in self.order)

    def records_of(self) -> dict[str, list[dict[str, Any]]]:
        return {name: run.records.records for name, run in self.runs.items()}
