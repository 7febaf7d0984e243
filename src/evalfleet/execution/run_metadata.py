"""OUT/experiment_metadata.json and OUT/experiment_manifest.json: what a run of evalfleet was, written as it goes.

The metadata's `status` goes starting → running → finished | interrupted | failed, each change written atomically;
a run killed outright (SIGKILL) leaves `running`, and the next `--resume` of the folder records that attempt as
`interrupted` in `previous` before starting its own. `git` is the checkout evalfleet itself runs from (its
commit and whether it has uncommitted changes; null outside git, never a failure), `experiment_git` the
Experiment file's, when that lies in another checkout. `config_sha256` hashes OUT/experiment.yaml (the resolved
Experiment, secrets as variable names); the command line is written with secrets masked. The manifest lists each
Run's task and policy labels and their source: `configured` (the Run names it), `derived` (from its environment's
task option or its policy type), `inferred` (from the environment type's name). Work handed to a cluster
(`evalfleet submit`) starts at `submitted` and its collect step ends it (execution/cluster_metadata.py). A run
keeps OUT/.evalfleet/space.reserve while it runs: a full disk frees it, so the metadata can still say `failed`.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import socket
import subprocess
import re
import sys
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from evalfleet import bounded_json
from evalfleet import __version__
from evalfleet.errors import out_of_space
from evalfleet.execution.output_dir import write_atomic
from evalfleet.experiment.loading import LoadedExperiment
from evalfleet.experiment.plan import run_plan
from evalfleet.layout import (EXPERIMENT_FILE, MANIFEST_FILE, METADATA_FILE, RESULT_FILE, SPACE_RESERVE_FILE,
                              internal_dir)
from evalfleet.outputs.summary import package_versions
from evalfleet.process_exit import Terminated, sigterm_interrupts
from evalfleet.secrets import looks_secret, mask_text, mask_url

SCHEMA = "evalfleet.experiment_metadata/1"
MANIFEST_SCHEMA = "evalfleet.experiment_manifest/1"
UNFINISHED = ("starting", "running")
EXPERIMENT_ID = re.compile(r"[0-9a-f]{32}")  # uuid4().hex: what a resume keeps
RESERVE_BYTES = 64 << 10  # with twice the document's size: room for the last status on a full disk


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def git_state(folder: Path) -> dict[str, Any] | None:
    """{commit, dirty, root} of the git checkout holding `folder`; None outside git or without git."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10,
                                  check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if status is None else bool(status), "root": git("rev-parse",
                                                                                               "--show-toplevel")}


def masked_command(argv: list[str], secrets: dict[str, str]) -> list[str]:
    """The command line with secrets masked: a `key=value` override or `--flag value` whose key looks secret, every
    secret value the Experiment holds, credentials in URLs."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        key, eq, _ = arg.partition("=")
        name = key.lstrip("-").replace("-", "_").rsplit(".", 1)[-1]
        if looks_secret(name) and eq:
            out.append(f"{key}=***")
        elif looks_secret(name) and arg.startswith("--"):
            out.append(arg)
            hide_next = True
        else:
            out.append(mask_url(mask_text(arg, secrets.values())))
    return out


def run_entries(loaded: LoadedExperiment) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Each Run's resolved seed and variations (metadata), and its manifest entry (labels and their source)."""
    runs, manifest = {}, []
    for name, run in loaded.experiment.runs.items():
        rp = run_plan(name, run, loaded.experiment.seed)
        options = run.environment.options()
        task_source = ("configured" if run.task else "derived" if any(
            isinstance(options.get(k), (str, int)) and not isinstance(options.get(k), bool)
            for k in ("task", "task_name", "env_name")) else "inferred")
        builder = run.environment_builder
        runs[name] = {"seed": rp.base_seed, "placement_seed": getattr(builder, "placement_seed", None),
                      "num_envs": builder.num_envs, "num_episodes": run.rollout_limit.num_episodes,
                      "num_steps": run.rollout_limit.num_steps,
                      "variations": {k: v.model_dump(exclude_none=True) for k, v in run.variations.items()}}
        manifest.append({"name": name, "task": rp.task, "policy": rp.policy,
                         "label_source": {"task": task_source,
                                          "policy": "configured" if run.policy_name else "derived"},
                         "environment": run.environment.type, "policy_type": run.policy.type,
                         "num_episodes": run.rollout_limit.num_episodes, "num_envs": builder.num_envs})
    return runs, manifest


def metadata_document(out: Path, loaded: LoadedExperiment, *, backend: str, status: str, resumed: bool = False,
                      argv: list[str] | None = None, experiment_id: str | None = None,
                      step: int | None = None) -> dict[str, Any]:
    """experiment_metadata.json's content at `status` for a run of `loaded` into `out` (its experiment.yaml, when
    written, is the config hashed): git, config hash, versions, the masked command line, backend, this host.
    `experiment_id` names this output folder's Experiment for good (a new one unless resuming: the results store
    replaces an Experiment's rows by it); `step`: the training step evaluate() was given."""
    try:
        config = hashlib.sha256((out / EXPERIMENT_FILE).read_bytes()).hexdigest()
    except OSError:
        config = None
    here = git_state(Path(__file__).resolve().parent)
    theirs = git_state(Path(loaded.path).resolve().parent) if loaded.path else None
    runs, _ = run_entries(loaded)
    return {
        "schema": SCHEMA, "experiment_id": experiment_id or uuid.uuid4().hex, "step": step,
        "status": status, "started_at": _now(), "running_at": None, "finished_at": None,
        "experiment": loaded.experiment.name, "experiment_file": str(loaded.path),
        "config_sha256": config, "git": None if here is None else {k: here[k] for k in ("commit", "dirty")},
        "experiment_git": (None if theirs is None or (here and theirs["root"] == here["root"])
                           else {k: theirs[k] for k in ("commit", "dirty")}),
        "versions": {"evalfleet": __version__, "python": platform.python_version(), **package_versions()},
        "command": masked_command(list(sys.argv if argv is None else argv), loaded.secrets),
        "working_directory": os.getcwd(), "backend": backend, "hosts": [socket.gethostname()],
        "platform": platform.platform(), "resumed": resumed, "runs": runs,
    }


