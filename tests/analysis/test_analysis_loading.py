"""The analyses' record loader: folders, parts, archives, Arena files, dedup, torn lines, errors excluded."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from analysis_synth import write_arena_run
from evalfleet.analysis.loading import load_records
from evalfleet.errors import UserError
from evalfleet.rollout.records import EpisodeRecord, RecordWriter


def rec(run: str, episode: int, status: str, **kw) -> EpisodeRecord:
    return EpisodeRecord(run=run, task=kw.pop("task", "t"), policy=kw.pop("policy", "p"), episode=episode,
                         seed=episode, status=status, success=None if status == "error" else status == "success",
                         episode_length=10, duration_s=0.1, **kw)


def test_output_folder_recursive_and_errors_excluded(evalfleet_output: Path) -> None:
    rs = load_records([evalfleet_output])
    assert rs.runs == ["drawer_open_expert", "drawer_open_noisy", "pick_place_expert", "pick_place_noisy"]
    assert len(rs.records) == 4 * 120
    assert rs.n_errors == 4 * 3
    assert len(rs.rated) == 4 * 117 and all(r["status"] != "error" for r in rs.rated)


def test_parts_and_merged_file_merge_as_collect_merges_them(tmp_path: Path) -> None:
    with RecordWriter(tmp_path / "run_a" / "parts" / "shard0.jsonl", fsync=False) as w:
        w.append(rec("run_a", 0, "success"))
        w.append(rec("run_a", 1, "error"))
    with RecordWriter(tmp_path / "run_a" / "parts" / "shard1.jsonl", fsync=False) as w:
        w.append(rec("run_a", 1, "failure", attempt=2))  # the retry wins over the error
    # run_b was collected (its merged file holds the retry), then resumed: its parts are read beside the merged
    # file, as collect reads them; the older attempt is stale, the episode written after the collect counts
    with RecordWriter(tmp_path / "run_b" / "episode_results.jsonl", fsync=False) as w:
        w.append(rec("run_b", 0, "success", attempt=2))
    with RecordWriter(tmp_path / "run_b" / "parts" / "shard0.jsonl", fsync=False) as w:
        w.append(rec("run_b", 0, "failure"))
        w.append(rec("run_b", 7, "failure"))
    rs = load_records([tmp_path])
    got = {(r["run"], r["episode"]): r["status"] for r in rs.records}
    assert got == {("run_a", 0): "success", ("run_a", 1): "failure", ("run_b", 0): "success",
                   ("run_b", 7): "failure"}
    assert rs.set_aside.stale == 1


def test_torn_last_line_and_duplicates(tmp_path: Path) -> None:
    path = tmp_path / "r" / "episode_results.jsonl"
    with RecordWriter(path, fsync=False) as w:
        w.append(rec("r", 0, "failure"))
        w.append(rec("r", 0, "success"))  # later complete line wins
        w.append(rec("r", 1, "success"))
    with open(path, "a") as f:
        f.write('{"run": "r", "episode": 2, "status": "succ')  # crash mid-write
    rs = load_records([path])
    assert [(r["episode"], r["status"]) for r in rs.records] == [(0, "success"), (1, "success")]


def test_arena_files_tar_and_single_file(tmp_path: Path) -> None:
    src = tmp_path / "download"
    write_arena_run(src, "banana_in_bowl_pi0", [True, False, True, True, False], num_envs=2)
    # a rebuilt env starts a new file whose env ids start again: still different episodes
    write_arena_run(src, "banana_in_bowl_pi0", [False, False], num_envs=2, file_name="episode_results_rebuild1.jsonl")
    write_arena_run(src, "apple_cosmos", [True], with_job_name=False)
    rs = load_records([src])
    by_run = {}
    for r in rs.records:
        by_run.setdefault(r["run"], []).append(r["status"])
    assert by_run == {"apple_cosmos": ["success"],
                      "banana_in_bowl_pi0": ["success", "failure", "success", "success",
                                             "failure", "failure", "failure"]}

    archive = tmp_path / "download.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src, arcname="download")
    from_tar = load_records([archive])
    assert [(r["run"], r["status"]) for r in from_tar.records] == [(r["run"], r["status"]) for r in rs.records]
    # an archive found inside a folder counts too
    other = tmp_path / "holder"
    other.mkdir()
    (other / "results.tar").write_bytes(b"")
    with tarfile.open(other / "results.tar", "w") as tar:
        tar.add(src, arcname="x")
    assert len(load_records([other]).records) == len(rs.records)

    single = load_records([src / "banana_in_bowl_pi0" / "episode_results_rebuild0.jsonl"])
    assert [r["run"] for r in single.records] == ["banana_in_bowl_pi0"] * 5


def test_status_derived_from_success_and_null_is_error(tmp_path: Path) -> None:
    path = tmp_path / "x" / "episode_results.jsonl"
    path.parent.mkdir()
    lines = [{"job_name": "x", "env_id": 0, "episode_in_env": 0, "success": True},
             {"job_name": "x", "env_id": 0, "episode_in_env": 1, "success": False},
             {"job_name": "x", "env_id": 0, "episode_in_env": 2, "success": None}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    rs = load_records([path])
    assert [r["status"] for r in rs.records] == ["success", "failure", "error"]
    assert len(rs.rated) == 2


def test_empty_and_missing_inputs(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("hi")
    with pytest.raises(UserError, match="no episode records found"):
        load_records([tmp_path / "empty"])
    with pytest.raises(UserError, match="no such file or folder"):
        load_records([tmp_path / "nope"])
    bad = tmp_path / "broken.tar.gz"
    bad.write_bytes(b"not a tar")
    with pytest.raises(UserError, match="cannot read archive"):
        load_records([bad])
