"""rollout.run_folder: the one reader of a Run folder that collect and the analyses share."""

from __future__ import annotations

import pytest

from evalfleet.errors import UserError
from evalfleet.outputs.storage import open_location
from evalfleet.rollout.records import iter_record_dicts
from evalfleet.rollout.run_folder import merge_statuses, parse_record_lines, read_status, run_files


def test_record_files_in_order_for_collect_and_for_the_analyses():
    arena = run_files(["episode_results_rebuild10.jsonl", "episode_results_rebuild2.jsonl", "episode_results_x.jsonl",
                       "notes.txt", "a.mp4"], ["s1.jsonl", "s0.jsonl", "s0.log"])
    assert arena.is_run and not arena.merged
    assert arena.collected() == ["parts/s0.jsonl", "parts/s1.jsonl"]
    assert arena.arena_files() == ["episode_results_rebuild2.jsonl", "episode_results_rebuild10.jsonl"]  # Arena's order
    assert arena.analysed() == ["episode_results_rebuild10.jsonl", "episode_results_rebuild2.jsonl",
                                "episode_results_x.jsonl"]  # by name; parts are not read beside them

    collected = run_files(["episode_results.jsonl", "episode_results_rebuild0.jsonl"], ["s0.jsonl"])
    assert collected.collected() == ["episode_results.jsonl", "parts/s0.jsonl"]
    assert collected.arena_files() == []  # the collected file already holds what Arena's held
    assert run_files([], ["s0.jsonl"]).analysed() == ["parts/s0.jsonl"]
    assert not run_files(["episode_results_x.jsonl", "notes.txt"]).is_run
    assert run_files([], status=True).is_run


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
