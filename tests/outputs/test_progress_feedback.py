"""Long work says what it is doing: `collect`, `report` and `plot` on a big folder print a few lines on
stderr when piped (a progress bar when stderr is a terminal); a small folder, and a library caller that
set up no logging, see none of it."""

from __future__ import annotations

import logging
import os
import pty
import subprocess
from pathlib import Path

from evalfleet_testkit import evalfleet_cmd, run_evalfleet
from evalfleet.feedback import LONG_FILES
from evalfleet.outputs.collect import collect
from outputs_helpers import record, write_jsonl, write_status

RUNS = ("pick_expert", "push_expert")


def _many_parts(root: Path, parts_per_run: int) -> Path:
    """Shard logs as many runners leave them: one part file per episode."""
    for run in RUNS:
        write_status(root / run, planned=parts_per_run, state="done")
        for i in range(parts_per_run):
            write_jsonl(root / run / "parts" / f"{i:04d}.jsonl",
                        [record(run, i, "success" if i % 3 else "failure")])
    return root


def _lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("evalfleet: ")]


def test_collect_report_and_plot_of_a_big_folder_say_what_they_do(tmp_path):
    n = LONG_FILES  # per Run, so the folder has 2 * LONG_FILES record files
    src = _many_parts(tmp_path / "src", n)
    out = tmp_path / "out"
    proc = run_evalfleet("collect", str(src), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    lines = _lines(proc.stderr)
    assert f"evalfleet: reading {2 * n} record files of 2 Runs" in lines
    assert f"evalfleet: merged {2 * n} episodes of 2 Runs" in lines
    assert any(line.startswith("evalfleet: writing ") and line.endswith("index.html") for line in lines)
    assert "\x1b[" not in proc.stderr  # piped: plain lines, no progress bar

    proc = run_evalfleet("report", str(src))  # the uncollected folder: every part file is read
    assert proc.returncode == 0, proc.stderr
    assert f"evalfleet: reading {2 * n} record files of 2 Runs" in _lines(proc.stderr)
    assert any(line.endswith("index.html") and "writing" in line for line in _lines(proc.stderr))

    proc = run_evalfleet("plot", str(src), "--output", str(tmp_path / "p.png"))
    assert proc.returncode == 0, proc.stderr
    lines = _lines(proc.stderr)
    assert f"evalfleet: reading {2 * n} record files in {src}" in lines
    assert f"evalfleet: read {2 * n} episodes of 2 Runs" in lines


def test_a_small_folder_stays_quiet(tmp_path):
    src = _many_parts(tmp_path / "src", 3)
    for args in (("collect", str(src), "--output", str(tmp_path / "out")), ("report", str(src)),
                 ("plot", str(src), "--output", str(tmp_path / "p.png"))):
        proc = run_evalfleet(*args)
        assert proc.returncode == 0, proc.stderr
        assert _lines(proc.stderr) == [], args


def test_library_callers_get_log_records_not_output(tmp_path, caplog, capsys):
    src = _many_parts(tmp_path / "src", LONG_FILES)
    with caplog.at_level(logging.INFO, logger="evalfleet"):
        collect([str(src)], str(tmp_path / "out"), report=True)
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("evalfleet")]
    assert f"reading {2 * LONG_FILES} record files of 2 Runs" in messages
    captured = capsys.readouterr()
    assert "record files" not in captured.err and "record files" not in captured.out


def test_a_terminal_gets_a_progress_bar(tmp_path):
    src = _many_parts(tmp_path / "src", LONG_FILES)
    leader, follower = pty.openpty()
    env = dict(os.environ, COLUMNS="100", TERM="xterm")
    proc = subprocess.Popen(evalfleet_cmd("collect", str(src), "--output", str(tmp_path / "out")),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=follower, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # the terminal closed: the command is done
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(leader)
    assert proc.returncode == 0
    seen = b"".join(chunks).decode("utf-8", "replace")
    assert "reading record files" in seen and "\x1b[" in seen  # the bar: its description, drawn in place
