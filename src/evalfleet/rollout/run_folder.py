"""A Run folder, read one way wherever it lies (an `outputs.storage.Location`, a local folder, an archive's
members): which of its files hold records and in what order, their lines, its run_status.json (merged across
the copies one Run leaves in several sources), Arena's record files as evalfleet records, and the plan an
output folder's Experiment document gives. Names come from `layout`, Arena's format from `arena_format`;
which records count is `records.RunRecords`' decision, fed by the callers (`outputs.collect`,
`analysis.loading`, the runner's own reads through `records.iter_record_dicts`).

The rules are the same for collect and the analyses: evalfleet's files (the merged episode_results.jsonl, then
parts/*.jsonl) and, beside no merged file, Arena's files (named as Arena names them) in Arena's order, numbered by
Arena's `global_episode_index` plus the episodes of the files before (`folder_records`); a run_status.json whose
`planned_episodes` is not a whole number in 0..MAX_PLANNED (or null) is refused, naming it (`read_status`).
JSON is read with `bounded_json`'s bounds: these files come from wherever the folder came from.

A reader is anything with `read_bytes(rel)` and `display(rel)` (`FolderReader`): `Location` is one.
"""

from __future__ import annotations

import json
import json.scanner
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Protocol

from evalfleet import bounded_json
from evalfleet.arena_format import arena_file_order, arena_record
from evalfleet.errors import UserError
from evalfleet.layout import PARTS_DIR, RECORDS_FILE, RECORDS_SUFFIX, STATUS_FILE

# A Run's planned episodes as a run_status.json may state them: a thousand times the Experiment schema's cap per
# Run, so any plan a runner could have run; beyond it the file is not a Run's status (and nothing loops over it).
MAX_PLANNED = 10**9


class FolderReader(Protocol):
    """Where a Run folder's files are read from; `rel` is a "/"-separated path below the reader's root."""

    def read_bytes(self, rel: str) -> bytes: ...

    def display(self, rel: str = "") -> str: ...


def join(*parts: str) -> str:
    """A reader's relative path from its parts ("" parts dropped)."""
    return "/".join(p.strip("/") for p in parts if p)


# --- which files hold records ----------------------------------------------------------------------------

@dataclass
class RunFiles:
    """The record files of one Run folder, by their names in it (`parts/<name>` for a shard's)."""

    merged: bool = False  # the collected episode_results.jsonl
    parts: list[str] = field(default_factory=list)  # parts/*.jsonl, by name
    arena: list[str] = field(default_factory=list)  # Arena's episode_results_{rebuild,rank}<N>.jsonl, in Arena's order
    status: bool = False  # run_status.json is there

    @property
    def is_run(self) -> bool:
        """Does the folder hold a Run?"""
        return self.merged or bool(self.parts) or self.status or bool(self.arena)

    def collected(self) -> list[str]:
        """evalfleet's record files, in the order they are read: the merged file first, then the shards' (the
        higher attempt or newer record wins either way, so a shard resumed after a collect counts)."""
        return ([RECORDS_FILE] if self.merged else []) + [join(PARTS_DIR, n) for n in self.parts]

    def arena_files(self) -> list[str]:
        """Arena's record files, in Arena's order; none beside a collected file (it already holds what they held)."""
        return [] if self.merged else list(self.arena)


def run_files(names: Iterable[str], part_names: Iterable[str] = (), *, status: bool | None = None) -> RunFiles:
    """A Run folder's record files from the names of the files in it and in its parts/ folder; `status`: is
    there a run_status.json (None: is it among `names`)."""
    names = sorted(names)
    files = RunFiles(status=STATUS_FILE in names if status is None else status,
                     parts=sorted(n for n in part_names if n.endswith(RECORDS_SUFFIX)))
    for name in names:
        if name == RECORDS_FILE:
            files.merged = True
        elif arena_file_order(name):
            files.arena.append(name)
    files.arena.sort(key=arena_file_order)
    return files


