"""The Python API: `evalfleet.run(...)` returns a typed ExperimentResult, on the local backend (the Ray
backend's API tests are in test_ray_backend.py); bad input raises UserError before anything is written."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import evalfleet
from evalfleet_testkit import ROOT

QUICKSTART = str(ROOT / "examples" / "quickstart.yaml")
RUN_ORDER = ["push_expert", "push_expert_noisy", "pick_place_expert", "pick_place_expert_noisy"]


def test_the_readme_one_liner_prints_rates_with_intervals(tmp_path):
    """The issue's own command, from a folder of its own (outputs/ lands there)."""
    code = ("import evalfleet; r = evalfleet.run(%r, overrides=['shared.rollout_limit.num_episodes=5'], "
            "progress=False); print(r)" % QUICKSTART)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("quickstart: 4 Runs, report outputs/quickstart-")
    for name, line in zip(RUN_ORDER, lines[1:]):  # the Experiment's order, one line per Run
        assert line.strip().startswith(f"{name}: "), lines
        assert "/5 success " in line and "%, " in line and "(completed)" in line
    (out,) = (tmp_path / "outputs").iterdir()
    result = json.loads((out / "experiment_result.json").read_text())

    # The typed result is experiment_result.json's content, in the file's order.
    typed = evalfleet.ExperimentResult.from_json("quickstart", out, result, order=RUN_ORDER,
                                                 report=out / "index.html")
    assert list(typed.runs) == RUN_ORDER and typed.ok and typed.exit_code == 0
    for name, run in typed.runs.items():
        entry = result["runs"][name]
        assert run.decided == 5 and run.successes == entry["counts"]["success"]
        assert run.success_rate == pytest.approx(run.successes / 5)
        assert run.ci95[0] <= run.success_rate <= run.ci95[1]
    assert (out / "index.html").exists() and (out / "plots" / "success_rates.png").stat().st_size > 5000


def test_run_in_process_returns_paths_and_failures(tmp_path):
    # Every push_expert episode overruns its deadline: infrastructure errors, left after one attempt.
    result = evalfleet.run(QUICKSTART, overrides=["shared.rollout_limit.num_episodes=2",
                                                  "runs.push_expert.episode_timeout_s=0.001",
                                                  "runs.push_expert.max_attempts=1"],
                           output=tmp_path / "out", workers=2, progress=False, log=lambda line: None)
    assert isinstance(result, evalfleet.ExperimentResult)
    assert result.result_file == tmp_path / "out" / "experiment_result.json" and result.report.exists()
    assert tmp_path / "out" / "plots" / "success_rates.png" in result.plots
    assert result.runs["pick_place_expert"].status == "completed"
    push = result.runs["push_expert"]
    assert push.errors == 2 and push.decided == 0 and push.success_rate is None and push.status == "partial"
    assert not result.ok and result.exit_code == 1


@pytest.mark.parametrize("kwargs, key", [
    ({"backend": "locl"}, "did you mean local"),
    ({"backend": "osmo"}, "evalfleet submit --backend osmo"),
    ({"workers": 0}, "--workers"),
    ({"shard_size": 0}, "--shard-size"),
    ({"ray_address": "127.0.0.1:6379"}, "--ray-address needs --backend ray"),
])
def test_bad_arguments_raise_before_anything_is_written(tmp_path, kwargs, key):
    with pytest.raises(evalfleet.UserError, match=key):
        evalfleet.run(QUICKSTART, output=tmp_path / "out", progress=False, **kwargs)
    assert not (tmp_path / "out").exists()


def test_loaded_experiment_takes_no_further_overrides(tmp_path):
    from evalfleet.experiment.loading import load_experiment

    with pytest.raises(evalfleet.UserError, match="overrides apply when loading"):
        evalfleet.run(load_experiment(QUICKSTART), overrides=["seed=1"], output=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_worker_that_ends_first_lends_its_core_to_finalize_s_imports(write_experiment, tmp_path, monkeypatch):
    """The pipeline's spare-core work (preloading what finalize imports) runs once, in the local backend's
    supervising thread of a worker that has ended, while another worker still runs; the results are the
    same as ever."""
    import threading

    from evalfleet.execution import pipeline
    from evalfleet_testkit import metaworld_run

    calls = []

    def recording_preload():
        others = [t for t in threading.enumerate()
                  if t is not threading.current_thread() and "(_supervise)" in t.name and t.is_alive()]
        calls.append((threading.current_thread().name, len(others)))

    monkeypatch.setattr(pipeline, "preload", recording_preload)
    path = write_experiment({
        "short": metaworld_run("reach-v3", episodes=1),
        "long": metaworld_run("reach-v3", episodes=16, policy={"type": "random"},
                              environment={"type": "metaworld", "task": "reach-v3", "max_steps": 60}),
    })
    result = evalfleet.run(path, output=tmp_path / "out", workers=2, shard_size=100, progress=False,
                           log=lambda line: None)
    assert result.ok and result.runs["short"].decided == 1 and result.runs["long"].decided == 16
    assert len(calls) == 1, calls
    thread, others_running = calls[0]
    assert "(_supervise)" in thread and others_running == 1
