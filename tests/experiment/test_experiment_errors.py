"""Malformed Experiment files and overrides: each one exits 2 with ONE stderr line that names the file
(or "command line" for a bad override) and the key path, and writes nothing.

The CLI runs in-process (`evalfleet.cli.main`) with the working directory set to an empty tmp folder,
so anything a command wrote would show up there."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from evalfleet.cli import main

GOOD = """\
runs:
  push_expert:
    environment: {type: metaworld, task: push-v3}
    policy: {type: metaworld_expert}
    rollout_limit: {num_episodes: 5}
"""


def run_doc(**overrides: str) -> str:
    """GOOD with some of the Run's sections replaced by the given YAML flow text."""
    sections = {
        "environment": "{type: metaworld, task: push-v3}",
        "policy": "{type: metaworld_expert}",
        "rollout_limit": "{num_episodes: 5}",
    }
    sections.update(overrides)
    body = "".join(f"    {k}: {v}\n" for k, v in sections.items() if v is not None)
    return "runs:\n  push_expert:\n" + body


@dataclass
class Case:
    id: str
    text: str | None  # the file's content; None: the file does not exist
    key: str  # the key path the error line must name
    overrides: tuple[str, ...] = ()
    also: tuple[str, ...] = ()  # further substrings the line must contain (suggestions, values)
    on_command_line: bool = False  # a bad override: the line names "command line", not the file


