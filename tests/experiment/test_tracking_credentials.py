"""Issue #52, finding 2: credentials in a tracking URI (`tracking.mlflow.tracking_uri`, its `artifact_location`,
`tracking.tensorboard.logdir`) are refused when the Experiment loads: exit 2, the key and the variables that
carry them named, the password never printed, no output folder and no workflow written (a URI is written into
OUT/experiment.yaml, the tracked config and every OSMO workflow)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalfleet_testkit import ROOT, run_evalfleet

EXPERIMENT = """\
name: t
runs:
  r:
    environment: {type: metaworld, task: reach-v3}
    policy: {type: metaworld_expert}
    rollout_limit: {num_episodes: 1}
"""
SECRET = "S3cr(t) pa'ss"
CASES = [
    ("tracking.mlflow.tracking_uri", f"https://alice:{SECRET}@127.0.0.1:9/", "MLFLOW_TRACKING_PASSWORD"),
    ("tracking.mlflow.tracking_uri", f"postgresql://alice:{SECRET}@db.example/mlflow", "PGPASSWORD"),
    ("tracking.mlflow.artifact_location", f"s3://AKIAKEYID:{SECRET}@bucket/artifacts", "AWS_SECRET_ACCESS_KEY"),
    ("tracking.tensorboard.logdir", f"s3://AKIAKEYID:{SECRET}@bucket/tb", "AWS_SECRET_ACCESS_KEY"),
]


def refused(done, key: str, variable: str) -> None:
    assert done.returncode == 2, done.stderr[-2000:]
    assert key in done.stderr and variable in done.stderr and "credentials" in done.stderr, done.stderr
    for part in ("S3cr", "pa'ss", "AKIAKEYID", "alice"):
        assert part not in done.stdout + done.stderr, done.stderr


@pytest.mark.parametrize(("key", "uri", "variable"), CASES, ids=[f"{c[0]}={c[1].split(':')[0]}" for c in CASES])
def test_credentials_in_a_tracking_uri_are_refused_before_anything_is_written(tmp_path: Path, key: str, uri: str,
                                                                              variable: str) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT)
    out = tmp_path / "out"
    refused(run_evalfleet("run", str(path), f"{key}={uri}", "--output", str(out)), key, variable)
    assert not out.exists()
    rendered = tmp_path / "rendered"
    refused(run_evalfleet("submit", str(path), "--backend", "osmo", "--dry-run", "--output-dir", str(rendered),
                          f"{key}={uri}", "osmo.gpus=0"), key, variable)
    assert not rendered.exists()


def test_the_track_flag_is_refused_the_same_way(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT)
    done = run_evalfleet("run", str(path), "--track", f"mlflow:https://alice:{SECRET}@127.0.0.1:9/",
                         "--output", str(tmp_path / "out"))
    refused(done, "tracking.mlflow.tracking_uri", "MLFLOW_TRACKING_USERNAME")
    assert not (tmp_path / "out").exists()


def test_a_tracking_uri_without_credentials_is_taken() -> None:
    done = run_evalfleet("plan", str(ROOT / "examples" / "quickstart.yaml"),
                         "tracking.mlflow.tracking_uri=https://mlflow.example:5000/",
                         "tracking.mlflow.artifact_location=s3://bucket/run@2/artifacts")
    assert done.returncode == 0, done.stderr
