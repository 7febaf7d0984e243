"""Episode records: one JSON line per finished episode, append-only, flushed per line.

Readers tolerate a torn last line (a crash mid-write) and duplicate episodes (the last complete
record of an episode wins), so a log can always be resumed or collected.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator

from evalfleet.layout import RECORDS_SUFFIX, parts_dir, records_path
from evalfleet.rollout.run_folder import parse_record_lines

STATUSES = ("success", "failure", "error")


# Names Isaac Lab Arena's readers look for, written beside evalfleet's own: alias → the field it repeats (None:
# Arena's episode index within its environment, always 0 here: one episode per environment slot).
ARENA_ALIASES: dict[str, str | None] = {"job_name": "run", "env_id": "episode", "episode_in_env": None}


@dataclass
class EpisodeRecord:
    run: str  # the Run's name (its key under `runs:`)
    task: str  # the task label the report groups by (the Run's `task`, else its environment's task)
    policy: str  # the policy label the report compares (the Run's `policy_name`, else its policy type)
    episode: int  # the episode's index in its Run, 0-based: pairs episodes across Runs
    seed: int  # the episode's seed, a function of the Experiment's seed, the task and the index (docs/determinism.md)
    status: str  # success | failure | error (infrastructure: excluded from rates, retried)
    success: bool | None  # None on an error: it decided nothing
    episode_length: int  # environment steps taken
    duration_s: float  # wall-clock seconds of the episode, reset included
    variations: dict[str, Any] = field(default_factory=dict)  # each variation's value drawn for this episode
    attempt: int = 1  # 1, then 2, ... for an episode run again after an error (the last attempt's record wins)
    timestamp: float = field(default_factory=time.time)  # Unix time the record was written
    error: str | None = None  # an error's message and where it was raised
    video: dict[str, str] | None = None  # camera → the episode's video, relative to the Run folder (`recording.video`)
    policy_latency_ms: float | None = None  # the mean wall-clock time of the episode's policy calls
    progress: float | dict[str, Any] | None = None  # a number in 0..1, or Arena's map (overall_score, ...)
    # Where the policy came from, as it declares it (a LeRobot checkpoint: config and weights sha256).
    policy_provenance: dict[str, Any] | None = None
    # Why a `failure` or `error` episode ended (sim/protocol.py: a task code, step_limit, or a common code);
    # None on a success.
    failure_code: str | None = None
    protocol: str | None = None  # the identity (SHA-256) of the Run's task protocol (protocol.json), on every record

    # A Run whose `timing:` is not sync (rollout/latency.py): mode, latency_ms, latency_steps, held_steps,
    # stale_steps, stale_ratio; absent for sync Runs, whose records are as they always were.
    timing: dict[str, Any] | None = None
    # Steps whose action lay outside the env's declared bounds (the env clipped them); absent where it declares none.
    clipped_actions: int | None = None
    # The episode's recorded trajectory (rollout/trajectory.py), relative to its Run folder: `frames` its Arrow IPC
    # file, `videos` camera -> mp4; absent where the episode keeps none.
    trajectory: dict[str, Any] | None = None
    # The first step after which the env reported success (None: it never did); with `success.hold_steps` the
    # episode succeeds only once that success has held, so its length may be larger.
    first_success_step: int | None = None
    # True where the task's success already held after the first step (an `error` record, code success_at_reset).
    success_at_reset: bool | None = None
    # A digest of the state the episode ended in (the env's `state_digest()`, else its last observation's state):
    # `evalfleet verify` replays episodes and compares it.
    final_state: str | None = None

    def to_json(self) -> dict[str, Any]:
        # Shallow (not dataclasses.asdict, which deep-copies): the dict is serialised at once.
        data = {k: v for k in self.__dataclass_fields__ if (v := getattr(self, k)) is not None or k == "success"}
        for alias, name in ARENA_ALIASES.items():  # so Arena's readers work on evalfleet output
            data[alias] = getattr(self, name) if name else 0
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "EpisodeRecord":
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)


def encode_record(record: EpisodeRecord | dict[str, Any]) -> str:
    data = record.to_json() if isinstance(record, EpisodeRecord) else record
    return json.dumps(data, separators=(",", ":"), default=_json_default) + "\n"


def _json_default(value: Any) -> Any:
    # numpy scalars and arrays appear in variation values.
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


class RecordWriter:
    """Appends records to a JSONL file, one flushed line per episode. A flushed line survives the
    process being killed; `fsync=True` also makes it survive a machine crash, at a cost per episode."""

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._file: IO[str] = open(self.path, "a", encoding="utf-8")
        self._repair_torn_tail()

    def _repair_torn_tail(self) -> None:
        # A crash mid-write leaves a line without "\n"; start on a fresh line so the next record stays whole.
        size = self.path.stat().st_size
        if size == 0:
            return
        with open(self.path, "rb") as f:
            f.seek(size - 1)
            if f.read(1) != b"\n":
                self._file.write("\n")
                self._file.flush()

    def append(self, record: EpisodeRecord | dict[str, Any]) -> None:
        self._file.write(encode_record(record))
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _numeric(value: Any) -> bool:
    return isinstance(value, int) or (isinstance(value, float) and value == value and abs(value) != float("inf"))


def record_dicts(data: bytes) -> list[dict[str, Any]]:
    """A record file's records: its complete JSON object lines (`run_folder.parse_record_lines`) with a numeric
    attempt (readers take int() of it); torn or garbled lines are skipped."""
    return [rec for rec, _line in parse_record_lines(data) if _numeric(rec.get("attempt", 1))]


def iter_record_dicts(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Every record in a file (`record_dicts`); none when it does not exist."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return
    yield from record_dicts(data)


# --- which records count: one plan-aware rule for the runner, collect, resume, progress and analysis ---

def record_run(rec: dict[str, Any]) -> str | None:
    run = rec.get("run", rec.get("job_name"))
    return run if isinstance(run, str) else None


def record_episode(rec: dict[str, Any]) -> int | None:
    """The plan index a record claims, or None when it is not a non-negative integer (`true` is not 1)."""
    ep = rec.get("episode", rec.get("env_id"))
    return ep if isinstance(ep, int) and not isinstance(ep, bool) and ep >= 0 else None


def _attempt(rec: dict[str, Any]) -> int:
    a = rec.get("attempt", 1)
    return a if isinstance(a, int) and not isinstance(a, bool) else 1


def _timestamp(rec: dict[str, Any]) -> float:
    t = rec.get("timestamp")
    if isinstance(t, (int, float)) and not isinstance(t, bool) and t == t:  # NaN sorts nowhere
        return float(t)
    return float("-inf")


def precedence(rec: dict[str, Any]) -> tuple[int, float]:
    """Of two records of one episode the one with the greater precedence counts (a tie: the later line)."""
    return _attempt(rec), _timestamp(rec)


@dataclass(frozen=True)
class RunScope:
    """What belongs to one Run: records naming this Run (or naming none, found in its folder) for one of its
    planned episodes 0..planned-1 (`planned` None: open-ended, a num_steps Run or a plan not known)."""

    run: str
    planned: int | None = None

    def reason_to_reject(self, rec: dict[str, Any]) -> str | None:
        """None if the record is one of this Run's planned episodes, else "foreign", "out_of_plan" or
        "malformed" (its status is none of success, failure, error: nothing can be counted of it)."""
        run = record_run(rec)
        if run is not None and run != self.run:
            return "foreign"
        ep = record_episode(rec)
        if ep is None or (self.planned is not None and ep >= self.planned):
            return "out_of_plan"
        status = rec.get("status")
        if not isinstance(status, str) or status not in STATUSES:
            return "malformed"
        return None


@dataclass
class SetAside:
    """Records kept out of a Run's counts, and where they were found."""

    foreign: int = 0  # another Run's records
    out_of_plan: int = 0  # an episode that is not one of the Run's planned indices
    stale: int = 0  # a duplicate older than the record kept for its episode, read after it
    malformed: int = 0  # a record whose status is none of STATUSES (a list, a number, a word of its own)
    sources: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.foreign + self.out_of_plan + self.stale + self.malformed

    def count(self, kind: str, source: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        if source:
            self.sources[source] = self.sources.get(source, 0) + 1

    def add(self, other: "SetAside") -> None:
        self.foreign += other.foreign
        self.out_of_plan += other.out_of_plan
        self.stale += other.stale
        self.malformed += other.malformed
        for src, n in other.sources.items():
            self.sources[src] = self.sources.get(src, 0) + n

    def to_json(self) -> dict[str, Any]:
        return {"total": self.total, "foreign": self.foreign, "out_of_plan": self.out_of_plan, "stale": self.stale,
                "malformed": self.malformed, "sources": dict(sorted(self.sources.items()))}

    def describe(self) -> str:
        parts = [f"{n} {label}" for n, label in ((self.foreign, "of another Run"),
                                                 (self.out_of_plan, "outside the plan"),
                                                 (self.stale, "stale duplicates"),
                                                 (self.malformed, "without a valid status")) if n]
        where = ", ".join(sorted(self.sources))
        return f"{self.total} records set aside ({', '.join(parts)})" + (f" in {where}" if where else "")


_ABSENT = object()  # a kept field the record did not have


class RunRecords:
    """The records that count for one Run: at most one per planned episode.

    Feed every record found, in read order (the merged file first, then the shard parts, then further
    sources). Of several records of one episode the latest wins: the higher attempt, then the newer
    timestamp, then the later line; a duplicate that loses although it was read later is stale. Records
    of another Run or of an episode outside the plan are set aside, never counted."""

    def __init__(self, scope: RunScope, keep: Iterable[str] | None = None):
        self.scope = scope
        # Only these keys of each winning record are kept (None: all): a runner asking which episodes are
        # decided, once per shard, keeps a few fields, not every record's dict (issue #29: the worker's peak
        # RSS grew ~2.5 KB per record of the Run).
        self.keep = None if keep is None else tuple(keep)
        self.set_aside = SetAside()
        # episode -> (precedence, the record (with `keep`: its kept values, a tuple: a third of a dict's size), line)
        self._best: dict[int, tuple[tuple[int, float, int], Any, str | None]] = {}
        self._seq = 0

    def add(self, rec: dict[str, Any], line: str | None = None, source: str = "") -> str | None:
        """Feeds one record; returns why it is set aside as not this Run's ("foreign", "out_of_plan"), else None
        (it is one of the Run's planned episodes, whether or not it wins its episode)."""
        rejected = self.scope.reason_to_reject(rec)
        if rejected:
            self.set_aside.count(rejected, source)
            return rejected
        ep = record_episode(rec)
        assert ep is not None
        self._seq += 1
        key = (*precedence(rec), self._seq)
        current = self._best.get(ep)
        if current is None or key > current[0]:
            kept = rec if self.keep is None else tuple(rec.get(k, _ABSENT) for k in self.keep)
            self._best[ep] = (key, kept, line)
        elif key[:2] < current[0][:2]:
            self.set_aside.count("stale", source)
        return None

    def extend(self, records: Iterable[dict[str, Any]], source: str = "") -> "RunRecords":
        for rec in records:
            self.add(rec, None, source)
        return self

    def _record(self, kept: Any) -> dict[str, Any]:
        if self.keep is None:
            return kept
        return {k: v for k, v in zip(self.keep, kept) if v is not _ABSENT}

    def get(self, episode: int) -> dict[str, Any] | None:
        """The record that counts for this episode so far, or None."""
        best = self._best.get(episode)
        return None if best is None else self._record(best[1])

    def __len__(self) -> int:
        return len(self._best)

    def winners(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """(episode, the record that counts), in no particular order (`by_episode` sorts)."""
        return ((ep, self._record(best[1])) for ep, best in self._best.items())

    @property
    def by_episode(self) -> dict[int, dict[str, Any]]:
        return {ep: self._record(self._best[ep][1]) for ep in sorted(self._best)}

    @property
    def records(self) -> list[dict[str, Any]]:
        return [self._record(self._best[ep][1]) for ep in sorted(self._best)]

    @property
    def lines(self) -> list[str | None]:
        return [self._best[ep][2] for ep in sorted(self._best)]


# What deciding an episode needs of its record (`is_decided`, a step budget's steps done).
DECISION_FIELDS = ("status", "attempt", "episode_length")


def read_run_records(scope: RunScope, paths: Iterable[str | os.PathLike[str]],
                     keep: Iterable[str] | None = None) -> RunRecords:
    """A Run's counted records from its log files, in the order given; only the `keep` keys of each (None: all)."""
    merged = RunRecords(scope, keep)
    for path in paths:
        merged.extend(iter_record_dicts(path), source=str(path))
    return merged


class RunRecordsTail:
    """A Run's counted records kept up to date from its log files, each read on from where the last read stopped
    (whole lines only): a worker asks before every shard which episodes are decided, and parsing every log whole each
    time made the work per shard grow with the Run (quadratic in its episodes; issue #29). A file that was replaced
    or shrank is read again from its start (what it repeats loses to or ties with what was read: no change).
    `paths()` lists the logs in read order at each refresh, so part files that appear later are read too."""

    def __init__(self, scope: RunScope, paths: Callable[[], Iterable[str | os.PathLike[str]]],
                 keep: Iterable[str] | None = None):
        self.records = RunRecords(scope, keep)
        self._paths = paths
        self._read: dict[str, tuple[int, int]] = {}  # path -> (inode, bytes read: up to a line's end)

    def refresh(self) -> RunRecords:
        for path in self._paths():
            key = os.fspath(path)
            try:
                st = os.stat(key)
            except FileNotFoundError:
                continue
            inode, done = self._read.get(key, (st.st_ino, 0))
            if inode != st.st_ino or st.st_size < done:
                inode, done = st.st_ino, 0
            if st.st_size > done:
                with open(key, "rb") as f:
                    f.seek(done)
                    data = f.read(st.st_size - done)
                end = data.rfind(b"\n") + 1  # a torn last line waits for its end
                self.records.extend(record_dicts(data[:end]), source=key)
                done += end
            self._read[key] = (inode, done)
        return self.records


# --- a Run's logs in an output folder, and the records that count ------------------------------------------

def run_logs(out_dir: Path, run: str) -> list[Path]:
    """Every log of a Run: the merged file first, then the shard parts (later lines win)."""
    return [records_path(out_dir, run), *sorted(parts_dir(out_dir, run).glob(f"*{RECORDS_SUFFIX}"))]


def latest_records(out_dir: Path, run: str, planned: int | None = None,
                   keep: tuple[str, ...] | None = None) -> dict[int, dict[str, Any]]:
    """Episode → the record that counts, from every log of the Run (records of other Runs and of episodes
    outside 0..planned-1 never count; see RunRecords for the rule); `keep`: only those fields of each
    (DECISION_FIELDS before each shard, so a worker's memory does not grow with its Run's records)."""
    return read_run_records(RunScope(run, planned), run_logs(out_dir, run), keep=keep).by_episode


def is_decided(record: dict[str, Any], max_attempts: int) -> bool:
    """Finished for good: a success or failure, or an error that has used up its attempts."""
    return record.get("status") in ("success", "failure") or int(record.get("attempt", 1)) >= max_attempts
