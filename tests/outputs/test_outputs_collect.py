"""collect(): merging shard logs, run statuses, experiment_result.json, copying, bad input; the CLI."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from outputs_helpers import record, write_jsonl, write_status

from evalfleet.analysis.stats import wilson_interval
from evalfleet.errors import UserError
from evalfleet.outputs.collect import collect
from evalfleet.rollout.run_folder import parse_record_lines
from evalfleet.rollout.records import RunRecords, RunScope
from evalfleet.outputs.finalize import write_report


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_parse_drops_torn_and_garbled_lines():
    data = b'{"episode": 0, "status": "success"}\nnot json\n\n{"episode": 1}\n{"episode": 2, "sta'
    parsed = parse_record_lines(data)
    assert [r["episode"] for r, _ in parsed] == [0, 1]
    assert parsed[1][1] == '{"episode": 1}'


def test_merge_keeps_latest_record_per_episode_sorted():
    first = [({"episode": 2, "timestamp": 5.0, "v": "old"}, "a"), ({"episode": 0, "timestamp": 1.0}, "b")]
    second = [({"episode": 2, "timestamp": 9.0, "v": "new"}, "c"), ({"episode": 1, "timestamp": 2.0}, "d"),
              ({"episode": 0, "timestamp": 1.0, "v": "same time, later line"}, "e")]

    def merge(*chunks):
        merged = RunRecords(RunScope("r"))
        for chunk in chunks:
            for rec, line in chunk:
                merged.add({**rec, "status": "success"}, line)  # a record without a valid status never counts
        return merged

    merged = merge(first, second)
    assert [r["episode"] for r in merged.records] == [0, 1, 2]
    assert merged.lines == ["e", "d", "c"]
    # An older record read later does not replace a newer one: it is a stale duplicate, set aside.
    merged = merge(second, first)
    assert merged.records[2]["v"] == "new"
    assert merged.set_aside.stale == 1


def test_collect_in_place(sample_output: Path):
    out = sample_output
    result = collect([str(out)], str(out))
    assert json.loads((out / "experiment_result.json").read_text()) == result

    merged = read_jsonl(out / "pick_expert" / "episode_results.jsonl")
    assert [r["episode"] for r in merged] == list(range(250))
    assert merged[7]["status"] == "failure" and merged[7]["attempt"] == 2  # the retry, not the error
    assert (out / "pick_expert" / "parts" / "shard-001.jsonl").exists()  # shard logs stay
    assert not [p for p in out.rglob(".tmp-*")]

    runs = result["runs"]
    a, b, c = runs["pick_expert"], runs["pick_random"], runs["drawer_random"]
    assert a["status"] == "completed" and a["reason"] is None
    assert a["counts"] == {"success": 50, "failure": 200, "error": 0, "missing": 0}
    assert a["success_rate"] == pytest.approx(0.2)
    assert a["ci95"] == pytest.approx(list(wilson_interval(50, 250)))
    assert a["videos"] == 2
    assert a["timings"]["total_duration_s"] == pytest.approx(sum(r["duration_s"] for r in merged))
    assert a["timings"]["first_timestamp"] == 1_700_000_000.0

    assert b["status"] == "partial"
    assert b["counts"] == {"success": 1, "failure": 4, "error": 1, "missing": 4}
    assert "4 of 10 planned episodes not run" in b["reason"] and "infrastructure error" in b["reason"]
    assert b["success_rate"] == pytest.approx(0.2)  # over decided episodes only

    assert c["status"] == "failed" and "never became healthy" in c["reason"]
    assert c["success_rate"] is None and c["ci95"] is None  # never 0
    assert (c["task"], c["policy"]) == ("drawer-open", "random")

    assert result["summary"]["runs_by_status"] == {"completed": 1, "partial": 1, "failed": 1}
    prov = result["provenance"]
    assert prov["experiment_sha256"] == hashlib.sha256((out / "experiment.yaml").read_bytes()).hexdigest()
    assert "numpy" in prov["packages"] and prov["python"] and prov["host"] and prov["evalfleet_version"]
    cells = {(c["task"], c["policy"]): c for c in result["matrix"]["cells"]}
    assert cells[("drawer-open", "random")]["status"] == "failed"
    assert cells[("pick-place", "expert")]["success_rate"] == pytest.approx(0.2)


def test_collect_in_place_twice_is_stable(sample_output: Path):
    collect([str(sample_output)], str(sample_output))
    first = (sample_output / "pick_expert" / "episode_results.jsonl").read_bytes()
    collect([str(sample_output)], str(sample_output))
    assert (sample_output / "pick_expert" / "episode_results.jsonl").read_bytes() == first


def test_collect_to_another_folder_copies_videos_plots_experiment(sample_output: Path, tmp_path: Path):
    dest = tmp_path / "collected"
    collect([str(sample_output)], str(dest), report=True)
    files = tree(dest)
    assert files["experiment.yaml"] == (sample_output / "experiment.yaml").read_bytes()
    assert files["plots/success_rates.png"] == (sample_output / "plots" / "success_rates.png").read_bytes()
    for e in (1, 3):
        name = f"pick_expert/videos/episode_{e:05d}_front.mp4"
        assert files[name] == (sample_output / name).read_bytes()
    assert not any("/parts/" in name for name in files)
    assert "index.html" in files
    assert json.loads(files["drawer_random/run_status.json"])["state"] == "failed"
    # Collecting again changes nothing but the creation time.
    collect([str(sample_output)], str(dest))
    again = tree(dest)
    assert again["pick_expert/episode_results.jsonl"] == files["pick_expert/episode_results.jsonl"]


def test_collect_merges_workers_outputs(tmp_path: Path):
    w1, w2 = tmp_path / "worker1", tmp_path / "worker2"
    write_jsonl(w1 / "run1" / "parts" / "w1.jsonl", [record("run1", e, "success") for e in range(0, 6, 2)])
    write_jsonl(w2 / "run1" / "parts" / "w2.jsonl", [record("run1", e, "failure") for e in range(1, 6, 2)])
    write_status(w1 / "run1", planned=6, state="completed")
    result = collect([str(w1), str(w2)], str(tmp_path / "all"))
    assert result["runs"]["run1"]["status"] == "completed"
    assert [r["status"] for r in read_jsonl(tmp_path / "all" / "run1" / "episode_results.jsonl")] == \
        ["success", "failure"] * 3


def test_only_errors_gives_null_rate(tmp_path: Path):
    write_jsonl(tmp_path / "r" / "parts" / "x.jsonl", [record("r", 0, "error"), record("r", 1, "error")])
    write_status(tmp_path / "r", planned=2, state="completed")
    run = collect([str(tmp_path)], str(tmp_path))["runs"]["r"]
    assert run["status"] == "partial" and run["success_rate"] is None and run["ci95"] is None


def test_run_without_status_file(tmp_path: Path):
    write_jsonl(tmp_path / "r" / "episode_results.jsonl", [record("r", e, "success") for e in range(3)])
    run = collect([str(tmp_path)], str(tmp_path))["runs"]["r"]
    assert run["status"] == "completed" and run["planned_episodes"] is None and run["notes"]


@pytest.mark.parametrize("make", ["missing", "empty", "file"])
def test_bad_sources_raise_user_error_and_write_nothing(tmp_path: Path, make: str):
    src = tmp_path / "src"
    if make == "empty":
        (src / "not_a_run").mkdir(parents=True)
    elif make == "file":
        src.write_text("x")
    dest = tmp_path / "dest"
    with pytest.raises(UserError) as err:
        collect([str(src)], str(dest))
    assert str(src) in err.value.line()
    assert not dest.exists()


def test_unknown_url_protocol(tmp_path: Path):
    with pytest.raises(UserError):
        collect([str(tmp_path)], "nosuchproto://bucket/x")


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evalfleet.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_cli_collect_and_report(sample_output: Path, tmp_path: Path):
    proc = run_cli("collect", str(sample_output), "--output", str(sample_output), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "1 completed, 1 partial, 1 failed" in proc.stdout
    assert "drawer_random: failed" in proc.stdout
    html = (sample_output / "index.html").read_text()
    os.remove(sample_output / "index.html")
    proc = run_cli("report", str(sample_output), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (sample_output / "index.html").read_text().split("<main>")[1].split("collected ")[0] == \
        html.split("<main>")[1].split("collected ")[0]


def test_cli_bad_input_exits_2_with_one_line(tmp_path: Path):
    proc = run_cli("collect", str(tmp_path / "nope"), "--output", str(tmp_path / "o"), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "does not exist" in proc.stderr
    assert not (tmp_path / "o").exists()
    proc = run_cli("report", str(tmp_path / "nope"), cwd=tmp_path)
    assert proc.returncode == 2 and "no such folder" in proc.stderr


def test_report_html_is_self_contained_and_marks_partial_failed(sample_output: Path):
    collect([str(sample_output)], str(sample_output))
    html = Path(write_report(sample_output)).read_text()
    # Nothing that a browser would fetch from the network; no external scripts, styles or fonts.
    assert not re.search(r'<(script|link|iframe)[^>]+(src|href)=', html)
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert "@import" not in html and "url(http" not in html
    rows = dict(re.findall(r'<tr data-run="([^"]+)" data-status="([^"]+)"', html))
    assert rows == {"drawer_random": "failed", "pick_expert": "completed", "pick_random": "partial"}
    failed_row = re.search(r'<tr data-run="drawer_random".*?</tr>', html).group(0)
    assert "never became healthy" in failed_row and "0.0%" not in failed_row and ">0%" not in failed_row
    partial_row = re.search(r'<tr data-run="pick_random".*?</tr>', html).group(0)
    assert "partial" in partial_row and "4 of 10 planned episodes not run" in partial_row
    assert 'src="plots/success_rates.png"' in html
    data = json.loads(re.search(r'<script type="application/json" id="episode-data">(.*?)</script>', html,
                                re.S).group(1))
    assert data["runs"] == ["pick_expert", "pick_random", "drawer_random"]  # the experiment.yaml order
    assert data["counts"] == [250, 6, 0] and data["total"] == 256 and data["auto"] is True
    # The episode tables are scripts beside the page, one per Run with episodes (none for drawer_random).
    assert data["files"] == ["report_episodes/0000.js", "report_episodes/0001.js", None]
    tables = []
    for i, rel in enumerate(data["files"][:2]):
        text = (sample_output / rel).read_text()
        prefix = f"(window.__evalfleet_episodes=window.__evalfleet_episodes||{{}})[{i}]="
        assert text.startswith(prefix) and text.endswith(";\n")
        tables.append(json.loads(text[len(prefix):-2]))
    assert [(t["run"], t["count"], len(t["st"])) for t in tables] == [("pick_expert", 250, 250), ("pick_random", 6, 6)]
    assert {v["key"] for v in tables[0]["vars"]} == {"cube.mass", "cube.position.x", "cube.position.y",
                                                      "cube.position.z", "table.texture"}
    assert tables[0]["video"][0][1] == {"front": "pick_expert/videos/episode_00001_front.mp4"}


def test_report_without_result_file(sample_output: Path):
    path = write_report(sample_output)  # not collected: summarises the shard logs, writes only index.html
    assert Path(path).exists() and not (sample_output / "experiment_result.json").exists()
    assert 'data-run="drawer_random" data-status="failed"' in Path(path).read_text()


def test_s3_without_credentials_is_one_clear_error(sample_output: Path, tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"), AWS_CONFIG_FILE=str(tmp_path / "none"),
               AWS_EC2_METADATA_DISABLED="true")
    proc = subprocess.run([sys.executable, "-m", "evalfleet.cli", "collect", str(sample_output), "--output",
                           "s3://bucket/prefix", "--s3-endpoint", "http://127.0.0.1:9"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "s3://bucket/prefix" in proc.stderr and "credentials" in proc.stderr
    assert proc.stderr.strip().count("\n") == 0


def test_collect_merges_same_run_from_task_folders_in_one_source(tmp_path: Path):
    # One folder per cluster task, each with its shard of the same Run.
    tasks = tmp_path / "tasks"
    for t in range(3):
        write_jsonl(tasks / f"task-{t}" / "run1" / "parts" / f"shard-{t}.jsonl",
                    [record("run1", e, "success", video={"cam": f"videos/e{e}.mp4"}) for e in range(t, 9, 3)])
        for e in range(t, 9, 3):
            (tasks / f"task-{t}" / "run1" / "videos").mkdir(parents=True, exist_ok=True)
            (tasks / f"task-{t}" / "run1" / "videos" / f"e{e}.mp4").write_bytes(b"v%d" % e)
    write_status(tasks / "task-0" / "run1", planned=9, state="completed")
    result = collect([str(tasks)], str(tmp_path / "out"))
    assert result["runs"]["run1"]["status"] == "completed"
    assert [r["episode"] for r in read_jsonl(tmp_path / "out" / "run1" / "episode_results.jsonl")] == list(range(9))
    assert sorted(p.name for p in (tmp_path / "out" / "run1" / "videos").iterdir()) == [f"e{e}.mp4" for e in range(9)]


def test_a_problem_in_the_last_run_leaves_the_output_as_it_was(tmp_path: Path):
    """Collect streams the Runs one at a time, but stages what it makes: a UserError found in the last Run read
    (here a run_status.json that is not JSON) leaves a new output unmade and an output collected in place
    untouched, the first Runs' merged files included."""
    src = tmp_path / "src"
    for run in ("a_run", "b_run"):
        write_jsonl(src / run / "parts" / "s.jsonl", [record(run, e, "success") for e in range(3)])
        write_status(src / run, planned=3, state="completed")
    (src / "b_run" / "run_status.json").write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON") as err:
        collect([str(src)], str(tmp_path / "out"), report=True)
    assert "b_run" in err.value.where and "run_status.json" in err.value.where
    assert not (tmp_path / "out").exists()
    before = tree(src)
    with pytest.raises(UserError, match="not valid JSON"):
        collect([str(src)], str(src), report=True)
    assert tree(src) == before
    assert [p.name for p in tmp_path.iterdir()] == ["src"]  # no staging folder left beside it
