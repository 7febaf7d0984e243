"""Records that do not belong to a planned episode of a Run never change its counts, and the runner, collect,
resume bookkeeping, progress and analysis agree on the same folder (one rule: records.RunRecords)."""

from __future__ import annotations

import json
from pathlib import Path

from evalfleet.analysis.loading import load_records
from evalfleet.execution.progress import ProgressTracker
from evalfleet.outputs.collect import collect
from evalfleet.outputs.finalize import write_report
from evalfleet.rollout.records import latest_records


def rec(run: str, episode, status: str, *, ts: float, attempt: int = 1) -> dict:
    return {"run": run, "task": "push-v3", "policy": "expert", "episode": episode, "seed": 7, "status": status,
            "success": status == "success", "episode_length": 10, "duration_s": 0.1, "attempt": attempt,
            "timestamp": ts}


def write_folder(root: Path) -> Path:
    """Run `a` plans 4 episodes: 1 success and 3 failures. Its logs also hold hostile lines."""
    run_dir = root / "a"
    (run_dir / "parts").mkdir(parents=True)
    honest = [rec("a", 0, "success", ts=10), rec("a", 1, "failure", ts=11), rec("a", 2, "failure", ts=12),
              rec("a", 3, "error", ts=13), rec("a", 3, "failure", ts=14, attempt=2)]
    hostile = [
        rec("b", 0, "success", ts=20), rec("b", 1, "success", ts=21),  # another Run's records
        rec("a", 99, "success", ts=22), rec("a", -1, "success", ts=23), rec("a", True, "success", ts=24),
        rec("a", "2", "success", ts=25),  # episodes outside the plan (True is not 1, "2" is not 2)
        rec("a", 1, "success", ts=5),  # a stale duplicate: written later, older than what it would replace
    ]
    (run_dir / "parts" / "000000.jsonl").write_text("".join(json.dumps(r) + "\n" for r in honest))
    (run_dir / "parts" / "zz-late.jsonl").write_text("".join(json.dumps(r) + "\n" for r in hostile))
    (run_dir / "run_status.json").write_text(json.dumps({"run": "a", "task": "push-v3", "policy": "expert",
                                                         "planned_episodes": 4, "state": "completed"}))
    return root


def test_foreign_out_of_plan_and_stale_records_never_count(tmp_path):
    out = write_folder(tmp_path / "out")

    # the runner (what resume runs next) and finish_runs: four decided episodes, the honest ones
    runner_view = latest_records(out, "a", 4)
    assert {ep: r["status"] for ep, r in runner_view.items()} == {0: "success", 1: "failure", 2: "failure",
                                                                  3: "failure"}
    # progress
    tracker = ProgressTracker(out, {"a": (4, 3)})
    tracker.poll()
    assert tracker.done("a") == 4 and sum(tracker.runs["a"].successes.values()) == 1

    # analysis, before collect (it reads the parts)
    analysed = load_records([out])
    assert [(r["run"], r["episode"], r["status"]) for r in analysed.records] == [
        ("a", 0, "success"), ("a", 1, "failure"), ("a", 2, "failure"), ("a", 3, "failure")]
    assert analysed.set_aside.total == 7

    # collect: the same counts, and it says what it set aside and where
    result = collect([str(out)], str(out))
    run = result["runs"]["a"]
    assert run["counts"] == {"success": 1, "failure": 3, "error": 0, "missing": 0}
    assert run["success_rate"] == 0.25 and run["status"] == "completed"
    assert run["set_aside"]["foreign"] == 2 and run["set_aside"]["out_of_plan"] == 4
    assert run["set_aside"]["stale"] == 1 and run["set_aside"]["total"] == 7
    assert list(run["set_aside"]["sources"]) == [str(out / "a" / "parts" / "zz-late.jsonl")]
    assert result["summary"]["episodes"]["set_aside"] == 7
    assert [json.loads(line)["episode"] for line in (out / "a" / "episode_results.jsonl").read_text().splitlines()] \
        == [0, 1, 2, 3]

    # analysis after collect agrees, and the report says how many were set aside
    assert [(r["episode"], r["status"]) for r in load_records([out]).records] == \
        [(r["episode"], r["status"]) for r in analysed.records]
    html = Path(write_report(out)).read_text()
    assert "7 record(s) set aside, not counted: 2 of another Run, 4 outside the plan, 1 stale duplicate(s)" in html


def test_an_honest_folder_sets_nothing_aside(tmp_path):
    out = tmp_path / "out"
    write_folder(out)
    (out / "a" / "parts" / "zz-late.jsonl").unlink()
    result = collect([str(out)], str(out))
    assert result["runs"]["a"]["set_aside"]["total"] == 0
    assert "set aside" not in Path(write_report(out)).read_text()


def test_a_record_without_a_valid_status_is_set_aside_and_no_number_is_written_as_nan(tmp_path):
    """#52, finding 13: a record whose `status` is a list crashed collect (the report's episode table hashed it);
    a NaN duration or an infinite timestamp reached experiment_result.json as `NaN`, which JSON does not have."""
    run_dir = tmp_path / "src" / "a" / "parts"
    run_dir.mkdir(parents=True)
    good = rec("a", 0, "success", ts=10)
    odd = [{**rec("a", 1, "success", ts=11), "status": status} for status in (["success"], {"s": 1}, 3, "won")]
    nan = {**rec("a", 2, "failure", ts=12), "duration_s": float("nan"), "timestamp": float("inf")}
    (run_dir / "0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [good, *odd, nan]))
    collect([str(tmp_path / "src")], str(tmp_path / "out"), report=True)

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} in experiment_result.json")

    result = json.loads((tmp_path / "out" / "experiment_result.json").read_text(), parse_constant=refuse)
    run = result["runs"]["a"]
    assert run["counts"]["success"] == 1 and run["counts"]["failure"] == 1
    assert run["set_aside"]["malformed"] == 4 and run["set_aside"]["total"] == 4
    assert run["timings"]["total_duration_s"] == 0.1  # the NaN duration is not summed
    assert (tmp_path / "out" / "index.html").exists()
    assert sorted(latest_records(tmp_path / "src", "a")) == [0, 2]  # the runner's view: the same rule
