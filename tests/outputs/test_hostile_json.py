"""JSON in an output folder that its run did not write sanely (issue #52, findings 7 and 9): nesting deeper than
`bounded_json.MAX_DEPTH` in a record line, run_status.json or experiment_metadata.json, and a run_status.json
planning 10**18 episodes. `report` and `collect` (real processes) skip what they skip and refuse what they refuse
with one line, never a traceback nor a loop over the plan; `watch`'s follower starts and its refresh thread goes on
reading."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from outputs_helpers import record, write_jsonl, write_status

from evalfleet.bounded_json import MAX_DEPTH
from evalfleet.outputs.live_server import LiveReport
from evalfleet.outputs.storage import open_location

DEEP = "[" * 100_000 + "]" * 100_000  # past the parser's recursion limit
JUST_TOO_DEEP = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)  # parses, but nests one level past the bound


def make_output(root: Path) -> Path:
    """Run `a`: 4 planned episodes, all recorded; metadata of a finished run."""
    (root / "experiment.yaml").parent.mkdir(parents=True, exist_ok=True)
    (root / "experiment.yaml").write_text("name: exp\nruns:\n  a:\n    rollout_limit: {num_episodes: 4}\n")
    write_jsonl(root / "a" / "parts" / "shard-000.jsonl", [record("a", e, "success") for e in range(4)])
    write_status(root / "a", planned=4, state="completed")
    (root / "experiment_metadata.json").write_text(json.dumps({"status": "finished"}))
    return root


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    # timeout: a guard only (a loop over a huge plan must fail the test, not hang it)
    return subprocess.run([sys.executable, "-m", "evalfleet.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)


def collected(out: Path, cwd: Path) -> dict:
    proc = cli("collect", str(out), "--output", str(cwd / "collected"), cwd=cwd)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return json.loads((cwd / "collected" / "experiment_result.json").read_text())


def one_line_refusal(proc: subprocess.CompletedProcess, *parts: str) -> None:
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    for part in parts:
        assert part in proc.stderr, proc.stderr


@pytest.mark.parametrize("nested", [DEEP, JUST_TOO_DEEP], ids=["100000-deep", "65-deep"])
def test_a_deeply_nested_record_line_is_skipped_by_collect_and_report(nested: str, tmp_path: Path) -> None:
    out = make_output(tmp_path / "out")
    with open(out / "a" / "parts" / "shard-000.jsonl", "a") as f:
        f.write(json.dumps(record("a", 3, "failure", attempt=2))[:-1] + f', "variations": {nested}}}\n')
    run = collected(out, tmp_path)["runs"]["a"]
    assert run["counts"]["success"] == 4 and run["counts"]["failure"] == 0 and run["status"] == "completed"
    proc = cli("report", str(out), cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("command", ["collect", "report"])
def test_a_deeply_nested_run_status_is_refused_naming_it(command: str, tmp_path: Path) -> None:
    out = make_output(tmp_path / "out")
    (out / "a" / "run_status.json").write_text('{"planned_episodes": 4, "x": ' + DEEP + "}")
    args = ["--output", str(tmp_path / "collected")] if command == "collect" else []
    one_line_refusal(cli(command, str(out), *args, cwd=tmp_path), "run_status.json", f"more than {MAX_DEPTH} levels")


def test_a_deeply_nested_metadata_file_is_skipped_and_listed(tmp_path: Path) -> None:
    out = make_output(tmp_path / "out")
    (out / "experiment_metadata.json").write_text('{"status": ' + DEEP + "}")
    result = collected(out, tmp_path)
    assert result["runs"]["a"]["counts"]["success"] == 4
    assert [s for s in result["skipped_files"] if s["path"].endswith("experiment_metadata.json")
            and f"more than {MAX_DEPTH} levels" in s["why"]]


@pytest.mark.parametrize("command", ["collect", "report"])
def test_a_plan_of_10_to_the_18_episodes_is_refused_naming_the_key(command: str, tmp_path: Path) -> None:
    out = make_output(tmp_path / "out")
    write_status(out / "a", planned=10**18, state="running")
    args = ["--output", str(tmp_path / "collected")] if command == "collect" else []
    one_line_refusal(cli(command, str(out), *args, cwd=tmp_path), "run_status.json", "planned_episodes",
                     "1,000,000,000")


def test_a_plan_of_a_billion_episodes_counts_the_missing_from_the_records(tmp_path: Path) -> None:
    out = make_output(tmp_path / "out")
    write_status(out / "a", planned=10**9, state="running")
    run = collected(out, tmp_path)["runs"]["a"]
    assert run["status"] == "partial" and f"{10**9 - 4} of {10**9} planned episodes not run" in run["reason"]


def test_watch_starts_and_its_refresh_thread_reads_on_past_deep_json(tmp_path: Path) -> None:
    out = make_output(tmp_path / "out")
    (out / "experiment_metadata.json").write_text('{"status": ' + DEEP + "}")  # at start
    live = LiveReport(open_location(str(out)), title="t", refresh_s=0.02)
    assert live.view["runs"][0]["done"] == 4
    thread = threading.Thread(target=live.follow, daemon=True)
    thread.start()
    try:
        version = live.view["version"]
        with open(out / "a" / "parts" / "shard-000.jsonl", "a") as f:  # while it follows
            f.write('{"run": "a", "episode": 0, "status": "success", "x": ' + DEEP + "}\n")
        (out / "a" / "run_status.json").write_text('{"planned_episodes": 4, "x": ' + DEEP + "}")
        write_jsonl(out / "a" / "parts" / "shard-001.jsonl", [record("a", 3, "failure", attempt=2)])
        view = live.wait_change(version, timeout=60)  # a dead thread never changes the view
        while view["runs"][0]["counts"]["failure"] != 1 and thread.is_alive():
            view = live.wait_change(view["version"], timeout=60)
        assert thread.is_alive() and view["runs"][0]["counts"] == {"success": 3, "failure": 1, "error": 0}
    finally:
        live.stop()
        thread.join(10)
