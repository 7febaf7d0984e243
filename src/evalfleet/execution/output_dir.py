"""The output folder's life: create it for a new run, or check it belongs to the run being resumed; either way
its lock taken (outputs/output_lock.py)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any


from evalfleet import bounded_json
from evalfleet.errors import UserError
from evalfleet.experiment.loading import LoadedExperiment
from evalfleet.experiment.safe_yaml import parse_yaml, read_text_bounded
from evalfleet.layout import EXPERIMENT_FILE, INTERNAL_DIR, LOCK_FILE, internal_dir, run_status_path
from evalfleet.outputs.output_lock import OutputLock, lock_output
from evalfleet.secrets import mask_url


def output_folder(output: str | os.PathLike[str], *, where: str = "command line", key: str = "--output") -> Path:
    """The local folder `output` names. A URL (s3://...) is refused before anything is written, shown masked:
    `evalfleet run` writes a local folder (never one named after a URL); `evalfleet collect` uploads it."""
    text = os.fspath(output)
    if isinstance(text, str) and "://" in text:
        raise UserError(f"expected a local folder, got the URL {mask_url(text)!r}; run into a local folder, then "
                        "upload it with `evalfleet collect DIR --output URL`", where=where, key=key)
    return Path(text)


def default_output(loaded: LoadedExperiment) -> Path:
    """outputs/<name>-<time>, with -2, -3, ... when a run in the same second took that name."""
    base = Path("outputs") / f"{loaded.experiment.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def prepare_output(out: Path, loaded: LoadedExperiment, *, resume: bool, flag: str = "--output") -> OutputLock:
    """New run: the folder must not hold another run. Resume: it must hold this same Experiment. Either way the
    folder's lock is taken for this process (outputs/output_lock.py) and returned: the caller holds it while it
    writes the folder. Every refusal (a file where the folder should be, a folder another run is writing, no
    permission, an unreadable experiment.yaml) is a UserError naming the path, raised before anything is written."""
    try:
        return _prepare(out, loaded, resume=resume, flag=flag)
    except OSError as exc:  # a path the OS refuses outright (name too long, a loop of links, ...)
        raise UserError(f"unusable output folder ({exc.strerror or exc})", where=str(out)) from None


def _prepare(out: Path, loaded: LoadedExperiment, *, resume: bool, flag: str) -> OutputLock:
    where = str(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"is a file, not a folder; give {flag} a folder path", where=where)
    # A folder another run is writing is refused first, whatever else it holds; without a lock file nothing is made.
    lock = lock_output(out, flag=flag, create=False) if out.is_dir() else None
    try:
        if resume:
            _check_resumable(out, loaded, where)
            return lock or _locked(out, flag)
        _check_empty(out, where)
        _check_writable(out, where)
        created = _first_missing(out)
        try:
            out.mkdir(parents=True, exist_ok=True)
            lock = lock or _locked(out, flag)
            _check_empty(out, where)  # a run that came and went between the first look and the lock
            write_atomic(out / EXPERIMENT_FILE, loaded.resolved_yaml())
        except OSError as exc:
            if created is not None:  # leave nothing behind of a folder this call created
                shutil.rmtree(created, ignore_errors=True)
            raise UserError(f"cannot write the output folder ({exc.strerror or exc})", where=where) from None
        return lock
    except BaseException:
        if lock is not None:
            lock.release()
        raise


def _locked(out: Path, flag: str) -> OutputLock:
    lock = lock_output(out, flag=flag)
    assert lock is not None  # created: never None
    return lock


def _check_resumable(out: Path, loaded: LoadedExperiment, where: str) -> None:
    existing = out / EXPERIMENT_FILE
    if not existing.exists():
        raise UserError(f"nothing to resume: no {EXPERIMENT_FILE} here; run without --resume to start", where=where)
    try:
        before = parse_yaml(read_text_bounded(existing), str(existing))
    except UserError as exc:
        raise UserError(f"cannot resume: {exc.message}; resume a folder written by `evalfleet run`, or choose a "
                        "new --output", where=exc.where, key=exc.key) from None
    if before != loaded.resolved_document():
        raise UserError(
            f"{EXPERIMENT_FILE} here differs from the Experiment given (file or overrides changed); "
            "resume with the same file and overrides, or choose a new --output",
            where=where,
        )
    _check_writable(out, where)
    from evalfleet.rollout.failures import check_resume_protocols

    check_resume_protocols(out, loaded.experiment.runs)  # a changed task protocol is never mixed in


def _check_empty(out: Path, where: str) -> None:
    """A new run's folder holds nothing, or nothing but the lock file a refused or failed start left."""
    try:
        entries = sorted(p.name for p in out.iterdir()) if out.exists() else []
        if entries == [INTERNAL_DIR]:
            entries = [f"{INTERNAL_DIR}/{p.name}" for p in internal_dir(out).iterdir() if p.name != LOCK_FILE]
    except OSError as exc:
        raise UserError(f"cannot list the output folder ({exc.strerror or exc})", where=where) from None
    if entries:
        raise UserError(
            "output folder is not empty; pass --resume to continue it, or choose another --output", where=where
        )


def _first_missing(out: Path) -> Path | None:
    """The outermost folder of `out` that does not exist yet (what mkdir(parents=True) will create)."""
    missing = None
    for p in (out, *out.parents):
        if p.exists():
            break
        missing = p
    return missing


def _check_writable(out: Path, where: str) -> None:
    """The folder, or the nearest folder above it that exists, is a folder we may write in."""
    target = out.absolute()
    while not target.exists() and target != target.parent:
        target = target.parent
    if not target.is_dir():
        raise UserError(f"cannot create the output folder: {target} is a file, not a folder", where=where)
    if not os.access(target, os.W_OK | os.X_OK):
        raise UserError(f"cannot create the output folder: no permission to write in {target}", where=where)


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:  # a full disk, a signal: no half-written temporary left beside the file
        tmp.unlink(missing_ok=True)
        raise


def write_run_status(out: Path, run: str, **fields: Any) -> None:
    path = run_status_path(out, run)
    try:
        current = bounded_json.loads(path.read_text())
    except (OSError, ValueError):
        current = {"run": run}
    current.update(fields)
    write_atomic(path, json.dumps(current, indent=1) + "\n")


def mark_runs_running(out: Path, plan: Any) -> None:
    """Each Run's run_status.json says what a backend starts: its tags, planned episodes, state running."""
    for name, rp in plan.runs.items():
        write_run_status(out, name, task=rp.task, policy=rp.policy, planned_episodes=rp.num_episodes,
                         state="running", reason=None, failed_because=None)
