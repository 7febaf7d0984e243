"""Find and read episode records for the analyses.

Accepted inputs:
- an evalfleet output folder (OUT/<run>/episode_results.jsonl, or OUT/<run>/parts/*.jsonl while a run has
  not been merged yet), searched recursively;
- Arena's downloaded folders (<run>/episode_results*.jsonl, e.g. episode_results_rebuild0.jsonl);
- `.tar` / `.tar.gz` / `.tgz` archives holding either of the above;
- single `.jsonl` files (Arena's `--episode_results FILE.jsonl`).

Records are normalised (run from `run`/`job_name`/the folder name; `status` from `success` when absent),
then merged per Run by evalfleet.rollout.records.RunRecords, the rule the runner and collect use: one record per
planned episode (the plan's size from the Run folder's run_status.json, else from the input folder's
experiment.yaml), records of another Run found in a Run's folder and episodes outside the plan set aside.

Inside an input folder only regular files and folders that lie in it are read (analysis.local_files): a link
leading out of it, a FIFO or a device is skipped with a warning (`RecordSet.skipped`).
"""

from __future__ import annotations

import logging
import math
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Iterable

from evalfleet.analysis.local_files import kind_inside, open_regular
from evalfleet.arena_format import truthy
from evalfleet.errors import UserError
from evalfleet.feedback import is_long, track
from evalfleet.layout import (EXPERIMENT_FILE, PARTS_DIR, RECORDS_FILE, RECORDS_PREFIX,
                              RECORDS_SUFFIX, STATUS_FILE, is_records_name)
from evalfleet.secrets import mask_url
from evalfleet.rollout.records import STATUSES, RunRecords, RunScope, SetAside, record_dicts
from evalfleet.rollout.run_folder import (experiment_document, planned_episodes, read_status, run_files,
                                          status_planned)

log = logging.getLogger("evalfleet.analysis")

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")
LOOKED_FOR = f"{RECORDS_PREFIX}*{RECORDS_SUFFIX}, <run>/{PARTS_DIR}/*.jsonl or .tar/.tar.gz archives of them"


@dataclass
class RecordSet:
    """Deduplicated records (every status) and where they came from."""

    records: list[dict[str, Any]]
    sources: list[str] = field(default_factory=list)
    set_aside: SetAside = field(default_factory=SetAside)  # found but not counted (records.RunRecords)
    skipped: dict[str, str] = field(default_factory=dict)  # path -> why it was not read (a link out, a FIFO)

    @property
    def rated(self) -> list[dict[str, Any]]:
        """Records with a policy outcome: infrastructure errors are excluded from every rate."""
        return [r for r in self.records if r["status"] != "error"]

    @property
    def n_errors(self) -> int:
        return sum(1 for r in self.records if r["status"] == "error")

    @property
    def runs(self) -> list[str]:
        return sorted({r["run"] for r in self.records})


def is_archive(path: Path | PurePosixPath) -> bool:
    return path.name.endswith(ARCHIVE_SUFFIXES)


def select_record_files(paths: Iterable[PurePosixPath]) -> list[PurePosixPath]:
    """From a set of relative file paths, the record files to read: in each folder, what
    `run_folder.RunFiles.analysed` takes (every episode_results*.jsonl, else parts/*.jsonl of a Run not merged yet)."""
    folders: dict[PurePosixPath, tuple[list[str], list[str]]] = {}
    for p in set(paths):
        if p.suffix == RECORDS_SUFFIX and p.parent.name == PARTS_DIR and not is_records_name(p.name):
            folders.setdefault(p.parent.parent, ([], []))[1].append(p.name)
        else:
            folders.setdefault(p.parent, ([], []))[0].append(p.name)
    return sorted(folder / rel for folder, (names, parts) in folders.items()
                  for rel in run_files(names, parts).analysed())


def default_run_name(rel: PurePosixPath, fallback: str) -> str:
    """The Run a record file belongs to when its lines do not say: its folder (the folder above parts/)."""
    return run_folder_of(rel).name or fallback


def run_folder_of(rel: PurePosixPath) -> PurePosixPath:
    """The Run folder a record file lies in: its own folder, or the one above parts/."""
    return rel.parent.parent if rel.parent.name == PARTS_DIR else rel.parent


