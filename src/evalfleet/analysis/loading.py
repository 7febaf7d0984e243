"""Find and read episode records for the analyses.

Accepted inputs:
- an evalfleet output folder (OUT/<run>/episode_results.jsonl, or OUT/<run>/parts/*.jsonl while a run has
  not been merged yet), searched recursively;
- Arena's downloaded folders (<run>/episode_results*.jsonl, e.g. episode_results_rebuild0.jsonl);
- `.tar` / `.tar.gz` / `.tgz` archives holding either of the above;
- single `.jsonl` files (Arena's `--episode_results FILE.jsonl`).

A Run folder is read as `evalfleet collect` reads it (`rollout.run_folder.folder_records`: the merged file and
parts/, or Arena's files in Arena's order numbered by Arena's global episode index; a malformed run_status.json is
refused), so collect and the analyses see the same episodes under the same numbers. Records are normalised (run
from `run`/`job_name`/the folder name; `status` from `success` when absent), then merged per Run by
evalfleet.rollout.records.RunRecords, the rule the runner and collect use: one record per planned episode (the
plan's size from the Run folder's run_status.json, else from the input folder's experiment.yaml), records of
another Run found in a Run's folder and episodes outside the plan set aside.

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
from evalfleet.layout import EXPERIMENT_FILE, PARTS_DIR, RECORDS_PREFIX, RECORDS_SUFFIX, STATUS_FILE
from evalfleet.secrets import mask_url
from evalfleet.rollout.records import STATUSES, RunRecords, RunScope, SetAside
from evalfleet.rollout.run_folder import (FolderReader, RunFiles, experiment_document, folder_records,
                                          parse_record_lines, planned_episodes, read_status, run_files,
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


def run_folders(paths: Iterable[PurePosixPath]) -> dict[PurePosixPath, RunFiles]:
    """From a set of relative file paths, each Run folder's files (`run_folder.run_files`, the rule collect uses)."""
    folders: dict[PurePosixPath, tuple[list[str], list[str]]] = {}
    for p in set(paths):
        if p.suffix == RECORDS_SUFFIX and p.parent.name == PARTS_DIR:
            folders.setdefault(p.parent.parent, ([], []))[1].append(p.name)
        else:
            folders.setdefault(p.parent, ([], []))[0].append(p.name)
    found = {folder: run_files(names, parts) for folder, (names, parts) in sorted(folders.items())}
    return {folder: files for folder, files in found.items() if files.collected() or files.arena_files()}


def normalised_outcome(rec: dict[str, Any]) -> str:
    """A record's status as the analyses read it: its `status`, else from `success` (none: an error)."""
    status = rec.get("status")
    if status in STATUSES:
        return status
    success = rec.get("success")
    return "error" if success is None else ("success" if truthy(success) else "failure")


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
        status = normalised_outcome(rec)
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

    def add(self, rec: dict[str, Any], *, default_run: str, source: str, line: int, in_run_folder: bool) -> None:
        """One raw record. `in_run_folder`: it lies in a Run's folder, so a record naming another Run is foreign
        there."""
        rec = self.normalise(rec, default_run=default_run, source=source, line=line)
        if in_run_folder and rec["run"] != default_run:
            self._run(default_run).set_aside.count("foreign", source)
            return
        self._run(rec["run"]).add(rec, None, source)

    def read(self, data: bytes, *, default_run: str, source: str, in_run_folder: bool) -> None:
        """A record file's bytes (a file given alone)."""
        for i, (raw, _line) in enumerate(parse_record_lines(data)):
            self.add(raw, default_run=default_run, source=source, line=i, in_run_folder=in_run_folder)

    def read_folders(self, reader: FolderReader, folders: dict[PurePosixPath, RunFiles], *, fallback: str,
                     in_run_folder: bool = True, sources: list[str]) -> None:
        """Run folders below a reader's root, as collect reads them (`run_folder.folder_records`); their
        run_status.json's plans first, so every Run is held to its plan from its first record."""
        statuses = {folder: _status(reader, folder) for folder, files in folders.items() if files.status}
        for folder, status in statuses.items():
            if status_planned(status) is not None:  # run_status.json's plan comes before experiment.yaml's
                self.planned[folder.name or fallback] = status_planned(status)
        ticks = track(range(n := sum(len(f.collected()) for f in folders.values())), "reading record files", total=n)
        for folder, files in folders.items():
            run = folder.name or fallback
            sources += [reader.display((folder / rel).as_posix()) for rel in files.collected() + files.arena_files()]
            lines: dict[str, int] = {}
            for raw, _line, where in folder_records(
                    reader, [(folder / rel).as_posix() for rel in files.collected()],
                    [(folder / rel).as_posix() for rel in files.arena_files()], run=run, status=statuses.get(folder),
                    after_file=lambda: next(ticks, None)):
                lines[where] = lines.get(where, -1) + 1
                self.add(raw, default_run=run, source=where, line=lines[where],
                         in_run_folder=in_run_folder or folder != PurePosixPath("."))
        for _ in ticks:  # finish the bar
            pass

    def result(self) -> tuple[list[dict[str, Any]], SetAside]:
        aside = SetAside()
        records = []
        for name in sorted(self.runs):
            records += self.runs[name].records
            aside.add(self.runs[name].set_aside)
        return records, aside


