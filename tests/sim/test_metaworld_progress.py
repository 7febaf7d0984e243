"""Meta-World Runs carry a progress signal of their own (Arena's shape) from each step's info: records,
experiment_result.json (mean and per-criterion fractions), the report's funnel and average_progress.png."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalfleet.sim.metaworld_spec import PROGRESS_CRITERIA, MetaworldProgress


def test_criteria_count_from_the_first_step_they_hold() -> None:
    tracker = MetaworldProgress()
    infos = [{"near_object": 0.0, "obj_to_target": 0.20, "success": 0.0},
             {"near_object": 1.0, "obj_to_target": 0.18, "success": 0.0},
             {"near_object": 0.0, "obj_to_target": 0.09, "success": 0.0},  # near_object stays met
             {"near_object": 1.0, "obj_to_target": 0.12, "success": 0.0}]
    for step, info in enumerate(infos, 1):
        progress = tracker.update(info, step)
    assert progress["events"] == [{"criterion": "near_object", "step": 2}, {"criterion": "halfway", "step": 3}]
    assert progress["criteria_by_name"]["success"] == {"complete": False, "step": None}
    assert progress["overall_score"] == pytest.approx(2 / 3) and progress["all_complete"] is False
    tracker.update({"near_object": 1.0, "obj_to_target": 0.01, "success": 1.0}, 5)
    assert progress["all_complete"] is True and progress["overall_score"] == 1.0
    assert MetaworldProgress().progress["overall_score"] == 0.0  # a new episode starts from nothing


@pytest.mark.slow
def test_metaworld_records_report_and_plot_carry_progress(tmp_path: Path, write_experiment) -> None:
    from PIL import Image

    from evalfleet.cli import main

    path = write_experiment({
        name: {"environment": {"type": "metaworld", "task": "push-v3"}, "policy": {"type": policy},
               "rollout_limit": {"num_episodes": 3}}
        for name, policy in (("push_expert", "metaworld_expert"), ("push_random", "random"))})
    out = tmp_path / "out"
    assert main(["run", str(path), "--output", str(out)]) == 0
    records = {run: [json.loads(x) for x in (out / run / "episode_results.jsonl").read_text().splitlines()]
               for run in ("push_expert", "push_random")}
    for run, recs in records.items():
        for rec in recs:
            progress = rec["progress"]
            assert set(progress["criteria_by_name"]) == set(PROGRESS_CRITERIA)
            steps = [e["step"] for e in progress["events"]]
            assert steps == sorted(steps) and all(1 <= s <= rec["episode_length"] for s in steps)
            assert progress["all_complete"] == (len(steps) == len(PROGRESS_CRITERIA))
            if rec["success"]:  # the episode ends at the step it succeeds
                assert progress["criteria_by_name"]["success"]["step"] == rec["episode_length"]
    result = json.loads((out / "experiment_result.json").read_text())
    runs = result["runs"] if isinstance(result["runs"], dict) else {r["run"]: r for r in result["runs"]}
    for run, recs in records.items():
        summary = runs[run]["progress"]
        mean = sum(r["progress"]["overall_score"] for r in recs) / len(recs)
        assert summary["mean"] == pytest.approx(mean) and summary["episodes"] == len(recs)
        for name in PROGRESS_CRITERIA:
            met = sum(r["progress"]["criteria_by_name"][name]["complete"] for r in recs) / len(recs)
            assert summary["criteria_fraction"][name] == pytest.approx(met)
    assert runs["push_expert"]["progress"]["mean"] > runs["push_random"]["progress"]["mean"]
    page = (out / "index.html").read_text()
    assert "Mean progress" in page and '<span class="criterion">halfway</span>' in page
    assert main(["plot", str(out)]) == 0
    image = Image.open(out / "plots" / "average_progress.png").convert("L")
    lo, hi = image.getextrema()
    assert hi - lo > 100
