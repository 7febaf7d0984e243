"""Collect reads the second half of a large Experiment's Runs in a forked child (`collect.stream_runs`): the
output is the one collect writes reading every Run itself, byte for byte (but for when and where it was made);
a child that fails leaves its Runs to the parent; an error in a Run of the second half is the same error, with
nothing written; a link out of a Run folder the child reads is skipped, logged and listed as before. Each collect
runs in a fresh Python (single-threaded, as `evalfleet run` and `evalfleet collect` are), with the size from which
it forks set to 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from evalfleet_testkit import COUNT_FORKS

SCRIPT = """
import json, logging, os, sys, threading
import evalfleet.outputs.collect as collect
from evalfleet.errors import UserError
src, out, mode = sys.argv[1], sys.argv[2], sys.argv[3]
collect.SPLIT_BYTES = 0
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
parent = os.getpid()
if mode == "thread":  # another thread alive: nothing is forked, every Run is read here
    threading.Thread(target=threading.Event().wait, daemon=True).start()
if mode == "child_fails":  # the child's work fails (only there): the parent reads its Runs
    digest = collect.digest_run
    def failing(run, dest=None):
        if os.getpid() != parent:
            raise RuntimeError("the child's digest failed")
        return digest(run, dest)
    collect.digest_run = failing
try:
    collect.collect([src], out, report=True)
    error = None
except UserError as exc:
    error = exc.line()
print(json.dumps({"forks": len(forks), "error": error}))
"""


def make_source(root: Path, runs: int = 6, episodes: int = 40) -> Path:
    """Run folders as workers leave them: two part files each, an error retried, a progress, a failure code."""
    for r in range(runs):
        run = root / f"task{r}_policy{r % 2}"
        (run / "parts").mkdir(parents=True)
        for part in range(2):
            with open(run / "parts" / f"{part:06d}.jsonl", "w") as f:
                for e in range(part, episodes, 2):
                    status = "success" if (e * 7 + r) % 3 else "failure"
                    rec = {"run": run.name, "task": f"task{r}", "policy": f"policy{r % 2}", "episode": e,
                           "seed": 1000 * r + e, "status": status, "success": status == "success",
                           "episode_length": 10 + e, "duration_s": 0.5, "attempt": 1, "timestamp": 1.7e9 + e,
                           "variations": {"object.mass": (e % 5) / 5}, "progress": {"overall_score": (e % 4) / 4},
                           "failure_code": None if status == "success" else "never_reached"}
                    if e == 3:  # an infrastructure error first, then its retry
                        f.write(json.dumps({**rec, "status": "error", "success": None, "error": "lost",
                                            "failure_code": "policy_error", "timestamp": 1.6e9}) + "\n")
                        rec["attempt"] = 2
                    f.write(json.dumps(rec) + "\n")
        (run / "run_status.json").write_text(json.dumps({"run": run.name, "state": "completed",
                                                         "planned_episodes": episodes}))
    return root


def collect_in(src: Path, out: Path, mode: str) -> tuple[dict, str]:
    proc = subprocess.run([sys.executable, "-c", COUNT_FORKS + SCRIPT, str(src), str(out), mode], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def files(out: Path, name: str) -> dict[str, bytes]:
    """Every file collect wrote, with what differs by design (the output's own name, when it was made) made equal."""
    got = {}
    for path in sorted(out.rglob("*")):
        if path.is_file():
            data = path.read_bytes().replace(str(out).encode(), b"OUT").replace(name.encode(), b"OUT")
            if path.name in ("experiment_result.json", "index.html"):
                data = b"\n".join(line for line in data.split(b"\n")
                                   if b'"created"' not in line and b'id="provenance"' not in line)
            got[str(path.relative_to(out))] = data
    return got


def test_the_second_half_read_in_a_child_writes_what_reading_every_run_here_writes(tmp_path):
    source = make_source(tmp_path / "source")
    outputs = {}
    for mode in ("forked", "thread", "child_fails"):
        got, _ = collect_in(source, tmp_path / mode, mode)
        assert got == {"forks": 0 if mode == "thread" else 1, "error": None}
        outputs[mode] = files(tmp_path / mode, mode)
    assert any(name.endswith("episode_results.jsonl") for name in outputs["thread"])
    assert outputs["forked"] == outputs["thread"] == outputs["child_fails"]
    result = json.loads((tmp_path / "forked" / "experiment_result.json").read_text())
    assert sorted(result["runs"]) == [f"task{r}_policy{r % 2}" for r in range(6)]
    assert all(run["counts"]["success"] + run["counts"]["failure"] == 40 for run in result["runs"].values())


def test_an_error_in_a_run_the_child_reads_is_the_same_error_and_nothing_is_written(tmp_path):
    source = make_source(tmp_path / "source")
    (source / "task5_policy1" / "run_status.json").write_text("{not json")  # the last Run: the child's
    errors = {}
    for mode in ("forked", "thread"):
        got, _ = collect_in(source, tmp_path / mode, mode)
        errors[mode] = got["error"]
        assert not (tmp_path / mode).exists() or not any((tmp_path / mode).iterdir())
    assert errors["forked"] is not None and "task5_policy1" in errors["forked"]
    assert errors["forked"].replace("forked", "thread") == errors["thread"]


def test_a_link_out_of_a_run_the_child_reads_is_skipped_logged_and_listed(tmp_path):
    source = make_source(tmp_path / "source")
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text("")
    os.symlink(outside, source / "task5_policy1" / "parts" / "000009.jsonl")  # a link out of the folder
    for mode in ("forked", "thread"):
        got, stderr = collect_in(source, tmp_path / mode, mode)
        assert got["error"] is None
        assert "000009.jsonl: skipped" in stderr, stderr
        skipped = json.loads((tmp_path / mode / "experiment_result.json").read_text())["skipped_files"]
        assert [Path(s["path"]).name for s in skipped] == ["000009.jsonl"], skipped