# --- record lines ----------------------------------------------------------------------------------------

def parse_record_lines(data: bytes) -> list[tuple[dict[str, Any], str]]:
    """(record, line) for every complete JSON object line; a torn last line, garbled lines and lines nesting deeper
    than `bounded_json.MAX_DEPTH` are dropped. Which of them count for a Run is `RunRecords`' decision."""
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    lines.pop()  # the text after the last "\n": empty, or a torn line
    out = []
    scan = _SCAN_JSON  # json.loads without its per-call checks (a large collect parses millions of lines)
    for line in lines:
        line = line.strip()
        if not line or bounded_json.too_deep(line):
            continue
        try:
            rec, end = scan(line, 0)
        except (ValueError, StopIteration):  # StopIteration: the scanner found no JSON value at the start
            continue
        if end == len(line) and type(rec) is dict:  # a whole line, one object (text after it: garbled)
            out.append((rec, line))
    return out


_SCAN_JSON = json.scanner.make_scanner(json.JSONDecoder())  # json.loads' own scanner (C where available)


def folder_records(reader: FolderReader, record_files: list[str], arena_files: list[str], *, run: str,
                   status: dict[str, Any] | None, videos: dict[tuple[int, int, int], dict[str, str]] | None = None,
                   after_file: Callable[[], Any] | None = None) -> Iterator[tuple[dict[str, Any], str, str]]:
    """(record, its line, where) of one Run folder, in the one read order collect and the analyses feed to
    `RunRecords`: evalfleet's record files as given (`RunFiles.collected`), then Arena's (`arena_records`).
    `after_file()` is called after each of evalfleet's files (progress)."""
    for rel in record_files:
        where = reader.display(rel)
        for rec, line in parse_record_lines(reader.read_bytes(rel)):
            yield rec, line, where
        if after_file is not None:
            after_file()
    if arena_files:
        yield from arena_records(reader, arena_files, run=run, status=status or {}, videos=videos or {})


def arena_records(reader: FolderReader, files: list[str], *, run: str, status: dict[str, Any],
                  videos: dict[tuple[int, int, int], dict[str, str]]) -> Iterator[tuple[dict[str, Any], str, str]]:
    """(record, its line, where) for Arena's record files, read in the order given. Episodes are numbered across
    the files (rebuild 0's episodes first), each file's by Arena's `global_episode_index` (its line number when
    a line has none); `videos` are matched by rebuild, env and episode-in-env; `status` (run_status.json) names
    the task and policy."""
    offset = 0
    for rel in files:
        where = reader.display(rel)
        last = -1
        for i, (raw, _line) in enumerate(parse_record_lines(reader.read_bytes(rel))):
            index = raw.get("global_episode_index")
            index = index if isinstance(index, int) and not isinstance(index, bool) and index >= 0 else i
            rec = arena_record(raw, run=str(raw.get("job_name") or run), episode=offset + index, videos=videos,
                               task=status.get("task"), policy=status.get("policy"))
            yield rec, json.dumps(rec, separators=(",", ":")), where
            last = max(last, index)
        offset += last + 1


# --- run_status.json -------------------------------------------------------------------------------------

def read_status(reader: FolderReader, rel: str) -> dict[str, Any]:
    """A run_status.json; UserError naming it when it is not a JSON object (`bounded_json`'s bounds) or its
    planned_episodes is not a whole number in 0..MAX_PLANNED (or null)."""
    try:
        status = bounded_json.loads(reader.read_bytes(rel))
    except ValueError as exc:
        raise UserError(f"not valid JSON ({exc}); correct it or delete the file to hold the Run to experiment.yaml's "
                        "plan", where=reader.display(rel)) from None
    if not isinstance(status, dict):
        raise UserError("expected a JSON object", where=reader.display(rel))
    planned = status.get("planned_episodes")
    if planned is not None and (not isinstance(planned, int) or isinstance(planned, bool)
                                or not 0 <= planned <= MAX_PLANNED):
        raise UserError(f"must be a whole number in 0..{MAX_PLANNED:,} or null, not {str(planned)[:60]!r}; correct "
                        "it (the Run's planned episode count) or delete the file to hold the Run to experiment.yaml's "
                        "plan",
                        where=reader.display(rel), key="planned_episodes")
    return status


