"""experiment_metadata.json for work handed to a cluster (`evalfleet submit`), and its cluster collect step.

`submit` writes the metadata with `status: submitted` (the job or workflow ids, backend, git, config hash,
versions, the command line masked) and experiment_manifest.json where it can: the Slurm backend into the shared
output folder; the OSMO backend carries both files in its collect task (the folder `evalfleet collect` reads the
Experiment from, so they reach the output like any source's), the workflow id as OSMO's `{{workflow_id}}` token.
The cluster's collect step then sets `finished` (or `failed` with the error), `finished_at` and `hosts` (its
own and every worker's, from the timings) and logs the results to the Experiment's `tracking:` sinks as
`evalfleet run` does (`outputs.tracking.log_to_trackers`: a tracker that fails is one warning line, never a
failed collect). A `--dry-run` writes none of it.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any, Callable

from evalfleet.execution.run_metadata import finished_fields, manifest_document, metadata_document
from evalfleet.experiment.loading import LoadedExperiment
from evalfleet.layout import MANIFEST_FILE, METADATA_FILE, RESULT_FILE
from evalfleet.outputs.storage import Location, open_location

SUBMITTED = "submitted"
WORKFLOW_ID_TOKEN = "{{workflow_id}}"  # OSMO fills it in, in a task's files too


def _dumps(doc: dict[str, Any]) -> bytes:
    return (json.dumps(doc, indent=2, default=str) + "\n").encode()


def submission_files(out: Path, loaded: LoadedExperiment, *, backend: str, submission: dict[str, Any],
                     argv: list[str] | None = None) -> dict[str, bytes]:
    """{file name: content} of experiment_metadata.json (`status: submitted`, `submission`: the job or workflow
    ids) and experiment_manifest.json for `loaded` submitted to `backend`, its output `out`."""
    doc = metadata_document(out, loaded, backend=backend, status=SUBMITTED, argv=argv)
    doc["submitted_at"] = doc["started_at"]
    doc["submission"] = submission
    return {METADATA_FILE: _dumps(doc), MANIFEST_FILE: _dumps(manifest_document(loaded))}


def write_submitted(out: Path, loaded: LoadedExperiment, *, backend: str, submission: dict[str, Any],
                    argv: list[str] | None = None) -> None:
    """The submission's metadata and manifest written into the output folder `out`. A collect step that has
    already finished (a tiny array) keeps its status: only the ids are added then."""
    dest = open_location(str(out), role="output")
    files = submission_files(out, loaded, backend=backend, submission=submission, argv=argv)
    before = read_json(dest, METADATA_FILE)
    if isinstance(before, dict) and before.get("status") not in (None, SUBMITTED):
        before["submission"] = submission
        files[METADATA_FILE] = _dumps(before)
    for name, data in files.items():
        dest.write_bytes(name, data)


def read_json(loc: Location, name: str) -> Any:
    try:
        return json.loads(loc.read_bytes(name)) if loc.is_file(name) else None
    except (OSError, ValueError):
        return None


def finish_collected(dest: Location, *, error: BaseException | str | None = None,
                     carried: Location | None = None) -> dict[str, Any] | None:
    """The collect step's end: the output's metadata (else the one `carried` in the task) set `finished`, or
    `failed` with the error, with finished_at and the hosts; experiment_result.json's copy follows. None when
    neither holds metadata (an output collected without a submission)."""
    doc = read_json(dest, METADATA_FILE)
    if not isinstance(doc, dict) and carried is not None:
        doc = read_json(carried, METADATA_FILE)
        manifest = read_json(carried, MANIFEST_FILE)
        if isinstance(manifest, dict) and not dest.is_file(MANIFEST_FILE):
            dest.write_bytes(MANIFEST_FILE, _dumps(manifest))
    if not isinstance(doc, dict):
        return None
    result = read_json(dest, RESULT_FILE)
    doc["hosts"] = [*(doc.get("hosts") or []), socket.gethostname()]  # the collect step's own
    doc.update(finished_fields(doc, result, error), status="failed" if error is not None else "finished")
    try:
        dest.write_bytes(METADATA_FILE, _dumps(doc))
        if isinstance(result, dict):
            result["experiment_metadata"] = {**(result.get("experiment_metadata") or {}),
                                             "file": dest.display(METADATA_FILE), "name": METADATA_FILE,
                                             "format": "evalfleet", "document": doc}
            dest.write_bytes(RESULT_FILE, _dumps(result))
    except OSError as exc:  # the metadata never costs the collect
        print(f"evalfleet: could not write {dest.display(METADATA_FILE)}: {exc}", file=sys.stderr)
    return doc


def track_collected(loaded: LoadedExperiment, out: Path, *, result: Any = None,
                    log: Callable[[str], None]) -> dict[str, str | None]:
    """The collected output `out` (a local folder; `result` its ExperimentResult, else read from its
    experiment_result.json) logged to the Experiment's `tracking:` sinks as `evalfleet run` logs it, after the
    metadata's final status: sink → None (delivered) or the problem."""
    from evalfleet.layout import REPORT_FILE
    from evalfleet.outputs.result import ExperimentResult
    from evalfleet.outputs.tracking import log_to_trackers

    if loaded.experiment.tracking is None or not loaded.experiment.tracking.sinks():
        return {}
    raw = json.loads((out / RESULT_FILE).read_text())  # with the final metadata (finish_collected)
    result = ExperimentResult.from_json(loaded.experiment.name, out, raw, order=list(loaded.experiment.runs),
                                        report=result.report if result is not None else out / REPORT_FILE,
                                        plots=result.plots if result is not None else ())
    return log_to_trackers(loaded, out, result, step=None, log=log)
