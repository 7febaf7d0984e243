"""Issue #52 finding 13: the MLflow sink logs a run whose output folder's name holds a quote (or a backslash),
the tracker run named after the folder: a real `evalfleet run --track mlflow` logs it, and a `--resume` of the
folder logs again into the same tracker run (found by its tag, not a second one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from evalfleet_testkit import metaworld_run, plugin_env, run_evalfleet

pytest.importorskip("mlflow")


def test_mlflow_logs_an_output_folder_named_with_quotes(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({"name": "quoted", "runs": {"push": metaworld_run("push-v3", episodes=2)}}))
    out = tmp_path / "it's \"quoted\" \\ here"
    for extra in ([], ["--resume"]):
        done = run_evalfleet("run", str(exp), "--output", str(out), "--no-progress", "--workers", "1",
                             "--track", "mlflow", *extra, env=plugin_env(HOME=str(tmp_path)))
        assert done.returncode == 0, done.stderr
        assert "tracking: mlflow not logged" not in done.stderr, done.stderr
    copies = [json.loads(line) for line in (out / "tracking" / "mlflow.jsonl").read_text().splitlines()]
    assert [c["delivered"] for c in copies] == [True, True]

    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'tracking' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("evalfleet")
    (run,) = client.search_runs([experiment.experiment_id])  # the resume's point went to the same tracker run
    assert run.data.tags["evalfleet.tracker_run"] == out.name
    result = json.loads((out / "experiment_result.json").read_text())
    assert run.data.metrics["push/success_rate"] == result["runs"]["push"]["success_rate"]
