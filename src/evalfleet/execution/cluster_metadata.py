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

import hashlib
import json
import socket
import sys
from pathlib import Path
from typing import Any, Callable

from evalfleet import bounded_json
from evalfleet.execution.run_metadata import finished_fields, manifest_document, metadata_document
from evalfleet.experiment.loading import LoadedExperiment
from evalfleet.layout import MANIFEST_FILE, METADATA_FILE, RESULT_FILE
from evalfleet.outputs.storage import Location, open_location

SUBMITTED = "submitted"
WORKFLOW_ID_TOKEN = "{{workflow_id}}"  # OSMO fills it in, in a task's files too


def _dumps(doc: dict[str, Any]) -> bytes:
    return (json.dumps(doc, indent=2, default=str) + "\n").encode()


def submission_files(out: Path, loaded: LoadedExperiment, *, backend: str, submission: dict[str, Any],
                     argv: list[str] | None = None, experiment_yaml: str | None = None) -> dict[str, bytes]:
    """{file name: content} of experiment_metadata.json (`status: submitted`, `submission`: the job or workflow
    ids) and experiment_manifest.json for `loaded` submitted to `backend`, its output `out` (the config hash
    that of OUT/experiment.yaml, or of `experiment_yaml`: what collect will write there)."""
    doc = metadata_document(out, loaded, backend=backend, status=SUBMITTED, argv=argv)
    if experiment_yaml is not None:
        doc["config_sha256"] = hashlib.sha256(experiment_yaml.encode()).hexdigest()
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
        return bounded_json.loads(loc.read_bytes(name)) if loc.is_file(name) else None
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


def collect_submission(sources: list[str], output: str, *, endpoint_url: str | None, report: bool,
                       log: Callable[[str], None]) -> dict[str, Any]:
    """`evalfleet collect --finish-submission`, a submitted Experiment's collect step (OSMO's collect task):
    collect, then the metadata (at the output, else the one carried in the first source) set finished, or
    failed with the error before the error goes on; then the results logged to the Experiment's `tracking:`
    sinks. A bucket output's trackers write their offline stores into a local folder copied to OUT/tracking/."""
    import tempfile

    from evalfleet.outputs.collect import collect
    from evalfleet.outputs.tracking import TRACKING_DIR

    carried = open_location(sources[0], endpoint_url=endpoint_url) if sources else None
    try:
        result = collect(sources, output, endpoint_url=endpoint_url, report=report)
    except BaseException as exc:
        try:
            finish_collected(open_location(output, endpoint_url=endpoint_url, role="output"), error=exc,
                             carried=carried)
        except Exception as why:  # noqa: BLE001 -- the collect's own error is the one to show
            log(f"could not record the failure in {METADATA_FILE}: {type(why).__name__}: {why}")
        raise
    dest = open_location(output, endpoint_url=endpoint_url, role="output")
    finish_collected(dest, carried=carried)
    loaded = _experiment(carried, log)
    if loaded is None:
        return result
    if dest.is_local:
        track_collected(loaded, Path(dest.root), log=log)
        return result
    with tempfile.TemporaryDirectory(prefix="evalfleet-tracking-") as staging:
        local = Path(staging)
        (local / RESULT_FILE).write_bytes(dest.read_bytes(RESULT_FILE))
        track_collected(loaded, local, log=log)
        here = Location(url=staging, root=staging)
        for rel in here.walk_files(TRACKING_DIR):
            dest.copy_from(here, rel, rel)
    return result


def _experiment(source: Location | None, log: Callable[[str], None]) -> LoadedExperiment | None:
    """The submitted Experiment, from the collect step's first source (its experiment.yaml); None, said in one
    line, when it cannot be loaded here (the results are collected all the same)."""
    from evalfleet.errors import UserError
    from evalfleet.experiment.loading import load_experiment
    from evalfleet.layout import EXPERIMENT_FILE

    if source is None or not source.is_local or not source.is_file(EXPERIMENT_FILE):
        return None
    try:
        return load_experiment(source.join(EXPERIMENT_FILE), [])
    except UserError as exc:
        log(f"tracking: not logged, the Experiment does not load here ({exc.line()})")
        return None
