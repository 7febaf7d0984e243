"""The runner checks every action against the env's declared action spec before stepping: an action of the wrong
size, or with NaN/inf in it, is the policy not fitting its environment (the Run fails as `spec_mismatch`, naming the
policy and the spec), never cut to size or counted as an ordinary failure."""

from __future__ import annotations

import json

import pytest

import evalfleet
from evalfleet_testkit import ROOT

QUICKSTART = str(ROOT / "examples" / "quickstart.yaml")


@pytest.mark.parametrize("action, problem", [
    ([0.1, 0.0, 0.0, 0.0, 0.5], "returned an action of shape (5,) (5 values)"),
    ([0.1, 0.0, 0.0], "returned an action of shape (3,) (3 values)"),
    ([0.0, float("nan"), 0.0, 0.0], "returned a non-finite action (nan at index 1)"),
    ([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, float("inf"), 0.0]], "returned a non-finite action (inf at index 2)"),
])
def test_an_action_that_does_not_fit_the_env_fails_the_run_as_a_spec_mismatch(tmp_path, action, problem):
    result = evalfleet.evaluate(lambda observation: action, QUICKSTART, runs=["push_expert"], workers=1,
                                policy_name="misfit", output=tmp_path / "out", log=lambda line: None,
                                overrides=["shared.rollout_limit.num_episodes=2"])
    run = result.runs["push_expert"]
    assert run.status == "failed" and run.decided == 0 and run.failures == 0 and not result.ok
    assert run.reason.startswith("spec_mismatch: Run 'push_expert': policy 'misfit' " + problem), run.reason
    assert "environment metaworld takes action_dim 4" in run.reason, run.reason
    status = json.loads((tmp_path / "out" / "push_expert" / "run_status.json").read_text())
    assert status["failed_because"] == "spec_mismatch"
    records = [json.loads(line) for part in (tmp_path / "out" / "push_expert" / "parts").glob("*.jsonl")
               for line in part.read_text().splitlines()]
    # Only the episode in flight is recorded, as an error saying why (never counted as a failure); no other starts.
    assert [(r["episode"], r["status"], r["failure_code"]) for r in records] == [(0, "error", "spec_mismatch")]
    assert problem in records[0]["error"]


def test_an_action_of_the_declared_size_steps_as_before(tmp_path):
    result = evalfleet.evaluate(lambda observation: [0.0, 0.0, 0.0, 0.0], QUICKSTART, runs=["push_expert"],
                                workers=1, output=tmp_path / "out", log=lambda line: None,
                                overrides=["shared.rollout_limit.num_episodes=1",
                                           "runs.push_expert.environment.max_steps=5"])
    run = result.runs["push_expert"]
    assert run.status == "completed" and run.failures == 1