def merge_statuses(statuses: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One Run's status from the run_status.json of each folder it left (one per worker task): the largest
    plan; failed if any failed, else running if any runs, completed if all completed; every reason once."""
    if not statuses:
        return None
    if len(statuses) == 1:
        return statuses[0]
    merged = dict(statuses[0])
    planned = [s.get("planned_episodes") for s in statuses if isinstance(s.get("planned_episodes"), int)]
    merged["planned_episodes"] = max(planned) if planned else None
    states = [s.get("state") for s in statuses]
    merged["state"] = ("failed" if "failed" in states else "running" if "running" in states else
                       "completed" if states and all(s == "completed" for s in states) else statuses[-1].get("state"))
    reasons = [s.get("reason") for s in statuses if s.get("reason")]
    merged["reason"] = "; ".join(dict.fromkeys(reasons)) if reasons else None
    return merged


def status_planned(status: dict[str, Any] | None) -> int | None:
    """The planned episodes a run_status.json states (`read_status` checked it), else None."""
    planned = (status or {}).get("planned_episodes")
    return planned if isinstance(planned, int) and not isinstance(planned, bool) else None


# --- the plan an output folder's experiment.yaml holds ---------------------------------------------------

def experiment_document(data: bytes, where: str) -> dict[str, Any]:
    """An output folder's experiment.yaml → its Runs by name in the file's order, each with `shared` merged in by
    the loader's rule (experiment/merge.py; a resolved file has no `shared`, one written by hand may).
    Raises UserError when the bytes are not an Experiment: bounded YAML holding a `runs:` map (or list) of
    Runs with valid Run names (names become folder names, so `../x` is refused here)."""
    from evalfleet.experiment.merge import runs_with_shared
    from evalfleet.experiment.safe_yaml import MAX_FILE_BYTES, parse_yaml
    from evalfleet.experiment.schema import RUN_NAME

    if len(data) > MAX_FILE_BYTES:
        raise UserError(f"larger than {MAX_FILE_BYTES} bytes; not an Experiment", where=where)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError("not UTF-8 text; not an Experiment", where=where) from None
    doc = parse_yaml(text, where)
    runs = doc.get("runs") if isinstance(doc, dict) else None
    if isinstance(runs, list):
        runs = {r.get("name"): r for r in runs if isinstance(r, dict)}
    if not isinstance(runs, dict) or not runs:
        raise UserError("not an Experiment: no `runs:` map", where=where)
    bad = [name for name in runs if not isinstance(name, str) or not RUN_NAME.fullmatch(name)]
    if bad:
        raise UserError(f"not an Experiment: bad Run name {str(bad[0])[:120]!r}", where=where)
    shared = doc.get("shared")
    return runs_with_shared({name: run if isinstance(run, dict) else {} for name, run in runs.items()},
                            shared if isinstance(shared, dict) else {})


def planned_episodes(runs: dict[str, Any]) -> dict[str, int | None]:
    """Each Run's planned episode count from an Experiment document (None for a num_steps Run or when the file
    does not say): the plan `records.RunRecords` holds records to when a Run folder has no run_status.json."""
    out: dict[str, int | None] = {}
    for name, run in runs.items():
        limit = run.get("rollout_limit") or {}
        planned = limit.get("num_episodes") if isinstance(limit, dict) else None
        out[name] = planned if isinstance(planned, int) and not isinstance(planned, bool) and planned > 0 else None
    return out
