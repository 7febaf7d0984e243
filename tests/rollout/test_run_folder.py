"""rollout.run_folder: the one reader of a Run folder that collect and the analyses share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalfleet.analysis.loading import load_records
from evalfleet.errors import UserError
from evalfleet.outputs.collect import collect_runs
from evalfleet.outputs.storage import open_location
from evalfleet.rollout.records import iter_record_dicts
from evalfleet.rollout.run_folder import merge_statuses, parse_record_lines, read_status, run_files


def test_record_files_in_order():
    arena = run_files(["episode_results_rebuild10.jsonl", "episode_results_rebuild2.jsonl", "episode_results_x.jsonl",
                       "notes.txt", "a.mp4"], ["s1.jsonl", "s0.jsonl", "s0.log"])
    assert arena.is_run and not arena.merged and not arena.status
    assert arena.collected() == ["parts/s0.jsonl", "parts/s1.jsonl"]
    # Arena's order; a name outside Arena's pattern is not Arena's
    assert arena.arena_files() == ["episode_results_rebuild2.jsonl", "episode_results_rebuild10.jsonl"]

    collected = run_files(["episode_results.jsonl", "episode_results_rebuild0.jsonl", "run_status.json"], ["s0.jsonl"])
    assert collected.collected() == ["episode_results.jsonl", "parts/s0.jsonl"] and collected.status
    assert collected.arena_files() == []  # the collected file already holds what Arena's held
    assert not run_files(["episode_results_x.jsonl", "notes.txt"]).is_run
    assert run_files([], status=True).is_run


def _arena_and_merged_folders(root: Path) -> None:
    """Run `arena`: Arena's rebuild2 and rebuild10 files (each numbered from 0 by global_episode_index, lines out of
    order); Run `merged`: a collected file and parts written after it (a resumed shard)."""
    arena = root / "arena"
    arena.mkdir(parents=True)
    for rebuild, outcomes in ((10, [False, True, True]), (2, [True, False])):
        lines = [{"job_name": "arena", "rebuild_idx": rebuild, "global_episode_index": i, "env_id": i % 2,
                  "episode_in_env": i // 2, "success": ok} for i, ok in enumerate(outcomes)]
        (arena / f"episode_results_rebuild{rebuild}.jsonl").write_text(
            "".join(json.dumps(x) + "\n" for x in reversed(lines)))
    (arena / "run_status.json").write_text(json.dumps({"run": "arena", "task": "t", "policy": "p",
                                                       "planned_episodes": 5, "state": "completed"}))
    merged = root / "merged"
    (merged / "parts").mkdir(parents=True)

    def line(ep: int, status: str, attempt: int = 1, timestamp: float = 1.0) -> str:
        return json.dumps({"run": "merged", "task": "t", "policy": "p", "episode": ep, "status": status,
                           "success": status == "success", "attempt": attempt, "timestamp": timestamp}) + "\n"

    (merged / "episode_results.jsonl").write_text(line(0, "success", 2) + line(1, "failure"))
    (merged / "parts" / "s0.jsonl").write_text(line(0, "failure") + line(1, "success", timestamp=2.0)
                                               + line(2, "success"))


def test_collect_and_the_analyses_give_the_same_episodes(tmp_path):
    _arena_and_merged_folders(tmp_path / "src")
    collected = collect_runs([str(tmp_path / "src")], str(tmp_path / "out"))
    by_collect = {(run.name, r["episode"]): r["status"] for run in collected.runs for r in run.records}
    by_analyses = {(r["run"], r["episode"]): r["status"] for r in load_records([tmp_path / "src"]).records}
    assert by_collect == by_analyses == {
        ("arena", 0): "success", ("arena", 1): "failure",  # rebuild2 first (Arena's order), then rebuild10
        ("arena", 2): "failure", ("arena", 3): "success", ("arena", 4): "success",
        ("merged", 0): "success", ("merged", 1): "success", ("merged", 2): "success"}
    # and the collected folder reads back the same
    again = {(r["run"], r["episode"]): r["status"] for r in load_records([tmp_path / "out"]).records}
    assert again == by_collect


@pytest.mark.parametrize("planned", [-1, "3", 2.5, True])
def test_a_bad_planned_episodes_is_refused_by_collect_and_the_analyses(tmp_path, planned):
    _arena_and_merged_folders(tmp_path / "src")
    (tmp_path / "src" / "arena" / "run_status.json").write_text(json.dumps({"run": "arena",
                                                                           "planned_episodes": planned}))
    for read in (lambda: collect_runs([str(tmp_path / "src")], str(tmp_path / "out")),
                 lambda: load_records([tmp_path / "src"])):
        with pytest.raises(UserError) as err:
            read()
        assert err.value.key == "planned_episodes" and err.value.where.endswith("arena/run_status.json")
    assert not (tmp_path / "out").exists()  # nothing written


def test_parse_record_lines_drops_a_torn_last_line_and_garbled_lines(tmp_path):
    data = b'{"episode": 0}\r\n\n[1]\nnot json\n{"episode": 1, "attempt": "x"}\n{"episode": 2'
    assert [rec for rec, _ in parse_record_lines(data)] == [{"episode": 0}, {"episode": 1, "attempt": "x"}]
    path = tmp_path / "s.jsonl"
    path.write_bytes(data)
    assert list(iter_record_dicts(path)) == [{"episode": 0}]  # the runner's reads also want a numeric attempt
    assert list(iter_record_dicts(tmp_path / "missing.jsonl")) == []


def test_statuses_merge_and_a_bad_one_names_its_file(tmp_path):
    merged = merge_statuses([{"state": "completed", "planned_episodes": 4, "reason": "a"},
                             {"state": "failed", "planned_episodes": 6, "reason": "b"},
                             {"state": "completed", "reason": "a"}])
    assert (merged["state"], merged["planned_episodes"], merged["reason"]) == ("failed", 6, "a; b")
    assert merge_statuses([]) is None
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "run_status.json").write_text("{oops")
    with pytest.raises(UserError) as err:
        read_status(open_location(str(tmp_path)), "r/run_status.json")
    assert "not valid JSON" in err.value.message and "run_status.json" in err.value.line()