CASES = [
    # --- the file itself ---------------------------------------------------------------------------
    Case("missing-file", None, "", also=("file not found",)),
    Case("empty-file", "", "", also=("empty",)),
    Case("comment-only-file", "# nothing here\n", "", also=("empty",)),
    Case("unparsable-yaml", "runs:\n  a: [1, 2\n  b: {\n", "", also=("not valid YAML", "line")),
    Case("tab-indented-yaml", "runs:\n\tpush: {}\n", "", also=("not valid YAML",)),
    Case("recursive-alias", run_doc(recording="&r {video: false, cameras: [*r]}"), "", also=("cycle",)),
    Case("top-level-list", "- runs\n- shared\n", "", also=("list",)),
    Case("top-level-scalar", "just a string\n", "", also=("str",)),
    Case("runs-missing", "shared:\n  rollout_limit: {num_episodes: 3}\n", "runs", also=("shared",)),
    Case("runs-not-a-map", "runs: [a, b]\n", "runs"),
    Case("runs-empty", "runs: {}\n", "runs", also=("at least one Run",)),
    Case("shared-not-a-map", "shared: [1]\n" + GOOD, "shared"),
    Case("run-not-a-map", "runs:\n  push_expert: 3\n", "runs.push_expert"),
    # --- unknown keys --------------------------------------------------------------------------------
    Case("unknown-top-level-key", "colour: red\n" + GOOD, "colour", also=("unknown key",)),
    Case("unknown-key-in-run", run_doc(policyy="{type: zero}"), "runs.push_expert.policyy",
         also=("did you mean policy",)),
    Case("unknown-key-in-rollout-limit", run_doc(rollout_limit="{num_episodes: 5, num_episode: 5}"),
         "runs.push_expert.rollout_limit.num_episode", also=("num_episodes",)),
    Case("unknown-key-in-recording", run_doc(recording="{vidoe: true}"), "runs.push_expert.recording.vidoe",
         also=("video",)),
    Case("unknown-key-in-shared", "shared:\n  rolout_limit: {num_episodes: 3}\n" + GOOD, "shared.rolout_limit",
         also=("rollout_limit",)),
    Case("unknown-metaworld-option", run_doc(environment="{type: metaworld, task: push-v3, colour: red}"),
         "runs.push_expert.environment.colour", also=("unknown key",)),
    Case("unknown-builder-key-for-metaworld", run_doc(environment_builder="{num_envs: 1, headless: true}"),
         "runs.push_expert.environment_builder.headless", also=("num_envs",)),
    Case("unknown-option-of-builtin-policy", run_doc(policy="{type: zero, chunk: 4}"), "runs.push_expert.policy.chunk",
         also=("chunk_size",)),
    # --- wrong types and values ----------------------------------------------------------------------
    Case("num-episodes-not-a-number", run_doc(rollout_limit='{num_episodes: "ten"}'),
         "runs.push_expert.rollout_limit.num_episodes", also=("'ten'",)),
    Case("num-episodes-fractional", run_doc(rollout_limit="{num_episodes: 2.5}"),
         "runs.push_expert.rollout_limit.num_episodes", also=("2.5",)),
    Case("num-episodes-a-bool", run_doc(rollout_limit="{num_episodes: true}"),
         "runs.push_expert.rollout_limit.num_episodes", also=("True",)),
    Case("num-envs-a-string", run_doc(environment_builder='{num_envs: "4"}'),
         "runs.push_expert.environment_builder.num_envs", also=("'4'",)),
    Case("both-num-steps-and-num-episodes", run_doc(rollout_limit="{num_episodes: 5, num_steps: 100}"),
         "runs.push_expert.rollout_limit", also=("exactly one",)),
    Case("neither-num-steps-nor-num-episodes", run_doc(rollout_limit="{}"), "runs.push_expert.rollout_limit",
         also=("exactly one",)),
    Case("rollout-limit-missing", run_doc(rollout_limit=None), "runs.push_expert.rollout_limit", also=("missing",)),
    Case("negative-num-episodes", run_doc(rollout_limit="{num_episodes: -3}"),
         "runs.push_expert.rollout_limit.num_episodes", also=("-3",)),
    Case("zero-num-steps", run_doc(rollout_limit="{num_steps: 0}"), "runs.push_expert.rollout_limit.num_steps"),
    Case("zero-num-envs", run_doc(environment_builder="{num_envs: 0}"),
         "runs.push_expert.environment_builder.num_envs", also=("greater than 0",)),
    Case("name-with-a-slash", "name: ../elsewhere\n" + GOOD, "name", also=("bad Experiment name",)),
    Case("empty-name", "name: ''\n" + GOOD, "name", also=("bad Experiment name",)),
    Case("negative-seed", "seed: -1\n" + GOOD, "seed"),
    Case("environment-without-type", run_doc(environment="{task: push-v3}"), "runs.push_expert.environment.type",
         also=("missing",)),
    # A bad value that comes from `shared` is reported where it is written, not as runs.<name>.… .
    Case("zero-num-envs-in-shared", "shared:\n  environment_builder: {num_envs: 0}\n" + GOOD,
         "shared.environment_builder.num_envs", also=("greater than 0", "push_expert")),
    Case("unknown-metaworld-task-in-shared",
         "shared:\n  environment: {task: push-v2}\n" + run_doc(environment="{type: metaworld}"),
         "shared.environment.task", also=("push-v3",)),
    Case("vector-variation-scalar-bounds-in-shared",
         "shared:\n  variations: {object: {position_noise: {enabled: true, low: 0.0, high: 0.1}}}\n" + GOOD,
         "shared.variations.object.position_noise", also=("vector of 3",)),
    Case("override-bad-shared-value", "shared:\n  rollout_limit: {num_episodes: 3}\n" + run_doc(rollout_limit=None), "",
         overrides=("shared.rollout_limit.num_episodes=0",),
         also=("shared.rollout_limit.num_episodes", "greater than 0"), on_command_line=True),
    Case("bad-run-name-digit", GOOD.replace("push_expert", "1st_run"), "runs.1st_run", also=("bad Run name",)),
    Case("bad-run-name-space", GOOD.replace("push_expert:", "'push expert':"), "runs.push expert",
         also=("bad Run name",)),
    Case("unknown-metaworld-task", run_doc(environment="{type: metaworld, task: push-v2}"),
         "runs.push_expert.environment.task", also=("push-v3",)),
    Case("unknown-bare-environment-type", run_doc(environment="{type: metaworl, task: push-v3}"),
         "runs.push_expert.environment.type", also=("metaworld",)),
    Case("unknown-bare-policy-type", run_doc(policy="{type: metaworld_exprt}"), "runs.push_expert.policy.type",
         also=("metaworld_expert",)),
    # --- variations ------------------------------------------------------------------------------------
    Case("variations-not-a-map", run_doc(variations="[robot.action_noise]"), "runs.push_expert.variations"),
    Case("shared-variations-not-a-map", "shared:\n  variations: 3\n" + GOOD, "shared.variations"),
    Case("low-above-high", run_doc(variations="{robot.action_noise: {enabled: true, low: 0.5, high: 0.1}}"),
         "runs.push_expert.variations.robot.action_noise", also=("low must not exceed high",)),
    Case("low-above-high-in-shared",
         "shared:\n  variations:\n    robot.action_noise: {sampler_cfg: {low: 0.5, high: 0.1}}\n" + GOOD,
         "shared.variations.robot.action_noise", also=("low must not exceed high",)),
    Case("vector-length-mismatch",
         run_doc(variations="{object.position_noise: {enabled: true, sampler_cfg: {low: [0, 0, 0], high: [1, 1]}}}"),
         "runs.push_expert.variations.object.position_noise", also=("same length",)),
    Case("unknown-variation", run_doc(variations="{robot.acton_noise: {enabled: true}}"),
         "runs.push_expert.variations.robot.acton_noise", also=("robot.action_noise",)),
    Case("unknown-nested-variation", run_doc(variations="{robot: {action_nois: {enabled: true}}}"),
         "runs.push_expert.variations.robot.action_nois", also=("robot.action_noise",)),
    Case("vector-variation-scalar-bounds",
         run_doc(variations="{object.position_noise: {enabled: true, low: 0.0, high: 0.1}}"),
         "runs.push_expert.variations.object.position_noise", also=("vector of 3",)),
    Case("scalar-variation-vector-bounds",
         run_doc(variations="{robot.action_noise: {enabled: true, low: [0, 0], high: [1, 1]}}"),
         "runs.push_expert.variations.robot.action_noise", also=("single number",)),
    Case("choice-of-words-for-a-number",
         run_doc(variations="{robot.action_noise: {enabled: true, distribution: choice, values: [0.1, high]}}"),
         "runs.push_expert.variations.robot.action_noise", also=("must be numbers", "'high'")),
    Case("choice-of-scalars-for-a-vector",
         run_doc(variations="{object.position_noise: {enabled: true, distribution: choice, values: [[0, 0, 0], 0.1]}}"),
         "runs.push_expert.variations.object.position_noise", also=("vector of 3",)),
    Case("choice-without-values", run_doc(variations="{robot.action_noise: {enabled: true, distribution: choice}}"),
         "runs.push_expert.variations.robot.action_noise", also=("values",)),
    Case("enabled-not-a-bool", run_doc(variations="{robot.action_noise: {enabled: maybe}}"),
         "runs.push_expert.variations.robot.action_noise.enabled", also=("maybe",)),
    Case("normal-negative-std",
         run_doc(variations="{robot.action_noise: {enabled: true, distribution: normal, mean: 0.1, std: -1}}"),
         "runs.push_expert.variations.robot.action_noise", also=("std",)),
    Case("unknown-key-in-sampler-cfg",
         run_doc(variations="{robot.action_noise: {enabled: true, sampler_cfg: {low: 0.1, high: 0.2, mid: 0.15}}}"),
         "runs.push_expert.variations.robot.action_noise.sampler_cfg.mid", also=("valid keys: low, high",)),
    Case("uniform-missing-high", run_doc(variations="{robot.action_noise: {enabled: true, low: 0.1}}"),
         "runs.push_expert.variations.robot.action_noise", also=("low and high",)),
    # --- overrides ---------------------------------------------------------------------------------------
    Case("override-missing-run", GOOD, "", overrides=("runs.pick_expert.rollout_limit.num_episodes=4",),
         also=("pick_expert", "push_expert"), on_command_line=True),
    Case("override-adds-a-run", GOOD,
         "", overrides=("runs.new_run.environment={type: metaworld, task: reach-v3}",),
         also=("new_run", "cannot add Runs"), on_command_line=True),
    Case("override-unknown-key", GOOD, "", overrides=("runs.push_expert.rollout_limit.num_episode=4",),
         also=("num_episode", "did you mean num_episodes", "runs.push_expert.rollout_limit.num_episodes"),
         on_command_line=True),
    Case("override-unknown-shared-key", GOOD, "", overrides=("shared.rollout_limt.num_episodes=4",),
         also=("rollout_limt", "rollout_limit"), on_command_line=True),
    Case("override-unknown-root", GOOD, "", overrides=("rums.push_expert.seed=4",), also=("rums",),
         on_command_line=True),
    Case("override-invalid-yaml", GOOD, "", overrides=("runs.push_expert.rollout_limit.num_episodes=[1, 2",),
         also=("not valid YAML",), on_command_line=True),
    Case("override-not-key-value", GOOD, "", overrides=("runs.push_expert.rollout_limit.num_episodes",),
         also=("KEY=VALUE",), on_command_line=True),
    Case("override-bad-value", GOOD, "", overrides=("runs.push_expert.rollout_limit.num_episodes=-4",),
         also=("runs.push_expert.rollout_limit.num_episodes",), on_command_line=True),
    Case("override-into-a-value", GOOD, "", overrides=("runs.push_expert.rollout_limit.num_episodes.x=4",),
         also=("num_episodes",), on_command_line=True),
    Case("override-empty-segment", GOOD, "", overrides=("runs..rollout_limit.num_episodes=4",),
         also=("empty key segment",), on_command_line=True),
]


