"""`evalfleet plan` read at 80 columns and through a pipe: Run names whole, commands split between arguments."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from evalfleet.textlayout import Column, command_lines, table_lines

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
SERVED = ROOT / "examples" / "expert_and_vision_served.yaml"
ARENA = ROOT / "tests" / "data" / "arena_experiment.yaml"


def plan_text(path: Path, columns: int) -> str:
    """`evalfleet plan` in a real subprocess with stdout piped (not a terminal) at COLUMNS=columns."""
    env = {**os.environ, "COLUMNS": str(columns)}
    proc = subprocess.run([sys.executable, "-m", "evalfleet.cli", "plan", str(path)], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def run_names(path: Path) -> list[str]:
    import yaml

    return list(yaml.safe_load(path.read_text())["runs"])


def words(text: str) -> set[str]:
    return set(re.split(r"[\s,()]+", text))


@pytest.mark.parametrize("path", [QUICKSTART, SERVED, ARENA], ids=lambda p: p.stem)
@pytest.mark.parametrize("columns", [80, 200])
def test_every_run_name_whole_and_lines_fit(path: Path, columns: int) -> None:
    text = plan_text(path, columns)
    assert "…" not in text
    names = run_names(path)
    assert len(names) >= 3
    for name in names:
        assert name in words(text), f"{name} not whole in:\n{text}"
    for line in text.splitlines():
        # Only a single unbreakable token (a JSON option value) may be longer than the width.
        assert len(line) <= columns or line.strip().startswith("--env-options"), line


def test_narrow_plan_lists_runs_in_the_experiment_order() -> None:
    text = plan_text(QUICKSTART, 80)
    lines = text.splitlines()
    heads = [line for line in lines if line in run_names(QUICKSTART)]
    assert heads == run_names(QUICKSTART)  # each name on a line of its own, in the file's order
    # Each Run's fields follow its name.
    block = lines[lines.index("push_expert_noisy") + 1: lines.index("pick_place_expert")]
    assert "policy: expert_noisy" in " ".join(block) and "robot.action_noise" in " ".join(block)


def test_servers_listed_on_a_free_port_and_commands_paste_back() -> None:
    text = plan_text(SERVED, 80)
    assert "8000" not in text and "--port FREE_PORT" in text and "free loopback port" in text
    # A server's command, continuation lines joined, is one shell command whose tokens are whole.
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("evalfleet serve"))
    command = []
    for line in lines[start:]:
        command.append(line.strip().removesuffix("\\").strip())
        if not line.endswith("\\"):
            break
    argv = shlex.split(" ".join(command))
    assert argv[:3] == ["evalfleet", "serve", "metaworld_vision"]
    assert argv[argv.index("--run") + 1] == "push_vision_served"
    assert '"image_size": 160' in argv[argv.index("--env-options") + 1]


def test_table_lines_columns_when_they_fit_blocks_when_not() -> None:
    cols = [Column("run"), Column("n", "right"), Column("note")]
    rows = [["a_rather_long_run_name", "5", "x"], ["b", "12", "a note with spaces"]]
    wide = table_lines(cols, rows, 60)
    assert wide[0].split() == ["run", "n", "note"] and wide[2].split() == ["a_rather_long_run_name", "5", "x"]
    assert wide[3].index("12") + 2 == wide[2].index("5") + 1  # right-aligned
    narrow = table_lines(cols, rows, 30)
    assert narrow[0] == "a_rather_long_run_name" and narrow[2] == "b"
    assert "n: 12" in narrow[3] and "note: a note with spaces" in " ".join(narrow[3:])
    assert all(len(line) <= 30 for line in narrow)


def test_command_lines_keep_flag_and_value_together() -> None:
    lines = command_lines("serve x --port 8000 --name 'two words' --flag --path /a/very/long/path/name", 30)
    assert all(line.endswith(" \\") for line in lines[:-1])
    assert shlex.split(" ".join(line.removesuffix("\\") for line in lines)) == \
        ["serve", "x", "--port", "8000", "--name", "two words", "--flag", "--path", "/a/very/long/path/name"]
    assert any("--port 8000" in line for line in lines)
    assert any("--path /a/very/long/path/name" in line for line in lines)
