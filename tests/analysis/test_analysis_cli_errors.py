"""Bad input to the analysis commands: exit 2, one clear line on stderr, nothing written."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from evalfleet.cli import main


def run_cli(capsys, args: list[str]) -> tuple[int, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.err


COMMANDS = [["plot"], ["sensitivity", "--factors", "object.mass"], ["compare", "--baseline", "expert"]]


def assert_one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("evalfleet: error: ")
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("command", COMMANDS)
def test_empty_folder(tmp_path: Path, capsys, command: list[str]) -> None:
    empty = tmp_path / "empty"
    (empty / "some_run" / "videos").mkdir(parents=True)
    (empty / "experiment_result.json").write_text("{}")
    code, err = run_cli(capsys, [command[0], str(empty), *command[1:]])
    assert_one_line_error(code, err, str(empty), "no episode records found", "episode_results*.jsonl")
    assert not (empty / "plots").exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_policy_with_no_records(evalfleet_output: Path, capsys, command: list[str]) -> None:
    code, err = run_cli(capsys, [command[0], str(evalfleet_output), *command[1:], "--policies", "expert", "gr00t"])
    assert_one_line_error(code, err, "--policies", "no records for policy 'gr00t'", "policies present: expert, noisy")
    assert "runs: drawer_open_expert, drawer_open_noisy, pick_place_expert" in err
    assert not (evalfleet_output / "plots").exists()


def test_unknown_baseline_and_single_policy(evalfleet_output: Path, capsys) -> None:
    code, err = run_cli(capsys, ["compare", str(evalfleet_output), "--baseline", "pi0"])
    assert_one_line_error(code, err, "--baseline", "no records for baseline policy 'pi0'", "expert, noisy")
    code, err = run_cli(
        capsys, ["compare", str(evalfleet_output), "--baseline", "expert", "--runs", "pick_place_expert"]
    )
    assert_one_line_error(code, err, "compare needs a second policy")
    assert not (evalfleet_output / "plots").exists()


def test_unknown_factor_lists_known_ones(evalfleet_output: Path, capsys) -> None:
    code, err = run_cli(capsys, ["sensitivity", str(evalfleet_output), "--factors", "object.mass", "camera.fov"])
    assert_one_line_error(code, err, "--factors", "unknown factor 'camera.fov'",
                          "light.kind, object.mass, table.color (r/g/b)")
    code, err = run_cli(capsys, ["sensitivity", str(evalfleet_output), "--factors", "table.color.q"])
    assert_one_line_error(code, err, "unknown factor 'table.color.q'")
    code, err = run_cli(
        capsys, ["sensitivity", str(evalfleet_output), "--factors", "object.mass", "--outcome", "reward"]
    )
    assert_one_line_error(code, err, "--outcome", "no record has a numeric 'reward'", "progress")
    code, err = run_cli(capsys, ["sensitivity", str(evalfleet_output), "--factors", "object.mass", "--runs", "nope"])
    assert_one_line_error(code, err, "--runs", "no records for run(s) nope", "pick_place_expert")
    assert not (evalfleet_output / "plots").exists()


def test_other_bad_inputs(evalfleet_output: Path, tmp_path: Path, capsys) -> None:
    code, err = run_cli(capsys, ["plot", str(tmp_path / "missing")])
    assert_one_line_error(code, err, "no such file or folder")
    code, err = run_cli(capsys, ["plot", str(evalfleet_output), "--output", str(tmp_path / "plot.txt")])
    assert_one_line_error(code, err, "--output", "expected a file ending in .png")
    code, err = run_cli(capsys, ["sensitivity", "--factors", "x"])
    assert_one_line_error(code, err, "give an output folder or --episode-results")
    assert not (evalfleet_output / "plots").exists()


def test_console_script_subprocess(evalfleet_output: Path, tmp_path: Path) -> None:
    exe = shutil.which("evalfleet")
    assert exe, "the evalfleet console script is not installed"
    empty = tmp_path / "nothing_here"
    empty.mkdir()
    proc = subprocess.run([exe, "plot", str(empty)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "no episode records found" in proc.stderr
    proc = subprocess.run([exe, "sensitivity", str(evalfleet_output), "--factors", "nope"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown factor 'nope'" in proc.stderr and "object.mass" in proc.stderr
    # and the happy path through the real script
    proc = subprocess.run([exe, "compare", str(evalfleet_output), "--baseline", "expert"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (evalfleet_output / "plots" / "compare_expert.json").is_file()


def test_compare_on_untagged_arena_records_hints_and_works(arena_folder: Path, capsys) -> None:
    code, err = run_cli(capsys, ["compare", str(arena_folder), "--baseline", "pi0"])
    assert_one_line_error(code, err, "--baseline", "records carry no policy tag", "--policies cosmos")
    assert main(["compare", str(arena_folder), "--baseline", "pi0", "--policies", "cosmos"]) == 0
    out = capsys.readouterr().out
    assert "banana_in_bowl" in out and "apple" in out  # apple: cosmos missing, shown as N/A