def manifest_document(loaded: LoadedExperiment) -> dict[str, Any]:
    """experiment_manifest.json's content: each Run's labels and their source."""
    return {"schema": MANIFEST_SCHEMA, "experiment_name": loaded.experiment.name, "created_at": _now(),
            "runs": run_entries(loaded)[1]}


def finished_fields(doc: dict[str, Any], result: Any, error: BaseException | str | None = None) -> dict[str, Any]:
    """What a final status adds: finished_at, the error (type and message), and `hosts`: the document's and every
    worker's (from `result`, experiment_result.json's content, its timings)."""
    extra: dict[str, Any] = {"finished_at": _now()}
    if isinstance(error, BaseException):
        extra["error"] = {"type": type(error).__name__, "message": str(error)[:2000]}
    elif error is not None:
        extra["error"] = {"type": "error", "message": error[:2000]}
    timed = ((result or {}).get("timings") or {}).get("runs") or {} if isinstance(result, dict) else {}
    workers = {h for r in timed.values() if isinstance(r, dict) for h in r.get("hosts") or []}
    extra["hosts"] = sorted(set(doc.get("hosts") or []) | workers)
    return extra


class RunMetadata:
    """The metadata of one invocation on one output folder; `set_status` rewrites the file."""

    def __init__(self, out: Path, loaded: LoadedExperiment, *, backend: str, resume: bool,
                 argv: list[str] | None = None, step: int | None = None):
        self.path = out / METADATA_FILE
        previous: list[Any] = []
        experiment_id = None
        if resume:
            try:
                before = bounded_json.loads(self.path.read_text())
            except (OSError, ValueError):
                before = None
            if isinstance(before, dict):
                kept = before.get("experiment_id")
                experiment_id = kept if isinstance(kept, str) and EXPERIMENT_ID.fullmatch(kept) else None
                previous = list(before.get("previous") or [])
                gone = {k: v for k, v in before.items() if k != "previous"}
                if gone.get("status") in UNFINISHED:  # the process ended without saying so: killed
                    gone.update(status="interrupted", found_on="resume")
                previous.append(gone)
        self.doc = metadata_document(out, loaded, backend=backend, status="starting", resumed=resume, argv=argv,
                                     experiment_id=experiment_id, step=step)
        if previous:
            self.doc["previous"] = previous
        self.reserve = internal_dir(out) / SPACE_RESERVE_FILE
        self._set_aside(RESERVE_BYTES + 2 * len(json.dumps(self.doc, indent=2, default=str)))
        self.manifest = manifest_document(loaded)
        write_atomic(out / MANIFEST_FILE, json.dumps(self.manifest, indent=2) + "\n")
        self.set_status("starting")

    def _set_aside(self, size: int) -> None:
        """Fill the reserve file: random bytes, which no filesystem stores sparse or compressed."""
        try:
            self.reserve.parent.mkdir(parents=True, exist_ok=True)
            with open(self.reserve, "wb") as f:
                f.write(os.urandom(size))
        except OSError:  # no room even now: the run goes on without one
            self.free_reserve()

    def free_reserve(self) -> None:
        try:
            self.reserve.unlink(missing_ok=True)
        except OSError:
            pass

    def set_status(self, status: str, **fields: Any) -> None:
        self.doc["status"] = status
        self.doc.update(fields)
        try:
            write_atomic(self.path, json.dumps(self.doc, indent=2, default=str) + "\n")
        except OSError as exc:  # the metadata never costs the run
            print(f"evalfleet: could not write {self.path}: {exc}", file=sys.stderr)

    def running(self) -> None:
        self.set_status("running", running_at=_now())

    def finish(self, status: str, error: BaseException | None = None) -> None:
        result = self.path.with_name(RESULT_FILE)  # the collected copy says what the file says
        try:
            doc = bounded_json.loads(result.read_text())
        except (OSError, ValueError):
            doc = None
        self.set_status(status, **finished_fields(self.doc, doc, error))  # this host and every worker's
        if isinstance(doc, dict) and isinstance(doc.get("experiment_metadata"), dict):
            doc["experiment_metadata"]["document"] = self.doc
            try:
                write_atomic(result, json.dumps(doc, indent=2) + "\n")
            except OSError as exc:  # the metadata file says it; a full disk must not turn this into a traceback
                print(f"evalfleet: could not write {result}: {exc}", file=sys.stderr)


@contextmanager
def recorded(out: Path, loaded: LoadedExperiment, *, backend: str, resume: bool,
             step: int | None = None) -> Iterator[RunMetadata]:
    """The metadata around a run: starting now, `running` when the caller says, then finished, interrupted
    (Ctrl-C, SIGTERM) or failed (a full disk too: the reserve is freed for that last write)."""
    meta = RunMetadata(out, loaded, backend=backend, resume=resume, step=step)
    with sigterm_interrupts():  # SIGTERM stops the run like Ctrl-C, where nobody else handles it
        try:
            yield meta
        except KeyboardInterrupt as exc:
            how = "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"
            meta.set_status("interrupted", finished_at=_now(), signal=how)
            raise
        except BaseException as exc:
            if out_of_space(exc):
                meta.free_reserve()
            meta.finish("failed", exc)
            raise
        else:
            meta.finish("finished")
        finally:
            meta.free_reserve()
