"""The checks behind the numbers (#55, must show 2): experiment_result.json's `trust`, `ExperimentResult.trust`,
and the report's Trust section in headless Chromium, on a real output: Meta-World's expert and zero policies on one
task (paired by seed, actions within bounds) and a Gymnasium task whose start is past its goal for some seeds
(success at reset: flagged)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from evalfleet_testkit import STARTS_AT_GOAL, starts_at_goal
from test_outputs_report_browser import open_report

from evalfleet.experiment.loading import load_experiment
from evalfleet.experiment.plan import make_plan
from evalfleet.outputs.finalize import finalize
from evalfleet.outputs.result import ExperimentResult
from evalfleet.rollout.runner import run_shards


def test_the_trust_section(chromium, tmp_path: Path) -> None:
    starts_at_goal()  # registers its Gymnasium id in this process: the runner runs here
    push = {"environment": {"type": "metaworld", "task": "push-v3", "max_steps": 40}, "rollout_limit":
            {"num_episodes": 3}}
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({"name": "trust", "runs": {
        "push_expert": {**push, "policy": {"type": "metaworld_expert"}, "policy_name": "expert"},
        "push_zero": {**push, "policy": {"type": "zero"}, "policy_name": "zero"},
        "line": {"environment": {"type": "gymnasium", "id": STARTS_AT_GOAL, "success": {"terminated": True},
                                 "max_steps": 40},
                 "policy": {"type": "random"}, "rollout_limit": {"num_episodes": 12}, "max_attempts": 1}}}))
    plan = make_plan(load_experiment(exp))
    out = tmp_path / "out"
    run_shards(plan.runs, plan.shards, out)
    done = finalize(out)
    result = json.loads((out / "experiment_result.json").read_text())
    outcomes = {c["check"]: c["outcome"] for c in result["trust"]}
    # `line` is flagged three times over: its errors (success at reset) leave it partial, and the random policy's
    # actions in [-1, 1] are mostly outside the env's [-0.1, 0.1]; the push Runs pass
    assert outcomes == {"protocol": "passed", "complete": "flagged", "errors": "flagged",
                        "success_at_reset": "flagged", "action_bounds": "flagged", "success_hold": "info",
                        "paired": "passed", "floors": "not_run", "determinism": "not_run"}, result["trust"]
    detail = {c["check"]: c["detail"] for c in result["trust"]}
    assert f"line {result['runs']['line']['success_at_reset']}" in detail["success_at_reset"]
    assert detail["complete"] == f"not completed: line ({result['runs']['line']['status']})"
    assert detail["action_bounds"].startswith("clipped on most steps: line ")
    assert detail["paired"] == "1 task, their Runs on the same seeds episode by episode"
    api = ExperimentResult.from_json("trust", out, done.result, report=out / "index.html")
    assert api.trust == result["trust"]

    context, page, seen = open_report(chromium, out / "index.html")
    try:
        assert page.locator("#trust-checks").is_visible()
        rows = page.eval_on_selector_all("#trust-checks tbody tr", """els => els.map(e => ({
            check: e.dataset.check, outcome: e.querySelector('.outcome').innerText.trim(),
            detail: e.querySelector('.detail').innerText, meaning: e.querySelector('.note').innerText}))""")
        assert [(r["check"], r["outcome"]) for r in rows] == [(c["check"], c["outcome"]) for c in result["trust"]]
        assert [r["detail"] for r in rows] == [c["detail"] for c in result["trust"]]
        assert all(r["meaning"] for r in rows)
        page.locator("#trust").screenshot(path=str(tmp_path / "trust.png"))
        assert not seen["pageerror"] and not seen["blocked"]
    finally:
        context.close()
