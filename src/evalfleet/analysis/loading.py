"""Find and read episode records for the analyses.

Accepted inputs:
- an evalfleet output folder (OUT/<run>/episode_results.jsonl, or OUT/<run>/parts/*.jsonl while a run has
  not been merged yet), searched recursively;
- Arena's downloaded folders (<run>/episode_results*.jsonl, e.g. episode_results_rebuild0.jsonl);
- `.tar` / `.tar.gz` / `.tgz` archives holding either of the above;
- single `.jsonl` files (Arena's `--episode_results FILE.jsonl`).

Records are normalised (run from `run`/`job_name`/the folder name; `status` from `success` when absent),
then deduplicated with evalfleet.rollout.records (the last complete record of an episode wins).
"""

from __future__ import annotations

import os
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Iterable

from evalfleet.errors import UserError
from evalfleet.rollout.records import STATUSES, iter_record_dicts, latest_by_episode

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")
LOOKED_FOR = "episode_results*.jsonl, <run>/parts/*.jsonl or .tar/.tar.gz archives of them"


@dataclass
class RecordSet:
    """Deduplicated records (every status) and where they came from."""

    records: list[dict[str, Any]]
    sources: list[str] = field(default_factory=list)

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


def _is_merged_name(name: str) -> bool:
    return name.startswith("episode_results") and name.endswith(".jsonl")


def select_record_files(paths: Iterable[PurePosixPath]) -> list[PurePosixPath]:
    """From a set of relative file paths, the record files to read: every episode_results*.jsonl, plus
    parts/*.jsonl of a run folder that has no merged file (yet)."""
    paths = sorted(set(paths))
    merged_dirs = {p.parent for p in paths if _is_merged_name(p.name)}
    chosen = []
    for p in paths:
        if _is_merged_name(p.name):
            chosen.append(p)
        elif p.suffix == ".jsonl" and p.parent.name == "parts" and p.parent.parent not in merged_dirs:
            chosen.append(p)
    return chosen


def default_run_name(rel: PurePosixPath, fallback: str) -> str:
    """The Run a record file belongs to when its lines do not say: its folder (the folder above parts/)."""
    parent = rel.parent
    if parent.name == "parts":
        parent = parent.parent
    return parent.name or fallback


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
        rec["episode"] = int(rec["episode"])
        status = rec.get("status")
        if status not in STATUSES:
            success = rec.get("success")
            status = "error" if success is None else ("success" if _truthy(success) else "failure")
        rec["status"] = status
        rec["success"] = None if status == "error" else status == "success"
        rec["_source"] = source
        return rec


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "success")
    return bool(value)


def _read_file(path: Path, *, default_run: str, source: str, normalise: _Normaliser) -> Iterable[dict[str, Any]]:
    for i, raw in enumerate(iter_record_dicts(path)):
        yield normalise(raw, default_run=default_run, source=source, line=i)


def _read_archive(path: Path, normalise: _Normaliser, sources: list[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    try:
        archive = tarfile.open(path, "r:*")
    except (tarfile.TarError, OSError) as exc:
        raise UserError(f"cannot read archive ({exc}); expected a .tar or .tar.gz of record files", where=str(path))
    with archive, tempfile.TemporaryDirectory(prefix="evalfleet-records-") as tmp:
        members = {PurePosixPath(m.name): m for m in archive.getmembers() if m.isfile()}
        for i, rel in enumerate(select_record_files(members)):
            fileobj = archive.extractfile(members[rel])
            if fileobj is None:
                continue
            local = Path(tmp) / f"{i}.jsonl"  # never use member names as paths
            local.write_bytes(fileobj.read())
            source = f"{path}!{rel}"
            sources.append(source)
            out.extend(
                _read_file(local, default_run=default_run_name(rel, path.name), source=source, normalise=normalise)
            )
    return out


def _walk(root: Path) -> tuple[list[PurePosixPath], list[Path]]:
    record_like: list[PurePosixPath] = []
    archives: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            full = Path(dirpath) / name
            if is_archive(full):
                archives.append(full)
            elif name.endswith(".jsonl"):
                record_like.append(PurePosixPath(full.relative_to(root).as_posix()))
    return record_like, archives


def load_records(inputs: Iterable[str | os.PathLike[str]]) -> RecordSet:
    """Read every record below the given folders, archives and files; raise UserError when there are none."""
    inputs = [Path(p) for p in inputs]
    if not inputs:
        raise UserError("no input given; pass an output folder or --episode-results FILE.jsonl", where="command line")
    normalise = _Normaliser()
    raw: list[dict[str, Any]] = []
    sources: list[str] = []
    for path in inputs:
        if not path.exists():
            raise UserError("no such file or folder; expected an output folder, a .jsonl file or a .tar archive", where=str(path))
        if path.is_dir():
            files, archives = _walk(path)
            for rel in select_record_files(files):
                full = path / rel
                sources.append(str(full))
                raw.extend(
                    _read_file(full, default_run=default_run_name(rel, path.resolve().name), source=str(full), normalise=normalise)
                )
            for archive in archives:
                raw.extend(_read_archive(archive, normalise, sources))
        elif is_archive(path):
            raw.extend(_read_archive(path, normalise, sources))
        else:
            sources.append(str(path))
            raw.extend(_read_file(path, default_run=path.resolve().parent.name, source=str(path), normalise=normalise))
    latest = latest_by_episode(raw)
    records = [latest[k] for k in sorted(latest)]
    if not records:
        where = ", ".join(str(p) for p in inputs)
        raise UserError(f"no episode records found (looked for {LOOKED_FOR})", where=where)
    return RecordSet(records=records, sources=sources)
