"""The `osmo` backend: `evalfleet submit --backend osmo` renders the workflows and prints them (a dry run) or
writes each spec to a file and runs ``osmo workflow submit FILE -t json`` (plus ``--pool``/``--priority``
from the settings), reading the workflow ID from the JSON answer (its ``name``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalfleet.errors import UserError
from evalfleet.execution.backends import BackendBase
from evalfleet.backends.osmo.names import WHERE
from evalfleet.backends.osmo.workflow import RenderedWorkflow, parallel_order, render_workflows
from evalfleet.backend_registry import backend_settings
from evalfleet.backends.osmo.settings import OsmoSettings

INSTALL_HINT = ("the `osmo` CLI is not on PATH: install it and log in (OSMO user guide → Getting Started → "
                "Install the CLI, then `osmo login <service URL>`), or preview with --dry-run")


@dataclass
class Submitted:
    file: str
    workflow_id: str
    overview: str | None = None


def osmo_executable() -> str:
    exe = shutil.which("osmo")
    if exe is None:
        raise UserError(INSTALL_HINT, where=WHERE)
    return exe


def submit_command(exe: str, path: str, settings: OsmoSettings) -> list[str]:
    argv = [exe, "workflow", "submit", path, "-t", "json"]
    if settings.pool:
        argv += ["--pool", settings.pool]
    if settings.priority != "NORMAL":
        argv += ["--priority", settings.priority]
    return argv


def parse_submit_answer(stdout: str) -> dict[str, Any]:
    """The JSON object `osmo workflow submit -t json` prints (possibly after log lines)."""
    start = stdout.find("{")
    if start < 0:
        raise ValueError("no JSON object in the answer")
    answer, _ = json.JSONDecoder().raw_decode(stdout[start:])
    if not isinstance(answer, dict) or not isinstance(answer.get("name"), str):
        raise ValueError("the JSON answer has no workflow `name`")  # noqa: TRY004 (caller catches ValueError)
    return answer


def write_workflows(workflows: list[RenderedWorkflow], folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for wf in workflows:
        path = folder / f"{wf.name}.yaml"
        path.write_text(wf.to_yaml(), encoding="utf-8")
        paths.append(path)
    return paths


class SubmissionError(Exception):
    def __init__(self, message: str, submitted: list[Submitted]):
        super().__init__(message)
        self.submitted = submitted


def submit_workflows(paths: list[Path], settings: OsmoSettings) -> list[Submitted]:
    exe = osmo_executable()
    done: list[Submitted] = []
    for path in paths:
        argv = submit_command(exe, str(path), settings)
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            detail = (proc.stderr.strip() or proc.stdout.strip() or f"exit code {proc.returncode}").splitlines()[-1]
            raise SubmissionError(f"osmo workflow submit {path} failed: {detail}", done)
        try:
            answer = parse_submit_answer(proc.stdout)
        except ValueError as exc:
            raise SubmissionError(f"osmo workflow submit {path}: cannot read the workflow ID ({exc});"
                                  f" it printed: {proc.stdout.strip()[:200]!r}", done) from None
        done.append(Submitted(str(path), answer["name"], answer.get("overview")))
    return done


class OsmoBackend(BackendBase):
    """Submits only: the workflow runs every shard under the watchdog in OSMO tasks and collects there."""

    name = "osmo"

    def __init__(self, *, settings: Any = None, workers: int | None = None):
        pass  # osmo.* is read from the Experiment submitted

    def check(self) -> None:
        self.open()  # refuses: OSMO runs the workflow, not this machine

    def submit(self, loaded: Any, *, dry_run: bool, output_dir: str | None, stream: Any) -> int:
        """Render the workflows; print them (dry run, also written to `output_dir` when given) or submit each
        with the `osmo` CLI and print the workflow IDs. 1 when a submission failed (what went before is named)."""
        settings = backend_settings("osmo", loaded.backend_settings)
        dry = dry_run or settings.dry_run  # osmo.dry_run=true is Arena's spelling of --dry-run
        # A submission's collect tasks carry its metadata (status submitted); a dry run renders none of it.
        workflows = render_workflows(loaded, settings, record_submission=not dry)
        if dry:
            if output_dir:
                for path in write_workflows(workflows, Path(output_dir)):
                    print(f"# wrote {path}", file=sys.stderr)
            if len(workflows) > 1:
                print(f"# {len(workflows)} workflows (more than osmo.max_tasks={settings.max_tasks} tasks in one)",
                      file=sys.stderr)
            for wf in workflows:
                order = parallel_order(wf.runs, settings.max_parallel_runs)
                if order:
                    print(f"# {wf.name}: {order}", file=sys.stderr)
            stream.write("---\n".join(wf.to_yaml() for wf in workflows))
            return 0
        osmo_executable()  # a missing CLI is an error before anything is written
        folder = Path(output_dir) if output_dir else Path(tempfile.mkdtemp(prefix="evalfleet-osmo-"))
        paths = write_workflows(workflows, folder)
        try:
            submitted = submit_workflows(paths, settings)
        except SubmissionError as exc:
            for s in exc.submitted:
                print(f"submitted {s.workflow_id} ({s.file})", file=stream)
            print(f"error: {exc}", file=sys.stderr)
            if exc.submitted:
                print(f"{len(exc.submitted)} of {len(paths)} workflows were submitted before the failure",
                      file=sys.stderr)
            return 1
        for s in submitted:
            line = f"submitted {s.workflow_id} ({s.file})"
            print(line + (f" {s.overview}" if s.overview else ""), file=stream)
        print("workflow IDs: " + " ".join(s.workflow_id for s in submitted), file=stream)
        return 0
