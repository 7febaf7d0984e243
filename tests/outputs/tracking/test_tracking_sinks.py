"""Tracking sinks (issue #27): one real `evalfleet run` logs to W&B (offline), MLflow (sqlite), TensorBoard and
trackio at once; each tracker's own reader finds experiment_result.json's per-Run rates and intervals. An
unreachable MLflow server: the run completes, one warning line, results intact, the local copy kept."""

from __future__ import annotations

import glob
import json
import socket
import struct
from pathlib import Path

import pytest
import yaml

from evalfleet_testkit import metaworld_run, plugin_env, run_evalfleet

pytest.importorskip("wandb")
pytest.importorskip("mlflow")
pytest.importorskip("tensorboardX")
pytest.importorskip("trackio")

RUNS = {"push": metaworld_run("push-v3", episodes=3),
        "push_noisy": metaworld_run("push-v3", episodes=3, variations={"robot.action_noise": {"enabled": True}})}


def offline_env(tmp: Path) -> dict[str, str]:
    """The subprocess's environment: every tracker offline, its stores under `tmp` (never this process's)."""
    return plugin_env(WANDB_MODE="offline", WANDB_SILENT="true", TRACKIO_DIR=str(tmp / "trackio"),
                      HF_HUB_OFFLINE="1", WANDB_DIR=str(tmp / "wandb-default"))


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tracked")
    exp = tmp / "exp.yaml"
    exp.write_text(yaml.safe_dump({"name": "tracked", "runs": RUNS,
                                   "tracking": {"wandb": {"project": "evalfleet-test"},
                                                "tensorboard": {}, "trackio": {"project": "evalfleet-test"}}}))
    out = tmp / "out"
    done = run_evalfleet("run", str(exp), "--output", str(out), "--no-progress", "--workers", "2",
                         "--track", f"mlflow:sqlite:///{tmp / 'mlflow.db'}", env=offline_env(tmp))
    assert done.returncode == 0, done.stderr
    result = json.loads((out / "experiment_result.json").read_text())
    return tmp, out, result, done


def expected(result: dict) -> dict[str, tuple[float, float, float]]:
    runs = result["runs"]
    return {name: (runs[name]["success_rate"], *runs[name]["ci95"]) for name in RUNS}


def test_mlflow_reads_back_the_rates_from_sqlite(tracked):
    from mlflow.tracking import MlflowClient

    tmp, out, result, _ = tracked
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("evalfleet")
    assert Path(experiment.artifact_location.removeprefix("file://")).is_relative_to(out)  # never ./mlruns
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == out.name and run.data.params["config_sha256"]
    for name, (rate, low, high) in expected(result).items():
        found = [client.get_metric_history(run.info.run_id, f"{name}/{key}")[-1].value
                 for key in ("success_rate", "ci95_low", "ci95_high")]
        assert found == pytest.approx([rate, low, high])
    assert run.data.metrics["push/status/success"] == result["runs"]["push"]["counts"]["success"]
    artifacts = [a.path for a in client.list_artifacts(run.info.run_id, "evalfleet/step-0")]
    assert "evalfleet/step-0/experiment.json" in artifacts


def test_tensorboard_event_files_hold_the_rates(tracked):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, out, result, _ = tracked
    events = EventAccumulator(str(out / "tracking" / "tensorboard" / out.name))
    events.Reload()
    for name, values in expected(result).items():
        found = [events.Scalars(f"{name}/{key}")[-1].value for key in ("success_rate", "ci95_low", "ci95_high")]
        assert found == pytest.approx(values, abs=1e-6)  # TensorBoard keeps float32


def test_trackio_store_holds_the_rates(tracked, monkeypatch):
    import trackio.sqlite_storage as storage

    tmp, out, result, _ = tracked
    monkeypatch.setattr(storage, "TRACKIO_DIR", tmp / "trackio")
    (logged,) = storage.SQLiteStorage.get_logs("evalfleet-test", run=out.name)
    for name, (rate, low, high) in expected(result).items():
        assert [logged[f"{name}/{k}"] for k in ("success_rate", "ci95_low", "ci95_high")] == pytest.approx(
            [rate, low, high])


def wandb_records(path: str):
    """The protobuf records of a W&B run file (LevelDB log blocks; the record type is W&B's own)."""
    from wandb.proto import wandb_internal_pb2

    data, pos, chunk = Path(path).read_bytes(), 7, b""  # 7: the ':W&B' header, version
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        piece, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        chunk = piece if kind in (1, 2) else chunk + piece
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunk)
            yield record