@dataclass
class _LocalFolder:
    """A local input folder as a `run_folder.FolderReader`: only regular files inside it are read; a record file
    gone since it was listed reads as empty."""

    root: Path

    def read_bytes(self, rel: str) -> bytes:
        try:
            with open_regular(str(self.root), str(self.root / rel)) as f:
                return f.read()
        except FileNotFoundError:
            return b""

    def display(self, rel: str = "") -> str:
        return str(self.root / rel)


@dataclass
class _Archive:
    """A tar archive's regular members as a `run_folder.FolderReader`, read in memory: names never become paths."""

    path: Path
    archive: tarfile.TarFile
    members: dict[PurePosixPath, tarfile.TarInfo]

    def read_bytes(self, rel: str) -> bytes:
        fileobj = self.archive.extractfile(self.members[PurePosixPath(rel)])
        return fileobj.read() if fileobj is not None else b""

    def display(self, rel: str = "") -> str:
        return f"{self.path}!{rel}"


def _status(reader: FolderReader, folder: PurePosixPath) -> dict[str, Any] | None:
    """A Run folder's run_status.json (`run_folder.read_status`: a malformed one is refused, naming it); None when
    it cannot be read (gone, or a link out of the folder)."""
    try:
        return read_status(reader, (folder / STATUS_FILE).as_posix())
    except OSError:
        return None


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
        merger.read_folders(_Archive(path, archive, members), run_folders(members), fallback=path.name,
                            in_run_folder=False, sources=sources)


def _walk(root: Path, skipped: dict[str, str]) -> tuple[list[PurePosixPath], list[Path]]:
    """Record files, run_status.json files and archives below `root`: regular files inside it only (links leading
    out of it, FIFOs, devices are recorded in `skipped`). Links to folders are not followed."""
    record_like: list[PurePosixPath] = []
    archives: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            full = Path(dirpath) / name
            if not (is_archive(full) or name.endswith(".jsonl") or name == STATUS_FILE):
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
            folders = run_folders(files)
            count = sum(len(f.collected()) + len(f.arena_files()) for f in folders.values())
            if is_long(files=count):
                log.info("reading %d record files in %s", count, path)
            merger.read_folders(_LocalFolder(path), folders, fallback=path.resolve().name, sources=sources)
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


# --- the plan an output folder's experiment.yaml holds ------------------------------------------------

def folder_plan(folder: Path) -> dict[str, int | None]:
    """The planned episodes of every Run the folder's experiment.yaml names ({} when it has none, or when it
    is a link, not a regular file, or not an Experiment)."""
    path = folder / EXPERIMENT_FILE
    try:
        if path.is_symlink() or not path.is_file():
            return {}
        return planned_episodes(experiment_document(path.read_bytes(), str(path)))
    except (OSError, UserError):
        return {}


def progress_score(progress: Any) -> float | None:
    """A record's progress as a number in 0..1: evalfleet's number, or Arena's `overall_score`."""
    if isinstance(progress, dict):
        progress = progress.get("overall_score")
    if isinstance(progress, (int, float)) and not isinstance(progress, bool) and math.isfinite(progress):
        return float(progress)
    return None
