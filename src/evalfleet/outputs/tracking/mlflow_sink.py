"""MLflow through its client (`mlflow-skinny` is enough): the tracker run found by its tag
`evalfleet.tracker_run` in the experiment (created with `artifact_location` under the output folder, never
./mlruns; any name, quotes too: `find_run`), or created; metrics at the point's step, parameters on creation, the
config and videos as artifacts under `evalfleet/step-<N>/`. The default store is sqlite:///OUT/tracking/mlflow.db.
An http(s) server gets one try per request with a bounded timeout (MLFLOW_HTTP_REQUEST_MAX_RETRIES=0)."""

from __future__ import annotations

import contextlib
import re
import time
from pathlib import Path
from typing import Any

from evalfleet.experiment.tracking import MlflowOptions
from evalfleet.outputs.tracking.payload import Point
from evalfleet.outputs.tracking.sinks import SinkContext
from evalfleet.secrets import exported

RUN_TAG = "evalfleet.tracker_run"
PARAMS = ("config_sha256", "backend", "experiment_file")


def bounded_requests(timeout_s: float) -> contextlib.AbstractContextManager[None]:
    """MLflow reads its HTTP retry and timeout settings from the environment at each request: set them while
    this sink runs, restored afterwards (the same context as the secrets' export)."""
    return exported({"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
                     "MLFLOW_HTTP_REQUEST_TIMEOUT": str(max(1, int(min(10.0, timeout_s / 3))))})


def tag_pattern(value: str) -> str:
    """A LIKE pattern, safe inside MLflow's filter string, that `value` matches: MLflow's filter parser has no
    escapes, so a quote or backslash (an output folder named `it's`) becomes `_`, any one character."""
    return re.sub(r"['\"\\]", "_", value)


def find_run(client: Any, experiment_id: str, tracker_run: str) -> str | None:
    """The id of the tracker run tagged `tracker_run`: found by a LIKE pattern, the tag then compared exactly
    (the pattern's `_` and `%` match more)."""
    token = None
    while True:
        page = client.search_runs([experiment_id], filter_string=f"tags.`{RUN_TAG}` LIKE '{tag_pattern(tracker_run)}'",
                                  max_results=100, page_token=token)
        for run in page:
            if run.data.tags.get(RUN_TAG) == tracker_run:
                return run.info.run_id
        token = page.token
        if not token:
            return None


def log_point(options: MlflowOptions, point: Point, context: SinkContext) -> None:
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    uri = options.tracking_uri or f"sqlite:///{(context.folder / 'mlflow.db').resolve()}"
    artifacts = options.artifact_location or (context.folder / "mlflow-artifacts").resolve().as_uri()
    with bounded_requests(context.timeout_s):
        client = MlflowClient(tracking_uri=uri)
        experiment = client.get_experiment_by_name(options.experiment)
        experiment_id = (experiment.experiment_id if experiment is not None
                         else client.create_experiment(options.experiment, artifact_location=artifacts))
        run_id = find_run(client, experiment_id, context.tracker_run)
        if run_id is None:
            run_id = client.create_run(experiment_id, run_name=context.tracker_run,
                                       tags={RUN_TAG: context.tracker_run}).info.run_id
            provenance = point.config.get("provenance") or {}
            params = [Param(key, str(provenance[key])[:500]) for key in PARAMS if key in provenance]
            commit = (provenance.get("git") or {}).get("commit")
            params += [Param("git_commit", str(commit))] if commit else []
            client.log_batch(run_id, params=params)
        now = int(time.time() * 1000)
        client.log_batch(run_id, metrics=[Metric(key, value, now, point.step) for key, value in point.metrics.items()])
        prefix = f"evalfleet/step-{point.step}"
        for name, text in point.files.items():
            client.log_text(run_id, text, f"{prefix}/{name}")
        for run, videos in point.videos.items():
            for path in videos:
                client.log_artifact(run_id, str(Path(path)), f"{prefix}/videos/{run}")
        client.set_terminated(run_id)
