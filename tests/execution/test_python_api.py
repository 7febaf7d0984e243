"""The Python API: `evalfleet.run(...)` returns a typed ExperimentResult, on the local backend (the Ray
backend's API tests are in test_ray_backend.py); bad input raises UserError before anything is written."""

from __future__ import annotations

import json
import re
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
    ({"workers": 0}, "workers=...): expected an integer >= 1, got 0"),
    ({"shard_size": 0}, "shard_size=...): expected an integer >= 1, got 0"),
    ({"overrides": ["ray.adress=127.0.0.1:6379"]}, "unknown key ray.adress; did you mean ray.address?"),
])
def test_bad_arguments_raise_before_anything_is_written(tmp_path, kwargs, key):
    with pytest.raises(evalfleet.UserError, match=re.escape(key)):
        evalfleet.run(QUICKSTART, output=tmp_path / "out", progress=False, **kwargs)
    assert not (tmp_path / "out").exists()


ONE_EPISODE = ["shared.rollout_limit.num_episodes=1"]
WRONG_RUN_ARGUMENTS = [
    ({"workers": "2"}, "workers", "got '2'"),
    ({"workers": 1.5}, "workers", "got 1.5"),
    ({"workers": True}, "workers", "got True"),
    ({"backend": None}, "backend", "got None"),
    ({"overrides": [1]}, "overrides", "got 1 in it"),
    ({"overrides": "a=b"}, "overrides", "single string 'a=b'"),
    ({"overrides": 5}, "overrides", "got 5"),
    ({"resume": "no"}, "resume", "expected True or False, got 'no'"),
    ({"progress": None}, "progress", "expected True or False"),
    ({"shard_size": "10"}, "shard_size", "got '10'"),
    ({"output": 3}, "output", "got int"),
    ({"watchdog": {}}, "watchdog", "got dict"),
    ({"log": "stderr"}, "log", "got 'stderr'"),
]


@pytest.mark.parametrize("kwargs, argument, message", WRONG_RUN_ARGUMENTS)
def test_every_wrong_argument_of_run_is_a_user_error_naming_it(tmp_path, kwargs, argument, message):
    with pytest.raises(evalfleet.UserError) as caught:
        # (short, should a wrong argument be taken: one episode of one Run)
        evalfleet.run(QUICKSTART, **{"output": tmp_path / "out", "progress": False, "workers": 1,
                                     "overrides": ONE_EPISODE, **kwargs})
    line = caught.value.line()
    assert line.startswith(f"evalfleet.run({argument}=...): ") and message in line, line
    assert "command line" not in line and "--" not in line
    assert not (tmp_path / "out").exists()


def test_run_of_something_that_is_not_an_experiment_is_a_user_error(tmp_path):
    with pytest.raises(evalfleet.UserError, match=re.escape("evalfleet.run(experiment=...): expected the path")):
        evalfleet.run({"name": "x"}, output=tmp_path / "out")
    assert not (tmp_path / "out").exists()


WRONG_EVALUATE_ARGUMENTS = [
    ({"workers": "2"}, "workers", "got '2'"),
    ({"workers": 0}, "workers", "got 0"),
    ({"max_batch": -3}, "max_batch", "got -3"),
    ({"max_batch": 2.0}, "max_batch", "got 2.0"),
    ({"max_wait_ms": -1}, "max_wait_ms", "got -1"),
    ({"max_wait_ms": "5"}, "max_wait_ms", "got '5'"),
    ({"runs": "push_expert"}, "runs", "single string 'push_expert'"),
    ({"runs": [1]}, "runs", "got 1 in it"),
    ({"runs": ["nope"]}, "runs", "no Run named 'nope'"),
    ({"overrides": "a=b"}, "overrides", "single string"),
    ({"policy_name": ""}, "policy_name", "non-empty"),
    ({"progress": 1}, "progress", "got 1"),
]


@pytest.mark.parametrize("kwargs, argument, message", WRONG_EVALUATE_ARGUMENTS)
def test_every_wrong_argument_of_evaluate_is_a_user_error_naming_it(tmp_path, kwargs, argument, message):
    import threading

    before = set(threading.enumerate())
    with pytest.raises(evalfleet.UserError) as caught:
        evalfleet.evaluate(lambda obs: [0.0] * 4, QUICKSTART, **{"output": tmp_path / "out", "workers": 1,
                                                                  "runs": ["push_expert"], "overrides": ONE_EPISODE,
                                                                  "log": lambda line: None, **kwargs})
    line = caught.value.line()
    assert line.startswith(f"evalfleet.evaluate({argument}=...): ") and message in line, line
    assert "command line" not in line
    assert not (tmp_path / "out").exists()
    assert not [t for t in threading.enumerate() if t not in before and t.is_alive()]


def test_the_command_line_keeps_its_own_spelling_of_the_same_rule(tmp_path):
    for command in (["plan", QUICKSTART, "--workers", "0"], ["run", QUICKSTART, "--workers", "0", "-o",
                                                              str(tmp_path / "out")]):
        proc = subprocess.run([sys.executable, "-m", "evalfleet.cli", *command], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().splitlines()[-1].endswith("command line: --workers: expected an integer >= 1, "
                                                            "got 0"), proc.stderr
    assert not (tmp_path / "out").exists()


def test_loaded_experiment_takes_no_further_overrides(tmp_path):
    from evalfleet.experiment.loading import load_experiment

    with pytest.raises(evalfleet.UserError, match="overrides apply when loading"):
        evalfleet.run(load_experiment(QUICKSTART), overrides=["seed=1"], output=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_finalize_s_imports_begin_while_the_workers_run_on_a_thread_of_their_own(write_experiment, tmp_path,
                                                                                 monkeypatch):
    """The pipeline's background work (preloading what finalize imports) is started once by the local backend,
    while its workers run (their supervising threads alive), on a thread of its own, and finished before
    finalize; the results are the same as ever."""
    import threading

    from evalfleet.outputs import finalize
    from evalfleet_testkit import metaworld_run

    starts, ran = [], []
    start = finalize.Preload.start

    def recording_start(self):
        supervising = [t for t in threading.enumerate() if "(_supervise)" in t.name and t.is_alive()]
        starts.append((threading.current_thread() is threading.main_thread(), len(supervising)))
        start(self)

    def recording_preload():
        ran.append(threading.current_thread().name)

    monkeypatch.setattr(finalize.Preload, "start", recording_start)
    monkeypatch.setattr(finalize, "preload", recording_preload)
    path = write_experiment({
        "short": metaworld_run("reach-v3", episodes=1),
        "long": metaworld_run("reach-v3", episodes=16, policy={"type": "random"},
                              environment={"type": "metaworld", "task": "reach-v3", "max_steps": 60}),
    })
    result = evalfleet.run(path, output=tmp_path / "out", workers=2, shard_size=100, progress=False,
                           log=lambda line: None)
    assert result.ok and result.runs["short"].decided == 1 and result.runs["long"].decided == 16
    assert len(starts) == 1 and starts[0][0] and starts[0][1] >= 1  # from the backend's thread, workers running
    assert ran == ["evalfleet-preload"]
