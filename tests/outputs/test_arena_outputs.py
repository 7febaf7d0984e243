"""Arena workflow outputs become evalfleet records at collect: the report shows progress and every Run's
execution status, plot writes both PNGs, compare and sensitivity run (must-show 4 and 5)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from arena_output import CRITERIA, write_arena_run
from evalfleet.cli import main
from evalfleet.outputs.collect import collect

DATA = Path(__file__).resolve().parents[1] / "data" / "arena"
TASKS = {"banana_in_bowl": 0.7, "banana_on_plate": 0.4}


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


@pytest.fixture
def arena_workflow(tmp_path: Path) -> Path:
    """The output of robolab_2_tasks_pi0_and_cosmos.yaml's four Runs, two rebuilds each."""
    src = tmp_path / "workflow"
    src.mkdir()
    shutil.copy(DATA / "robolab_2_tasks_pi0_and_cosmos.yaml", src / "experiment.yaml")
    for k, (task, rate) in enumerate(TASKS.items()):
        for j, (policy, bonus) in enumerate((("pi0", 0.2), ("cosmos", 0.0))):
            write_arena_run(src, f"{task}_{policy}", episodes=40, rate=rate + bonus, task=task, policy=policy,
                            seed=10 * k + j, rebuilds=2)
    return src


def test_arena_records_become_evalfleet_records(arena_workflow: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = collect([str(arena_workflow)], str(out), report=True)
    run = result["runs"]["banana_in_bowl_pi0"]
    assert run["status"] == "completed" and run["episodes_recorded"] == 40 and run["planned_episodes"] == 40
    lines = [json.loads(x) for x in (out / "banana_in_bowl_pi0" / "episode_results.jsonl").read_text().splitlines()]
    assert [r["episode"] for r in lines] == list(range(40))  # rebuild 1 continues after rebuild 0
    first = lines[0]
    assert first["run"] == "banana_in_bowl_pi0" and first["task"] == "banana_in_bowl" and first["policy"] == "pi0"
    assert first["status"] in ("success", "failure") and first["seed"] == 1000
    assert set(first["variations"]) == {"light.hdr_image", "droid_abs_joint_pos.camera_extrinsics_wrist_camera"}
    assert set(first["progress"]["criteria_by_name"]) == set(CRITERIA)
    with_video = [r for r in lines if r.get("video")]
    assert len(with_video) == 4  # two per rebuild, matched by rebuild, env and episode-in-env
    for r in with_video:
        assert (out / "banana_in_bowl_pi0" / r["video"]["wrist_camera"]).is_file()
    successes = sum(r["success"] for r in lines)
    assert run["counts"]["success"] == successes


def test_report_plot_compare_and_sensitivity_work_on_arena_output(arena_workflow: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from PIL import Image

    out = tmp_path / "out"
    collect([str(arena_workflow)], str(out), report=True)
    page = (out / "index.html").read_text()
    assert 'id="progress"' in page and "Mean progress" in page
    for name in CRITERIA:
        assert f'<span class="criterion">{name}</span>' in page
    lines = [json.loads(x) for x in (out / "banana_in_bowl_cosmos" / "episode_results.jsonl").read_text().splitlines()]
    mean = sum(r["progress"]["overall_score"] for r in lines) / len(lines)
    assert f"{100 * mean:.1f}%" in page

    _cli(capsys, "plot", str(out))
    for png in ("success_rates.png", "average_progress.png"):
        path = out / "plots" / png
        assert path.stat().st_size > 5_000
        image = Image.open(path).convert("L")
        lo, hi = image.getextrema()
        assert hi - lo > 100, f"{png} is blank"
    data = json.loads((out / "plots" / "average_progress.json").read_text())
    assert data["kind"] == "average_progress"

    _cli(capsys, "compare", str(out), "--baseline", "cosmos")
    assert list((out / "plots").glob("compare_cosmos*.json"))
    _cli(capsys, "sensitivity", str(out), "--factors", "light.hdr_image",
         "droid_abs_joint_pos.camera_extrinsics_wrist_camera")
    assert list((out / "plots").glob("sensitivity*.png"))


def test_collect_reports_every_runs_execution_status_when_two_fail(tmp_path: Path) -> None:
    """Arena's failure-collection smoke experiment: two Runs succeed, one crashed (bad config: its task
    wrote run_status.json failed with the reason), one never started (nothing at all)."""
    src = tmp_path / "workflow"
    src.mkdir()
    shutil.copy(DATA / "osmo_failure_collection_smoke_experiment.yaml", src / "experiment.yaml")
    for i, run in enumerate(("expected_success_rubiks_cube", "expected_success_mustard_bottle")):
        write_arena_run(src, run, episodes=1, rate=1.0, task="pick_and_place_maple_table", policy="Pi0RemotePolicy",
                        seed=i, num_envs=1)
    crashed = src / "expected_failure_unknown_pick_up_object"
    crashed.mkdir()
    (crashed / "run_status.json").write_text(json.dumps({
        "run": crashed.name, "planned_episodes": 1, "state": "failed",
        "reason": "Arena's runner exited 1: KeyError: intentionally_missing_pick_up_object_for_osmo_smoke_test"}))
    out = tmp_path / "out"
    result = collect([str(src)], str(out), report=True)
    runs = result["runs"]
    assert list(sorted(runs)) == sorted([
        "expected_success_rubiks_cube", "expected_success_mustard_bottle",
        "expected_failure_unknown_pick_up_object", "expected_failure_unknown_policy_adapter"])
    assert runs["expected_success_rubiks_cube"]["status"] == "completed"
    assert runs["expected_success_mustard_bottle"]["status"] == "completed"
    assert runs["expected_failure_unknown_pick_up_object"]["status"] == "failed"
    assert "KeyError" in runs["expected_failure_unknown_pick_up_object"]["reason"]
    assert runs["expected_failure_unknown_policy_adapter"]["status"] == "failed"
    assert "never started" in runs["expected_failure_unknown_policy_adapter"]["reason"]
    assert sum(r["episodes_recorded"] for r in runs.values()) == 2
    assert result["summary"]["episodes"]["recorded"] == 2
    saved = json.loads((out / "experiment_result.json").read_text())
    assert saved["runs"]["expected_failure_unknown_policy_adapter"]["status"] == "failed"
    page = (out / "index.html").read_text()
    for name, r in runs.items():
        assert f'data-run="{name}" data-status="{r["status"]}"' in page
    assert "never started" in page and "KeyError" in page
