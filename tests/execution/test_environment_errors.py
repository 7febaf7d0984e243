"""An environment the Experiment cannot build (issue 30: an unknown Gymnasium id, kwargs the env does not take,
an `import:` module that is not installed) is the Run's configuration error, not the machine's: the runner
runs none of that Run's episodes and records `failed_because: environment_error` with the message, after
ONE attempt (no restarts), other Runs still run, and `evalfleet run` exits 1 naming the Run, the id and the
message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml


def gym_run(**environment: object) -> dict:
    env = {"type": "gymnasium", "id": "CartPole-v1", "success": {"terminated": True}, "max_steps": 3, **environment}
    return {"environment": env, "policy": {"type": "random"}, "rollout_limit": {"num_episodes": 2}}


CASES = {
    "unknown-id": ({"id": "NoSuchEnv-v0"}, ("NoSuchEnv-v0", "NameNotFound")),
    "unknown-version": ({"id": "CartPole-v99"}, ("CartPole-v99", "VersionNotFound")),
    "bad-kwargs": ({"kwargs": {"colour": "red"}}, ("CartPole-v1", "TypeError", "colour")),
    "import-not-installed": ({"import": "no_such_gym_package_h2"}, ("no_such_gym_package_h2", "ModuleNotFoundError")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_environment_that_cannot_be_built_fails_its_run_once(case: str, tmp_path: Path) -> None:
    environment, expected = CASES[case]
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump({"runs": {"broken": gym_run(**environment), "fine": gym_run()}}))
    out = tmp_path / "out"
    environ = {k: v for k, v in os.environ.items() if k not in ("EVALFLEET_FRESH_RUNNERS", "EVALFLEET_PLUGINS")}
    done = subprocess.run([sys.executable, "-m", "evalfleet.cli", "run", str(path), "--output", str(out),
                           "--workers", "1", "--no-progress"], capture_output=True, text=True, check=False, timeout=300,
                          stdin=subprocess.DEVNULL, env=environ, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    status = json.loads((out / "broken" / "run_status.json").read_text())
    assert status["state"] == "failed" and status["failed_because"] == "environment_error", status
    assert "Run 'broken'" in status["reason"] and all(s in status["reason"] for s in expected), status
    failed_line = next(line for line in done.stderr.splitlines() if line.startswith("broken: failed:"))
    assert "environment_error" in failed_line and all(s in failed_line for s in expected), done.stderr
    records = (out / "broken" / "episode_results.jsonl")
    assert not records.exists() or not records.read_text().strip()  # no episode ran, no error records
    worker = json.loads((out / ".evalfleet" / "worker-0.status.json").read_text())
    assert len(worker["attempts"]) == 1 and worker["restarts"] == 0, worker  # not retried as infrastructure
    result = json.loads((out / "experiment_result.json").read_text())
    assert result["runs"]["fine"]["status"] == "completed"


def test_run_shards_reports_the_error_and_runs_no_episode(tmp_path: Path) -> None:
    from evalfleet.experiment.loading import load_experiment
    from evalfleet.experiment.plan import make_plan
    from evalfleet.rollout.runner import run_shards

    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump({"runs": {"broken": gym_run(id="NoSuchEnv-v0")}}))
    plan = make_plan(load_experiment(path), workers=1)
    outcomes = run_shards(plan.runs, plan.shards, tmp_path / "out")
    assert len(outcomes) == len(plan.shards) >= 1
    assert all(o.environment_error and "NoSuchEnv-v0" in o.environment_error and o.recorded == 0 for o in outcomes)