class _Normaliser:
    """Turns raw record dicts into records with run, episode, status and success set."""

    def __init__(self) -> None:
        self._synthetic: dict[str, dict[tuple, int]] = {}

    def __call__(self, raw: dict[str, Any], *, default_run: str, source: str, line: int) -> dict[str, Any]:
        rec = dict(raw)
        run = rec.get("run") or rec.get("job_name") or default_run
        rec["run"] = str(run)
        if rec.get("episode") is None:
            # Arena lines number episodes per env (env_id, episode_in_env); a vectorised env reuses env ids, and
            # a rebuilt env starts a new file, so the key includes the file.
            if rec.get("env_id") is not None:
                key = (source, rec.get("env_id"), rec.get("episode_in_env"))
            else:
                key = (source, line)
            per_run = self._synthetic.setdefault(rec["run"], {})
            rec["episode"] = per_run.setdefault(key, len(per_run))
        status = rec.get("status")
        if status not in STATUSES:
            success = rec.get("success")
            status = "error" if success is None else ("success" if truthy(success) else "failure")
        rec["status"] = status
        rec["success"] = None if status == "error" else status == "success"
        rec["_source"] = source
        return rec


@dataclass
class _Merger:
    """Every Run's RunRecords, fed file by file."""

    normalise: _Normaliser
    runs: dict[str, RunRecords] = field(default_factory=dict)
    planned: dict[str, int] = field(default_factory=dict)

    def _run(self, name: str) -> RunRecords:
        if name not in self.runs:
            self.runs[name] = RunRecords(RunScope(name, self.planned.get(name)))
        return self.runs[name]

    def read(self, data: bytes, *, default_run: str, source: str, in_run_folder: bool) -> None:
        """A record file's bytes. `in_run_folder`: the file lies in a Run's folder, so a record naming another Run
        is foreign there."""
        for i, raw in enumerate(record_dicts(data)):
            rec = self.normalise(raw, default_run=default_run, source=source, line=i)
            if in_run_folder and rec["run"] != default_run:
                self._run(default_run).set_aside.count("foreign", source)
                continue
            self._run(rec["run"]).add(rec, None, source)

    def result(self) -> tuple[list[dict[str, Any]], SetAside]:
        aside = SetAside()
        records = []
        for name in sorted(self.runs):
            records += self.runs[name].records
            aside.add(self.runs[name].set_aside)
        return records, aside


@dataclass
class _LocalFolder:
    """A local input folder as a `run_folder.FolderReader`: only regular files inside it are read."""

    root: Path

    def read_bytes(self, rel: str) -> bytes:
        with open_regular(str(self.root), str(self.root / rel)) as f:
            return f.read()

    def display(self, rel: str = "") -> str:
        return str(self.root / rel)


def _planned_episodes(root: Path, run_dir: PurePosixPath) -> int | None:
    """The plan the Run folder's run_status.json states (None when it has none or it is unreadable)."""
    try:
        planned = status_planned(read_status(_LocalFolder(root), (run_dir / STATUS_FILE).as_posix()))
    except (OSError, UserError):
        return None
    return planned if planned is not None and planned >= 0 else None