def test_wandb_offline_run_file_holds_the_rates(tracked):
    _, out, result, _ = tracked
    (run_file,) = glob.glob(str(out / "tracking" / "wandb" / "wandb" / "offline-run-*" / "run-*.wandb"))
    history = {}
    for record in wandb_records(run_file):
        if record.WhichOneof("record_type") == "history":
            history.update({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                            for item in record.history.item})  # a key with '/' is written nested
    for name, values in expected(result).items():
        assert [history[f"{name}/{k}"] for k in ("success_rate", "ci95_low", "ci95_high")] == pytest.approx(values)


def test_every_sink_keeps_a_local_copy_and_the_trackers_stay_quiet(tracked):
    _, out, result, done = tracked
    for sink in ("wandb", "mlflow", "tensorboard", "trackio"):
        (line,) = [json.loads(t) for t in (out / "tracking" / f"{sink}.jsonl").read_text().splitlines()]
        assert line["delivered"] is True and line["problem"] is None
        assert line["metrics"]["push/success_rate"] == result["runs"]["push"]["success_rate"]
        assert line["config"]["provenance"]["config_sha256"]
    assert "tracking:" not in done.stderr and "wandb" not in done.stderr.lower()
    assert "Trackio" not in done.stdout + done.stderr


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed once the socket is: nothing listens there


def test_an_unreachable_tracker_is_one_warning_and_the_results_stay(tmp_path):
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({"name": "unreachable", "runs": {"push": metaworld_run("push-v3", episodes=2)}}))
    out = tmp_path / "out"
    uri = f"http://127.0.0.1:{closed_port()}"  # credentials travel in MLflow's own variables (a URI's are refused)
    env = {**offline_env(tmp_path), "MLFLOW_TRACKING_USERNAME": "user", "MLFLOW_TRACKING_PASSWORD": "hunter2"}
    done = run_evalfleet("run", str(exp), "--output", str(out), "--no-progress", "--workers", "1",
                         "--track", f"mlflow:{uri}", env=env)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "mlflow" in line.lower()]
    assert len(warnings) == 1 and warnings[0].startswith("tracking: mlflow not logged"), done.stderr
    assert "hunter2" not in done.stderr
    result = json.loads((out / "experiment_result.json").read_text())
    assert result["runs"]["push"]["decided"] == 2 and (out / "index.html").is_file()
    (line,) = [json.loads(t) for t in (out / "tracking" / "mlflow.jsonl").read_text().splitlines()]
    assert line["delivered"] is False and line["metrics"]["push/success_rate"] == result["runs"]["push"][
        "success_rate"]
    assert "hunter2" not in (out / "tracking" / "mlflow.jsonl").read_text()


def test_an_unknown_sink_is_refused_before_anything_runs(tmp_path):
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({"name": "x", "runs": {"push": metaworld_run("push-v3", episodes=1)}}))
    done = run_evalfleet("run", str(exp), "--output", str(tmp_path / "out"), "--track", "comet")
    assert done.returncode == 2 and "--track" in done.stderr and "comet" in done.stderr
    exp.write_text(yaml.safe_dump({"name": "x", "runs": {"push": metaworld_run("push-v3", episodes=1)},
                                   "tracking": {"neptune": {}}}))
    done = run_evalfleet("run", str(exp), "--output", str(tmp_path / "out"))
    assert done.returncode == 2 and "tracking.neptune" in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_missing_package_names_the_key_and_the_extra(tmp_path, monkeypatch):
    import importlib.util

    from evalfleet.errors import UserError
    from evalfleet.experiment.loading import load_experiment
    from evalfleet.outputs.tracking import check_tracking

    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({"name": "x", "runs": {"push": metaworld_run("push-v3", episodes=1)},
                                   "tracking": {"trackio": {}}}))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "trackio" else real(name, *a))
    with pytest.raises(UserError) as raised:
        check_tracking(load_experiment(str(exp)))
    assert raised.value.key == "tracking.trackio" and "evalfleet[tracking]" in raised.value.message


def test_evaluate_with_steps_draws_one_curve(tmp_path):
    """The example's training loop, three steps, `--track tensorboard`: one tracker run, three points whose
    values are each step's experiment_result.json."""
    import importlib.util

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from evalfleet_testkit import ROOT

    spec = importlib.util.spec_from_file_location("evaluate_during_training",
                                                  ROOT / "examples" / "evaluate_during_training.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    results = example.train(3, 2, tmp_path, workers=2, track="tensorboard")
    (run_dir,) = (tmp_path / "tensorboard").iterdir()  # the three calls' tracker run
    events = EventAccumulator(str(run_dir))
    events.Reload()
    for name in example.RUNS:
        points = events.Scalars(f"{name}/success_rate")
        assert [p.step for p in points] == [0, 1, 2]
        assert [p.value for p in points] == pytest.approx([r.runs[name].success_rate for r in results], abs=1e-6)
        highs = [p.value for p in events.Scalars(f"{name}/ci95_high")]
        assert highs == pytest.approx([r.runs[name].ci95[1] for r in results], abs=1e-6)