def write_case(tmp_path: Path, case: Case) -> Path:
    path = tmp_path / "exp" / f"{case.id}.yaml"
    if case.text is not None:
        path.parent.mkdir(exist_ok=True)
        path.write_text(textwrap.dedent(case.text))
    return path


def snapshot(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*")}


def check_one_error_line(capsys: pytest.CaptureFixture[str], rc: int, case: Case, path: Path) -> str:
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert rc == 2, err
    assert len(lines) == 1, f"expected one line, got:\n{err}"
    line = lines[0]
    assert line.startswith("evalfleet: error: "), line
    if case.on_command_line:
        assert "command line" in line, line
    else:
        assert str(path) in line, line
    assert case.key in line, f"{case.key!r} not in {line!r}"
    for part in case.also:
        assert part in line, f"{part!r} not in {line!r}"
    return line


@pytest.mark.parametrize("command", ["plan", "overrides"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed_input_exits_2_with_one_line(case: Case, command: str, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = write_case(tmp_path, case)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    before = snapshot(tmp_path)
    rc = main([command, str(path), *case.overrides] + (["--json"] if command == "plan" else []))
    check_one_error_line(capsys, rc, case, path)
    assert snapshot(tmp_path) == before, "a failed command wrote files"


def test_at_least_twenty_distinct_malformed_inputs() -> None:
    assert len({c.id for c in CASES}) == len(CASES) >= 20


@pytest.mark.parametrize("case_id", ["unknown-key-in-run", "low-above-high", "override-missing-run", "top-level-list",
                                     "missing-file", "unknown-variation"])
def test_run_with_malformed_input_writes_no_output(case_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    case = next(c for c in CASES if c.id == case_id)
    path = write_case(tmp_path, case)
    out = tmp_path / "x"
    monkeypatch.chdir(tmp_path)
    rc = main(["run", str(path), *case.overrides, "--output", str(out), "--workers", "1", "--no-progress"])
    check_one_error_line(capsys, rc, case, path)
    assert not out.exists()
    assert not (tmp_path / "outputs").exists()


def test_error_line_names_file_then_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "e.yaml"
    path.write_text(run_doc(rollout_limit='{num_episodes: "ten"}'))
    assert main(["plan", str(path)]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"evalfleet: error: {path}: runs.push_expert.rollout_limit.num_episodes: "), line


def test_unreadable_path_is_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and str(tmp_path) in err and "folder" in err


def test_no_experiment_given(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "command line" in err


def test_bad_shard_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(GOOD)
    assert main(["plan", str(path), "--shard-size", "0"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--shard-size" in err


def test_unknown_environment_type_for_variations_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["variations", "metaworl"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "metaworld" in err



def test_bad_override_value_names_the_value_not_other_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The key exists; only its value is wrong: no "nearest valid keys" noise.
    path = tmp_path / "good.yaml"
    path.write_text(GOOD)
    assert main(["plan", str(path), "runs.push_expert.rollout_limit.num_episodes=-4"]) == 2
    line = capsys.readouterr().err.strip()
    assert "greater than 0" in line and "-4" in line
    assert "nearest valid keys" not in line


def test_unknown_metaworld_task_message_is_not_redundant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(run_doc(environment="{type: metaworld, task: push-v2}"))
    assert main(["plan", str(path)]) == 2
    line = capsys.readouterr().err.strip()
    assert line.count("push-v2") == 1, line


def test_a_runs_own_bad_value_is_reported_in_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # shared sets the same key correctly; the Run's own value is the culprit.
    path = tmp_path / "e.yaml"
    path.write_text("shared:\n  environment_builder: {num_envs: 2}\n" + run_doc(environment_builder="{num_envs: 0}"))
    assert main(["plan", str(path)]) == 2
    line = capsys.readouterr().err.strip()
    assert "runs.push_expert.environment_builder.num_envs" in line and "shared" not in line