def _read_file(path: Path) -> bytes:
    """A record file's bytes; nothing when it has gone since it was listed."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def _read_archive(path: Path, merger: _Merger, sources: list[str]) -> None:
    try:
        archive = tarfile.open(path, "r:*")
    except (tarfile.TarError, OSError) as exc:
        raise UserError(f"cannot read archive ({exc}); expected a .tar or .tar.gz of record files", where=str(path))
    with archive:
        members = {PurePosixPath(m.name): m for m in archive.getmembers() if m.isfile()}
        for rel in select_record_files(members):
            fileobj = archive.extractfile(members[rel])  # read in memory: member names never become paths
            if fileobj is None:
                continue
            source = f"{path}!{rel}"
            sources.append(source)
            merger.read(fileobj.read(), default_run=default_run_name(rel, path.name), source=source,
                        in_run_folder=rel.parent != PurePosixPath("."))


def _walk(root: Path, skipped: dict[str, str]) -> tuple[list[PurePosixPath], list[Path]]:
    """Record files and archives below `root`: regular files inside it only (links leading out of it, FIFOs,
    devices are recorded in `skipped`). Links to folders are not followed."""
    record_like: list[PurePosixPath] = []
    archives: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            full = Path(dirpath) / name
            if not (is_archive(full) or name.endswith(".jsonl")):
                continue
            kind, why = kind_inside(str(root), str(full))
            if kind != "file":
                if why is not None:
                    skipped[str(full)] = why
                    log.warning("%s: skipped, %s", full, why)
                continue
            if is_archive(full):
                archives.append(full)
            else:
                record_like.append(PurePosixPath(full.relative_to(root).as_posix()))
    return record_like, archives


def load_records(inputs: Iterable[str | os.PathLike[str]]) -> RecordSet:
    """Read every record below the given folders, archives and files; raise UserError when there are none."""
    given = [os.fspath(p) for p in inputs]
    inputs = [Path(p) for p in given]
    if not inputs:
        raise UserError("no input given; pass an output folder or --episode-results FILE.jsonl", where="command line")
    merger = _Merger(_Normaliser())
    sources: list[str] = []
    skipped: dict[str, str] = {}
    for text, path in zip(given, inputs):
        if "://" in text:
            raise UserError("a URL; give a local output folder, .jsonl file or .tar archive (`evalfleet collect "
                            "URL --output DIR` downloads one)", where=mask_url(text))
        if not path.exists():
            raise UserError(
                "no such file or folder; expected an output folder, a .jsonl file or a .tar archive", where=str(path)
            )
        if not path.is_dir() and not path.is_file():
            raise UserError("not a regular file or a folder; expected an output folder, a .jsonl file or a .tar "
                            "archive", where=str(path))
        if path.is_dir():
            merger.planned.update({name: n for name, n in folder_plan(path).items() if n is not None})
            files, archives = _walk(path, skipped)
            chosen = select_record_files(files)
            if is_long(files=len(chosen)):
                log.info("reading %d record files in %s", len(chosen), path)
            for rel in chosen:
                planned = _planned_episodes(path, run_folder_of(rel))
                if planned is not None:  # run_status.json's plan comes before experiment.yaml's
                    merger.planned[default_run_name(rel, path.resolve().name)] = planned
            for rel in track(chosen, "reading record files"):
                full = path / rel
                sources.append(str(full))
                merger.read(_read_file(full), default_run=default_run_name(rel, path.resolve().name), source=str(full),
                            in_run_folder=True)
            for archive in archives:
                _read_archive(archive, merger, sources)
        elif is_archive(path):
            _read_archive(path, merger, sources)
        else:
            sources.append(str(path))
            merger.read(_read_file(path), default_run=path.resolve().parent.name, source=str(path), in_run_folder=False)
    records, set_aside = merger.result()
    if not records:
        where = ", ".join(str(p) for p in inputs)
        raise UserError(f"no episode records found (looked for {LOOKED_FOR})", where=where)
    if is_long(files=len(sources), episodes=len(records)):
        log.info("read %d episodes of %d Runs", len(records), len(merger.runs))
    return RecordSet(records=records, sources=sources, set_aside=set_aside, skipped=skipped)


def record_set_from_runs(runs: Iterable[Any]) -> RecordSet:
    """A RecordSet from Runs already read and merged by collect (objects with .name, .records, .set_aside),
    normalised as `load_records` normalises what it reads: nothing is read again."""
    normalise = _Normaliser()
    records: list[dict[str, Any]] = []
    set_aside = SetAside()
    sources = []
    for run in runs:
        source = f"{run.name}/{RECORDS_FILE}"
        sources.append(source)
        records += [normalise(rec, default_run=run.name, source=source, line=i) for i, rec in enumerate(run.records)]
        set_aside.add(run.set_aside)
    if not records:
        raise UserError("no episode records to analyse", where=", ".join(sources) or "the output folder")
    return RecordSet(records=sorted(records, key=lambda r: (r["run"], r["episode"])), sources=sources,
                     set_aside=set_aside)


# --- the plan an output folder's experiment.yaml holds ------------------------------------------------

def folder_plan(folder: Path) -> dict[str, int | None]:
    """The planned episodes of every Run the folder's experiment.yaml names ({} when it has none, or when it
    is a link, not a regular file, or not an Experiment)."""
    path = folder / EXPERIMENT_FILE
    try:
        if path.is_symlink() or not path.is_file():
            return {}
        return planned_episodes(*experiment_document(path.read_bytes(), str(path)))
    except (OSError, UserError):
        return {}


def progress_score(progress: Any) -> float | None:
    """A record's progress as a number in 0..1: evalfleet's number, or Arena's `overall_score`."""
    if isinstance(progress, dict):
        progress = progress.get("overall_score")
    if isinstance(progress, (int, float)) and not isinstance(progress, bool) and math.isfinite(progress):
        return float(progress)
    return None
