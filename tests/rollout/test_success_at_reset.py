"""Success at reset (#55): a Gymnasium task whose start already meets its success for some seeds. Those episodes
are marked in their records (`success_at_reset`, an `error` with code success_at_reset, so the rate leaves them
out) and the Run says how many on every surface: experiment_result.json, its notes and the report."""

from __future__ import annotations

import json

import yaml
from evalfleet_testkit import STARTS_AT_GOAL, starts_at_goal

from evalfleet.experiment.loading import load_experiment
from evalfleet.experiment.plan import make_plan
from evalfleet.outputs.finalize import finalize
from evalfleet.rollout.records import latest_records
from evalfleet.rollout.runner import run_shards


def test_episodes_that_start_at_success_are_marked_and_left_out_of_the_rate(tmp_path) -> None:
    starts_at_goal()  # registers its id in this process
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({"name": "at_reset", "runs": {"line": {
        "environment": {"type": "gymnasium", "id": STARTS_AT_GOAL, "success": {"terminated": True}, "max_steps": 40},
        "policy": {"type": "random"}, "rollout_limit": {"num_episodes": 24}, "max_attempts": 2}}}))
    plan = make_plan(load_experiment(exp))
    out = tmp_path / "out"
    run_shards(plan.runs, plan.shards, out)
    records = latest_records(out, "line")
    starts = {}
    for episode, seed in ((e, plan.runs["line"].episode(e).seed) for e in range(24)):
        env = starts_at_goal()
        starts[episode] = env.reset(seed=seed)[0][0]
    surely = {e for e, x in starts.items() if x >= 3.1}  # past the goal by more than one step can undo
    maybe = {e for e, x in starts.items() if x >= 2.9}  # within one step of it
    marked = {e for e, r in records.items() if r.get("success_at_reset")}
    assert surely and surely <= marked <= maybe and len(marked) < 24
    for e in marked:
        r = records[e]
        assert (r["status"], r["success"], r["failure_code"], r["attempt"]) == ("error", None, "success_at_reset", 2)
        assert r["episode_length"] == 1
    finalize(out)
    summary = json.loads((out / "experiment_result.json").read_text())["runs"]["line"]
    decided = [r for e, r in records.items() if e not in marked]
    assert summary["success_at_reset"] == len(marked)
    assert summary["decided"] == len(decided) and summary["counts"]["success"] == sum(r["success"] for r in decided)
    assert any("success at reset" in n for n in summary["notes"])
    assert f"{len(marked)} episodes already met the task&#x27;s success after the first step" in \
        (out / "index.html").read_text()
