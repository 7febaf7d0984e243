"""The output folder's life: create it for a new run, or check it belongs to the run being resumed."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import yaml

from evalfleet.errors import UserError
from evalfleet.experiment.loading import LoadedExperiment

from evalfleet.outputs.collect import EXPERIMENT_FILE, STATUS_FILE

INTERNAL_DIR = ".evalfleet"  # worker logs and heartbeats


def default_output(loaded: LoadedExperiment) -> Path:
    """outputs/<name>-<time>, with -2, -3, ... when a run in the same second took that name."""
    base = Path("outputs") / f"{loaded.experiment.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def prepare_output(out: Path, loaded: LoadedExperiment, *, resume: bool) -> None:
    """New run: the folder must not hold another run. Resume: it must hold this same Experiment."""
    existing = out / EXPERIMENT_FILE
    if resume:
        if not existing.exists():
            raise UserError(f"nothing to resume: no {EXPERIMENT_FILE} here; run without --resume to start", where=str(out))
        before = yaml.safe_load(existing.read_text())
        if before != loaded.resolved_document():
            raise UserError(
                f"{EXPERIMENT_FILE} here differs from the Experiment given (file or overrides changed); "
                "resume with the same file and overrides, or choose a new --output",
                where=str(out),
            )
        return
    if out.exists() and any(out.iterdir()):
        raise UserError("output folder is not empty; pass --resume to continue it, or choose another --output", where=str(out))
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(existing, loaded.resolved_yaml())


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_run_status(out: Path, run: str, **fields: Any) -> None:
    path = out / run / STATUS_FILE
    try:
        current = json.loads(path.read_text())
    except (OSError, ValueError):
        current = {"run": run}
    current.update(fields)
    write_atomic(path, json.dumps(current, indent=1) + "\n")


def mark_runs_running(out: Path, plan: Any) -> None:
    """Each Run's run_status.json says what a backend starts: its tags, planned episodes, state running."""
    for name, rp in plan.runs.items():
        write_run_status(out, name, task=rp.task, policy=rp.policy, planned_episodes=rp.num_episodes,
                         state="running", reason=None)
