"""`evalfleet run` under the watchdog (real runner processes, real SIGKILLs): the episode in flight when a runner
died gets an `error` record with `runner_crash` at its attempt and is played again as the next attempt, so an
episode that kills its runner every time is decided after `max_attempts` instead of taking its Run down with it
(issue #26). The SIGKILL / SIGSTOP of a runner mid-episode (a success at attempt 2 after `runner_crash` / `stall`)
is asserted in test_local_backend's relaunch test."""

from __future__ import annotations

import json
import sys

import pytest

from evalfleet.experiment.loading import load_experiment
from evalfleet.experiment.plan import make_plan
from evalfleet_testkit import PLUGINS_DIR, plugin_env, run_evalfleet

pytestmark = pytest.mark.slow


def test_an_episode_that_kills_its_runner_every_time_is_decided_after_max_attempts(write_experiment, tmp_path):
    if str(PLUGINS_DIR) not in sys.path:
        sys.path.insert(0, str(PLUGINS_DIR))
    import evalfleet_failure_plugins  # noqa: F401 - the toy env, to plan the Run here

    run = {"environment": {"type": "test_faulty", "succeed": True}, "policy": {"type": "test_zero"},
           "rollout_limit": {"num_episodes": 3}, "max_attempts": 2}
    env = plugin_env(EVALFLEET_PLUGINS="evalfleet_test_plugins,evalfleet_failure_plugins")
    probe = write_experiment({"r": run}, filename="probe.yaml")
    seed = make_plan(load_experiment(probe, []), workers=1).runs["r"].episode(1).seed
    path = write_experiment({"r": {**run, "policy": {"type": "test_zero", "kill_seed": seed}}})
    out = tmp_path / "o"
    proc = run_evalfleet("run", str(path), "--output", str(out), "--workers", "1", "--shard-size", "10",
                         "--no-progress", "--max-restarts", "3", env=env)
    records = [json.loads(line) for part in sorted((out / "r" / "parts").glob("*.jsonl"))
               for line in part.read_text().splitlines()]
    # Episode 1 killed its runner on attempts 1 and 2: each recorded by the next runner, then no more tries.
    assert sorted((r["episode"], r["attempt"], r["status"], r.get("failure_code")) for r in records) == [
        (0, 1, "success", None), (1, 1, "error", "runner_crash"), (1, 2, "error", "runner_crash"),
        (2, 1, "success", None)], proc.stderr
    assert all("the runner died (signal)" in r["error"] for r in records if r["status"] == "error")
    status = json.loads((out / ".evalfleet" / "worker-0.status.json").read_text())
    assert status["state"] == "completed" and [a["outcome"] for a in status["attempts"]] == [
        "signal", "signal", "completed"]
