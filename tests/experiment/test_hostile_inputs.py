"""Hostile and careless input, by category, through the real CLI: every case exits 2 with exactly ONE stderr
line that names the file (or "command line", the output folder, the environment variable) and the key or
flag, shows no traceback, and writes nothing.

Each file case runs through `plan`, `run` and `submit --dry-run` (they share `load_experiment`), in-process
with the working directory set to an empty folder so anything a command wrote would show up; a sample of
every category also runs as a real `python -m evalfleet.cli` subprocess, where a traceback would be seen
exactly as a user sees it. `tests/experiment/test_experiment_errors.py` holds the everyday mistakes; this
file holds the attacks and the limits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from evalfleet import plugins
from evalfleet.cli import main
from evalfleet.experiment.safe_yaml import MAX_ALIASES, MAX_FILE_BYTES

GOOD = """\
runs:
  push_expert:
    environment: {type: metaworld, task: push-v3}
    policy: {type: metaworld_expert}
    rollout_limit: {num_episodes: 2}
"""
RUN = "runs.push_expert"


def run_doc(**sections: str) -> str:
    """GOOD with some of the Run's sections replaced (or added) by the given YAML flow text."""
    merged = {"environment": "{type: metaworld, task: push-v3}", "policy": "{type: metaworld_expert}",
              "rollout_limit": "{num_episodes: 2}", **sections}
    return "runs:\n  push_expert:\n" + "".join(f"    {k}: {v}\n" for k, v in merged.items() if v is not None)


def noise(spec: str) -> str:
    """A Run whose robot.action_noise variation is `spec` (YAML flow text)."""
    return run_doc(variations=f"{{robot.action_noise: {spec}}}")


def flow_bomb(levels: int = 6) -> str:
    """An alias bomb on one line (for an override value): 10**levels values once expanded."""
    items = ["&l0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    items += [f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "[" + ", ".join(items) + "]"


def alias_bomb(levels: int = 8) -> str:
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n" + GOOD


@dataclass
class Case:
    id: str
    text: str | bytes | None  # the file's content; None: `path` names an existing thing
    key: str  # what the line must name besides the file: a key path, a flag ("" for the file alone)
    also: tuple[str, ...] = ()  # further substrings of the line
    overrides: tuple[str, ...] = ()
    where: str = "file"  # "file": the line names the Experiment file; else this literal text
    path: str | None = None  # a path to use instead of writing `text` (/dev/zero)


CATEGORIES: dict[str, list[Case]] = {
    "YAML limits (aliases, depth, size, duplicates, tags)": [
        Case("alias-bomb", alias_bomb(), "", also=("aliases are expanded",)),
        Case("too-many-aliases", "a: &a 1\nb: [" + ", ".join(["*a"] * (MAX_ALIASES + 1)) + "]\n" + GOOD, "",
             also=("aliases",)),
        Case("20000-deep-lists", "x: " + "[" * 20000 + "]" * 20000 + "\n" + GOOD, "", also=("nested",)),
        Case("5000-deep-maps", "x: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n" + GOOD, "", also=("nested",)),
        Case("alias-cycle", run_doc(recording="&r {video: false, cameras: [*r]}"), "", also=("cycle",)),
        Case("duplicate-top-level-key", GOOD + "runs: {}\n", "", also=("duplicate key 'runs'", "line 6")),
        Case("duplicate-nested-key", run_doc(rollout_limit="{num_episodes: 2, num_episodes: 9}"), "",
             also=("duplicate key 'num_episodes'",)),
        Case("duplicate-run", GOOD + GOOD.split("\n", 1)[1], "", also=("duplicate key 'push_expert'",)),
        Case("python-object-tag", "name: !!python/object/apply:os.system [id]\n" + GOOD, "", also=("tag",)),
        Case("binary-tag", "name: !!binary aGVsbG8=\n" + GOOD, "name", also=("bytes",)),
        Case("set-tag", "shared: !!set {a, b}\n" + GOOD, "shared", also=("set",)),
        Case("bad-explicit-int", "seed: !!int abc\n" + GOOD, "", also=("not valid YAML",)),
        Case("bad-explicit-timestamp", "name: !!timestamp 2020-99-99\n" + GOOD, "", also=("not valid YAML",)),
        Case("5000-digit-number", "seed: " + "7" * 5000 + "\n" + GOOD, "", also=("not valid YAML",)),
        Case("top-level-list", "- runs\n- shared\n", "", also=("list",)),
        Case("two-documents", GOOD + "---\n" + GOOD, "", also=("another document",)),
        Case("unhashable-key", "? [a, b]\n: 1\n" + GOOD, "", also=("unhashable",)),
    ],
    "file kind and encoding": [
        Case("dev-zero", None, "", path="/dev/zero", also=("not a regular file",)),
        Case("fifo", None, "", path="FIFO", also=("not a regular file",)),
        Case("a-folder", None, "", path="FOLDER", also=("folder",)),
        Case("missing-file", None, "", path="MISSING", also=("not found",)),
        Case("larger-than-the-limit", "# " + "x" * MAX_FILE_BYTES + "\n" + GOOD, "", also=("bytes",)),
        Case("binary-garbage", b"\x00\x01\x02\xff\xfe" * 50, "", also=("UTF-8",)),
        Case("latin-1-text", GOOD.replace("push_expert", "push_\xe9").encode("latin-1"), "", also=("UTF-8",)),
        Case("nul-in-yaml-text", GOOD + "\x00\n", "", also=("not valid YAML",)),
    ],
    "recording.trajectories (#54)": [
        Case("unknown-trajectory-key", run_doc(recording="{trajectories: {keys: [state, joint_torques]}}"),
             f"{RUN}.recording.trajectories.keys.1", also=("'environment_state'", "joint_torques")),
        Case("misspelt-setting", run_doc(recording="{trajectories: {episode: all}}"),
             f"{RUN}.recording.trajectories.episode", also=("did you mean episodes",)),
        Case("camera-the-environment-lacks", run_doc(recording="{trajectories: {cameras: [cornr]}}"),
             f"{RUN}.recording.trajectories.cameras[0]", also=("no camera 'cornr'", "did you mean 'corner'")),
        Case("sample-share-above-1", run_doc(recording="{trajectories: {episodes: sample, fraction: 1.5}}"),
             f"{RUN}.recording.trajectories.fraction"),
        Case("key-twice", run_doc(recording="{trajectories: {keys: [action, action]}}"),
             f"{RUN}.recording.trajectories.keys", also=("more than once",)),
        Case("every-0th", run_doc(recording="{trajectories: {every_n: 0}}"), f"{RUN}.recording.trajectories.every_n"),
        Case("a-list-not-settings", run_doc(recording="{trajectories: [state]}"), f"{RUN}.recording.trajectories"),
        Case("one-dataset-of-two-kinds", GOOD + "  pusht_zero:\n    environment: {type: pusht}\n"
             "    policy: {type: zero}\n    rollout_limit: {num_episodes: 2}\n"
             "shared:\n  recording: {trajectories: {keys: [action]}}\n", "runs",
             also=("one dataset", "dataset: run")),
    ],
    "success.hold_steps (#55)": [
        Case("hold-on-an-env-that-ends-at-success", "runs:\n  p:\n    environment: {type: pusht}\n"
             "    policy: {type: zero}\n    rollout_limit: {num_episodes: 2}\n    success: {hold_steps: 5}\n",
             "runs.p.success.hold_steps",
             also=("ends its episode when it reports success",)),
        Case("hold-0", run_doc(success="{hold_steps: 0}"), f"{RUN}.success.hold_steps"),
        Case("hold-a-million", run_doc(success="{hold_steps: 1000000}"), f"{RUN}.success.hold_steps"),
        Case("hold-a-fraction", run_doc(success="{hold_steps: 2.5}"), f"{RUN}.success.hold_steps"),
        Case("hold-misspelt", run_doc(success="{hold: 5}"), f"{RUN}.success.hold", also=("hold_steps",)),
    ],
    "floors (#55)": [
        Case("unknown-floor", "floors: [nothing]\n" + GOOD, "floors.0", also=("'noop' or 'random'",)),
        Case("floor-twice", "floors: [noop, noop]\n" + GOOD, "floors", also=("at most once",)),
        Case("floor-as-text", "floors: noop\n" + GOOD, "floors", also=("list",)),
        Case("three-floors", "floors: [noop, random, noop]\n" + GOOD, "floors"),
        Case("floor-as-a-map", "floors: {noop: true}\n" + GOOD, "floors"),
    ],
    "non-finite numbers": [
        Case("nan-low", noise("{enabled: true, low: .nan, high: 0.1}"), f"{RUN}.variations.robot.action_noise.low",
             also=("finite",)),
        Case("inf-high", noise("{enabled: true, low: 0, high: .inf}"), f"{RUN}.variations.robot.action_noise.high",
             also=("finite",)),
        Case("minus-inf-sampler-cfg", noise("{enabled: true, sampler_cfg: {low: -.inf, high: 0}}"),
             f"{RUN}.variations.robot.action_noise.sampler_cfg.low", also=("finite",)),
        Case("nan-std", noise("{enabled: true, distribution: normal, mean: 0, std: .nan}"),
             f"{RUN}.variations.robot.action_noise.std", also=("finite",)),
        Case("nan-mean", noise("{enabled: true, distribution: normal, mean: .nan, std: 1}"),
             f"{RUN}.variations.robot.action_noise.mean", also=("finite",)),
        Case("nan-in-a-vector", run_doc(variations="{object.position_noise: {enabled: true, low: [0, 0, .nan], "
                                                   "high: [1, 1, 1]}}"),
             f"{RUN}.variations.object.position_noise.low.2", also=("finite",)),
        Case("nan-choice-value", noise("{enabled: true, distribution: choice, values: [0.1, .nan]}"),
             f"{RUN}.variations.robot.action_noise.values.1", also=("finite",)),
        Case("nan-as-a-string", noise("{enabled: true, low: 'nan', high: 1}"),
             f"{RUN}.variations.robot.action_noise.low", also=("valid number", "'nan'")),  # a string is no number
        Case("1e400-as-a-string", noise("{enabled: true, low: 0, high: 1e400}"),
             f"{RUN}.variations.robot.action_noise.high", also=("finite",)),
        Case("inf-timeout", run_doc(episode_timeout_s=".inf"), f"{RUN}.episode_timeout_s", also=("finite",)),
        Case("nan-in-an-untyped-option", run_doc(policy="{type: my_pkg.Policy, gain: .nan}"), f"{RUN}.policy.gain",
             also=("finite",)),
        Case("nan-in-shared", "shared:\n  environment_builder: {seed: .nan}\n" + GOOD,
             "shared.environment_builder.seed", also=("finite",)),
    ],
    "sizes and huge numbers": [
        Case("num-episodes-1e30", run_doc(rollout_limit="{num_episodes: 1000000000000000000000000000000}"),
             f"{RUN}.rollout_limit.num_episodes", also=("64 bits",)),
        Case("num-episodes-above-the-limit", run_doc(rollout_limit="{num_episodes: 10000001}"),
             f"{RUN}.rollout_limit.num_episodes", also=("less than or equal",)),
        Case("num-steps-1e30", run_doc(rollout_limit="{num_steps: 1000000000000000000000000000000}"),
             f"{RUN}.rollout_limit.num_steps"),
        Case("num-envs-1e9", run_doc(environment_builder="{num_envs: 1000000000}"),
             f"{RUN}.environment_builder.num_envs", also=("1024",)),
        Case("negative-num-envs", run_doc(environment_builder="{num_envs: -4}"), f"{RUN}.environment_builder.num_envs"),
        Case("seed-2-to-the-64", "seed: 18446744073709551616\n" + GOOD, "seed", also=("64 bits",)),
        Case("seed-above-int64", "seed: 9223372036854775808\n" + GOOD, "seed"),
        Case("max-attempts-1e6", run_doc(max_attempts="1000000"), f"{RUN}.max_attempts"),
        Case("timeout-a-century", run_doc(episode_timeout_s="3153600000"), f"{RUN}.episode_timeout_s"),
        Case("zero-timeout", run_doc(episode_timeout_s="0"), f"{RUN}.episode_timeout_s"),
        Case("video-fps-1e6", run_doc(recording="{video: true, fps: 1000000}"), f"{RUN}.recording.fps"),
        Case("video-width-1e6", run_doc(recording="{video: true, width: 1000000}"), f"{RUN}.recording.width"),
        Case("mesh-tolerance-negative", run_doc(recording="{video: true, mesh_tolerance_px: -1}"),
             f"{RUN}.recording.mesh_tolerance_px"),
        Case("mesh-tolerance-nan", run_doc(recording="{video: true, mesh_tolerance_px: .nan}"),
             f"{RUN}.recording.mesh_tolerance_px"),
        Case("open-loop-horizon-1e9", run_doc(policy="{type: metaworld_expert, open_loop_horizon: 1000000000}"),
             f"{RUN}.policy.open_loop_horizon"),
        Case("sampler-bound-1e300", noise("{enabled: true, low: -1.0e+300, high: 1.0e+300}"),
             f"{RUN}.variations.robot.action_noise.low"),
        Case("choice-value-1e12", noise("{enabled: true, distribution: choice, values: [1.0e+12]}"),
             f"{RUN}.variations.robot.action_noise", also=("finite numbers within",)),
        Case("string-of-100k-characters", run_doc(task="'" + "t" * 100_000 + "'"), f"{RUN}.task",
             also=("characters",)),
    ],
    "numbers that load but cannot run (issue #52, finding 11)": [
        Case("recorded-latency-1e308", run_doc(timing="{mode: simulated, latency: {recorded: [5, 1.0e+308]}}"),
             f"{RUN}.timing.latency.recorded.1", also=("less than or equal to 3600000",)),
        Case("recorded-latency-1e308-exponent-only", run_doc(timing="{mode: simulated, latency: {recorded: [1e308]}}"),
             f"{RUN}.timing.latency.recorded.0", also=("less than or equal to 3600000",)),
        Case("control-hz-1e-300", run_doc(timing="{mode: wall_clock, control_hz: 1e-300}"), f"{RUN}.timing.control_hz",
             also=("greater than or equal to 0.01",)),
        Case("alpha-1e-17", "stopping: {compare: {baseline: metaworld_expert, alpha: 1e-17}}\n" + GOOD,
             "stopping.compare.alpha", also=("greater than or equal to 0.000001",)),
        Case("alpha-1e-17-of-a-run", run_doc(stopping="{compare: {baseline: metaworld_expert, alpha: 1.0e-17}}"),
             f"{RUN}.stopping.compare.alpha", also=("greater than or equal to 0.000001",)),
    ],
    "names that must fit a file system": [
        Case("run-name-ending-in-newline", GOOD.replace("push_expert:", '"push_expert\\n":'), "runs.push_expert\\n",
             also=("bad Run name",)),
        Case("experiment-name-ending-in-newline", 'name: "r\\n"\n' + GOOD, "name", also=("bad Experiment name",)),
        Case("run-name-300-characters", GOOD.replace("push_expert", "r" * 300), "runs.rrrr", also=("at most 100",)),
        Case("experiment-name-300-characters", "name: " + "e" * 300 + "\n" + GOOD, "name", also=("at most 100",)),
        Case("run-name-101-characters", GOOD.replace("push_expert", "r" * 101), "runs.rrrr", also=("at most 100",)),
        Case("run-name-with-a-slash", GOOD.replace("push_expert:", "'../up':"), "runs.../up", also=("bad Run name",)),
        Case("run-name-with-dots", GOOD.replace("push_expert", "a.b"), "runs.a.b", also=("bad Run name",)),
        Case("run-name-empty", GOOD.replace("push_expert", "''"), "runs.", also=("bad Run name",)),
        Case("run-name-unicode", GOOD.replace("push_expert", "пуш"), "runs.пуш", also=("bad Run name",)),
        Case("run-name-a-number", GOOD.replace("push_expert", "42"), "runs.42", also=("bad Run name",)),
        Case("experiment-name-dot-dot", "name: ..\n" + GOOD, "name", also=("bad Experiment name",)),
        Case("experiment-name-with-nul", 'name: "a\\0b"\n' + GOOD, "name", also=("NUL",)),
        Case("task-tag-with-newline", run_doc(task='"a\\nb"'), f"{RUN}.task", also=("one line",)),
        Case("policy-type-with-newline", run_doc(policy='{type: "metaworld_expert\\n"}'), f"{RUN}.policy.type",
             also=("one line",)),
    ],
    "wrong types": [
        Case("runs-a-list", "runs: [a, b]\n", "runs"),
        Case("run-a-number", "runs:\n  push_expert: 3\n", f"{RUN}"),
        Case("environment-a-string", run_doc(environment="metaworld"), f"{RUN}.environment"),
        Case("num-episodes-a-string", run_doc(rollout_limit="{num_episodes: ten}"),
             f"{RUN}.rollout_limit.num_episodes"),
        Case("num-episodes-a-bool", run_doc(rollout_limit="{num_episodes: yes}"), f"{RUN}.rollout_limit.num_episodes"),
        Case("num-episodes-a-list", run_doc(rollout_limit="{num_episodes: [2]}"), f"{RUN}.rollout_limit.num_episodes"),
        Case("seed-a-float", "seed: 1.5\n" + GOOD, "seed"),
        Case("name-a-map", "name: {a: 1}\n" + GOOD, "name"),
        Case("server-sharing-a-list", "server_sharing: [per_run]\n" + GOOD, "server_sharing"),
        Case("variations-a-list", run_doc(variations="[robot.action_noise]"), f"{RUN}.variations"),
        Case("variation-null", noise("null"), f"{RUN}.variations.robot.action_noise"),
        Case("enabled-a-string", noise("{enabled: sometimes}"), f"{RUN}.variations.robot.action_noise.enabled"),
        Case("recording-a-list", run_doc(recording="[video]"), f"{RUN}.recording"),
        Case("environment-type-a-list", run_doc(environment="{type: [metaworld]}"), f"{RUN}.environment.type"),
        Case("key-with-dots-at-top", "a.b: 1\n" + GOOD, "a.b", also=("unknown key",)),
        Case("control-hz-a-string", run_doc(timing="{mode: wall_clock, control_hz: '80'}"), f"{RUN}.timing.control_hz",
             also=("valid number", "'80'")),
        Case("fixed-ms-a-bool", run_doc(timing="{mode: simulated, latency: {fixed_ms: true}}"),
             f"{RUN}.timing.latency.fixed_ms", also=("valid number",)),
        Case("alpha-a-string", "stopping: {compare: {baseline: metaworld_expert, alpha: '0.05'}}\n" + GOOD,
             "stopping.compare.alpha", also=("valid number",)),
        Case("timeout-a-string", run_doc(episode_timeout_s="'600'"), f"{RUN}.episode_timeout_s",
             also=("valid number",)),
        Case("sampler-low-a-bool", noise("{enabled: true, low: true, high: 1}"),
             f"{RUN}.variations.robot.action_noise.low", also=("valid number",)),
    ],
    "overrides": [
        Case("override-without-equals", GOOD, "", overrides=("runs.push_expert.rollout_limit.num_episodes",),
             where="command line", also=("KEY=VALUE",)),
        Case("override-empty-key", GOOD, "", overrides=("=3",), where="command line", also=("KEY=VALUE",)),
        Case("override-unknown-root", GOOD, "", overrides=("nope.x=1",), where="command line", also=("'nope'",)),
        Case("override-missing-run", GOOD, "", overrides=("runs.nobody.task=x",), where="command line",
             also=("no Run named 'nobody'",)),
        Case("override-nonexistent-key", GOOD, "", overrides=("runs.push_expert.rollout_limit.episodes=4",),
             where="command line", also=("runs.push_expert.rollout_limit.episodes", "unknown key")),
        Case("override-into-a-value", GOOD, "", overrides=("runs.push_expert.rollout_limit.num_episodes.x=4",),
             where="command line", also=("not a map",)),
        Case("override-nan", GOOD, "", overrides=("runs.push_expert.episode_timeout_s=.nan",),
             where="command line", also=("finite",)),
        Case("override-inf-sampler", GOOD, "",
             overrides=("runs.push_expert.variations.robot.action_noise={enabled: true, low: 0, high: .inf}",),
             where="command line", also=("finite",)),
        Case("override-huge-int", GOOD, "", overrides=("seed=" + "9" * 40,), where="command line",
             also=("64 bits",)),
        Case("override-alias-bomb", GOOD, "",
             overrides=("shared.environment_builder.x=" + flow_bomb(),), where="command line", also=("aliases",)),
        Case("override-deep-value", GOOD, "", overrides=("runs.push_expert.task=" + "[" * 5000,),
             where="command line", also=("nested",)),
        Case("override-100-segments", GOOD, "", overrides=("runs.push_expert." + ".".join(["a"] * 100) + "=1",),
             where="command line", also=("segments",)),
        Case("override-name-with-newline", GOOD, "", overrides=('name="a\\n"',), where="command line",
             also=("bad Experiment name",)),
        Case("override-value-with-nul", GOOD, "", overrides=('runs.push_expert.task="a\\0"',), where="command line",
             also=("NUL",)),
        Case("override-python-tag", GOOD, "", overrides=("seed=!!python/name:os.system",), where="command line",
             also=("not valid YAML",)),
        Case("override-run-itself", GOOD, "", overrides=("runs.push_expert=3",), where="command line"),
        Case("override-empty-segment", GOOD, "", overrides=("runs..task=x",), where="command line",
             also=("empty key segment",)),
        Case("override-number-a-string", GOOD, "", overrides=("runs.push_expert.episode_timeout_s='600'",),
             where="command line", also=("runs.push_expert.episode_timeout_s", "valid number")),
    ],
}
CASES = [(category, case) for category, cases in CATEGORIES.items() for case in cases]
# The commands that load an Experiment; each must refuse the same input the same way.
COMMANDS = ("plan", "run", "submit")


def materialise(case: Case, tmp_path: Path) -> Path:
    if case.path == "FIFO":
        path = tmp_path / "exp" / "fifo.yaml"
        path.parent.mkdir()
        os.mkfifo(path)
        return path
    if case.path == "FOLDER":
        path = tmp_path / "exp" / "folder.yaml"
        path.mkdir(parents=True)
        return path
    if case.path == "MISSING":
        return tmp_path / "exp" / "missing.yaml"
    if case.path is not None:
        return Path(case.path)
    path = tmp_path / "exp" / f"{case.id}.yaml"
    path.parent.mkdir()
    if isinstance(case.text, bytes):
        path.write_bytes(case.text)
    else:
        path.write_text(case.text or "", encoding="utf-8")
    return path


def argv_for(command: str, path: Path, case: Case, out: Path) -> list[str]:
    if command == "plan":
        return ["plan", str(path), *case.overrides, "--json"]
    if command == "run":
        return ["run", str(path), *case.overrides, "--output", str(out), "--workers", "1", "--no-progress"]
    return ["submit", str(path), *case.overrides, "--backend", "osmo", "--dry-run"]


def snapshot(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): (p.lstat().st_size if p.is_file() else -1) for p in root.rglob("*")}


def check_line(err: str, rc: int, where: str, key: str, also: tuple[str, ...] = ()) -> str:
    lines = err.splitlines()
    assert rc == 2, err
    assert "Traceback" not in err, err
    assert len(lines) == 1, f"expected one line, got:\n{err}"
    line = lines[0]
    assert line.startswith("evalfleet: error: "), line
    assert where in line, f"{where!r} not in {line!r}"
    assert key in line, f"{key!r} not in {line!r}"
    for part in also:
        assert part in line, f"{part!r} not in {line!r}"
    return line


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("category,case", CASES, ids=[f"{c.id}" for _, c in CASES])
def test_hostile_input_exits_2_with_one_line_and_writes_nothing(category: str, case: Case, command: str,
                                                                tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = materialise(case, tmp_path)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    out = tmp_path / "out"
    before = snapshot(tmp_path)
    rc = main(argv_for(command, path, case, out))
    err = capsys.readouterr().err
    check_line(err, rc, str(path) if case.where == "file" else case.where, case.key, case.also)
    assert not out.exists(), "the output folder was created"
    assert snapshot(tmp_path) == before, "a failed command wrote files"


def test_every_category_holds_cases() -> None:
    assert all(len(cases) >= 5 for cases in CATEGORIES.values())
    assert len({c.id for _, c in CASES}) == len(CASES)


def test_the_good_file_passes_the_same_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The harness can fail: the file every case starts from loads, plans and dry-runs."""
    path = tmp_path / "good.yaml"
    path.write_text(GOOD)
    monkeypatch.chdir(tmp_path)
    for argv in (["plan", str(path), "--json"], ["submit", str(path), "--backend", "osmo", "--dry-run"],
                 ["overrides", str(path)]):
        assert main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    small_bomb = tmp_path / "small_bomb.yaml"
    small_bomb.write_text("x: &x [1, 2]\ny: [*x, *x]\n" + GOOD)  # aliases within the limits are fine
    assert main(["plan", str(small_bomb)]) == 2  # x, y are unknown keys: the anchors themselves loaded
    assert "unknown key 'x'" in capsys.readouterr().err


def test_numbers_in_exponent_form_and_from_overrides_load_as_numbers(tmp_path: Path) -> None:
    """Numbers take numbers only, so YAML 1.2's `1e2` (a string to YAML 1.1) must read as one, in the file and in an
    override; whole numbers are numbers too."""
    from evalfleet.experiment.loading import load_experiment

    path = tmp_path / "exp.yaml"
    path.write_text("stopping: {compare: {baseline: metaworld_expert, alpha: 5e-2}}\n"
                    + run_doc(rollout_limit="{num_episodes: 20}", episode_timeout_s="6e2",
                              timing="{mode: simulated, control_hz: 80, latency: {recorded: [1e2, 2.5E+1, 3]}}"))
    run = load_experiment(path, ["runs.push_expert.timing.control_hz=1.25e2", "stopping.compare.alpha=1e-3"]
                          ).experiment.runs["push_expert"]
    assert run.episode_timeout_s == 600.0 and run.stopping.compare.alpha == 0.001
    assert run.timing.control_hz == 125.0 and run.timing.latency.recorded == [100.0, 25.0, 3.0]


# ------------------------------------------------------------------------------------- command-line flags

FLAG_CASES = [
    # (id, argv after the Experiment file, the flag the line names)
    ("plan-workers-0", ["plan", "{exp}", "--workers", "0"], "--workers"),
    ("plan-workers-negative", ["plan", "{exp}", "--workers", "-3"], "--workers"),
    ("plan-shard-size-0", ["plan", "{exp}", "--shard-size", "0"], "--shard-size"),
    ("run-workers-0", ["run", "{exp}", "--workers", "0", "--output", "{out}"], "--workers"),
    ("run-shard-size-negative", ["run", "{exp}", "--shard-size", "-1", "--output", "{out}"], "--shard-size"),
    ("watchdog-stall-timeout-negative", ["watchdog", "--stall-timeout", "-1", "--", "true"], "--stall-timeout"),
    ("watchdog-stall-timeout-nan", ["watchdog", "--stall-timeout", "nan", "--", "true"], "--stall-timeout"),
    ("watchdog-startup-timeout-inf", ["watchdog", "--startup-timeout", "inf", "--", "true"], "--startup-timeout"),
    ("watchdog-max-restarts-negative", ["watchdog", "--max-restarts", "-5", "--", "true"], "--max-restarts"),
    ("watchdog-poll-zero", ["watchdog", "--poll", "0", "--", "true"], "--poll"),
    ("watchdog-backoff-1e400", ["watchdog", "--backoff", "1e400", "--", "true"], "--backoff"),
    ("watchdog-term-grace-negative", ["watchdog", "--term-grace", "-1", "--", "true"], "--term-grace"),
]


@pytest.mark.parametrize("case_id,argv,flag", FLAG_CASES, ids=[c[0] for c in FLAG_CASES])
def test_bad_flag_exits_2_naming_it(case_id: str, argv: list[str], flag: str, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    exp = tmp_path / "good.yaml"
    exp.write_text(GOOD)
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    rc = main([a.format(exp=exp, out=out) for a in argv])
    check_line(capsys.readouterr().err, rc, "command line", flag)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("flag,value", [("--stall-timeout", "nan"), ("--stall-timeout", "-1"),
                                        ("--max-restarts", "-5")])
def test_watchdog_config_refuses_bad_values_naming_the_flag(flag: str, value: str) -> None:
    """What `evalfleet run` calls before it writes: WatchdogConfig itself raises the UserError."""
    from evalfleet.errors import UserError
    from evalfleet.execution.watchdog import WatchdogConfig

    field = flag.removeprefix("--").replace("-", "_")
    with pytest.raises(UserError) as info:
        WatchdogConfig(**{field: float(value) if field != "max_restarts" else int(value)})
    assert info.value.key == flag and info.value.where == "command line"


def test_run_refuses_bad_watchdog_flags_before_writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    exp = tmp_path / "good.yaml"
    exp.write_text(GOOD)
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    rc = main(["run", str(exp), "--output", str(out), "--stall-timeout", "nan", "--workers", "1", "--no-progress"])
    check_line(capsys.readouterr().err, rc, "command line", "--stall-timeout")
    assert not out.exists()


# ------------------------------------------------------------------------------------------ the output folder


def _file(tmp: Path) -> Path:
    (tmp / "a_file").write_text("x")
    return tmp / "a_file"


def _under_a_file(tmp: Path) -> Path:
    return _file(tmp) / "sub" / "out"


def _resumable(tmp: Path, content: bytes | None, *, folder: bool = False) -> Path:
    out = tmp / "prev"
    out.mkdir()
    if folder:
        (out / "experiment.yaml").mkdir()
    elif content is not None:
        (out / "experiment.yaml").write_bytes(content)
    return out


OUTPUT_CASES: list[tuple[str, Callable[[Path], Path], bool, tuple[str, ...]]] = [
    # (id, makes the --output path, --resume, substrings of the line)
    ("output-is-a-file", _file, False, ("is a file",)),
    ("output-under-a-file", _under_a_file, False, ("a_file is a file",)),
    ("output-not-writable", lambda tmp: Path("/sys/evalfleet-not-writable"), False, ("cannot",)),
    ("output-name-too-long", lambda tmp: tmp / ("n" * 300), False, ("too long",)),
    ("output-not-empty", lambda tmp: _resumable(tmp, b"x: 1\n"), False, ("not empty", "--resume")),
    ("resume-nothing-there", lambda tmp: _resumable(tmp, None), True, ("nothing to resume",)),
    ("resume-experiment-not-utf8", lambda tmp: _resumable(tmp, b"name: \xff\xfe\n"), True, ("UTF-8",)),
    ("resume-experiment-not-yaml", lambda tmp: _resumable(tmp, b"runs: [\n"), True, ("not valid YAML",)),
    ("resume-experiment-a-folder", lambda tmp: _resumable(tmp, None, folder=True), True, ("folder",)),
    ("resume-experiment-alias-bomb", lambda tmp: _resumable(tmp, alias_bomb().encode()), True, ("aliases",)),
    ("resume-experiment-differs", lambda tmp: _resumable(tmp, b"name: other\nruns: {}\n"), True, ("differs",)),
    ("resume-output-is-a-file", _file, True, ("is a file",)),
]


@pytest.mark.parametrize("case_id,make,resume,also", OUTPUT_CASES, ids=[c[0] for c in OUTPUT_CASES])
def test_bad_output_folder_exits_2_naming_the_path(case_id: str, make: Callable[[Path], Path], resume: bool,
                                                   also: tuple[str, ...], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    exp = tmp_path / "good.yaml"
    exp.write_text(GOOD)
    out = make(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    rc = main(["run", str(exp), "--output", str(out), "--workers", "1", "--no-progress",
               *(["--resume"] if resume else [])])
    err = capsys.readouterr().err
    check_line(err, rc, str(out) if len(str(out)) < 200 else str(out)[:100], "", also)
    assert snapshot(tmp_path) == before, "a refused run wrote files"
    assert not Path("/sys/evalfleet-not-writable").exists()


# ------------------------------------------------------------------------------------------------ plugins

PLUGIN_CASES = [
    ("missing-module", None, ("evalfleet_no_such_plugin", "EVALFLEET_PLUGINS", "no module named")),
    ("raises-on-import", "raise RuntimeError('plugin exploded')\n", ("RuntimeError", "plugin exploded")),
    ("syntax-error", "def broken(:\n", ("SyntaxError",)),
    ("imports-a-missing-dependency", "import evalfleet_missing_dependency_xyz\n",
     ("evalfleet_missing_dependency_xyz",)),
]


@pytest.mark.parametrize("case_id,source,also", PLUGIN_CASES, ids=[c[0] for c in PLUGIN_CASES])
def test_broken_plugin_exits_2_naming_module_and_variable(case_id: str, source: str | None, also: tuple[str, ...],
                                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    module = "evalfleet_no_such_plugin" if source is None else f"evalfleet_hostile_plugin_{case_id.replace('-', '_')}"
    if source is not None:
        (tmp_path / f"{module}.py").write_text(source)
        monkeypatch.syspath_prepend(str(tmp_path))
    exp = tmp_path / "good.yaml"
    exp.write_text(GOOD)
    monkeypatch.setenv(plugins.PLUGINS_ENV, f"{module}")
    monkeypatch.setattr(plugins, "_loaded", False)
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    rc = main(["plan", str(exp)])
    check_line(capsys.readouterr().err, rc, "EVALFLEET_PLUGINS", repr(module), also)
    assert snapshot(tmp_path) == before
    assert plugins._loaded is False  # a corrected environment is read again


# ------------------------------------------------------------------------- real processes, as a user sees them

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2] / "src"),
                                                                   os.environ.get("PYTHONPATH")]))}
# One or two cases of every category, each through every command, in a real `python -m evalfleet.cli`.
SUBPROCESS_SAMPLE = ["alias-bomb", "20000-deep-lists", "dev-zero", "fifo", "nan-choice-value", "num-episodes-1e30",
                     "run-name-ending-in-newline", "run-name-300-characters", "num-episodes-a-string",
                     "override-without-equals", "override-deep-value"]


def cli(*argv: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evalfleet.cli", *argv], capture_output=True, text=True,
                          env=env or ENV, cwd=cwd, timeout=60)


@pytest.mark.parametrize("case_id", SUBPROCESS_SAMPLE)
def test_hostile_input_in_a_real_process(case_id: str, tmp_path: Path) -> None:
    case = next(c for _, c in CASES if c.id == case_id)
    path = materialise(case, tmp_path)
    work = tmp_path / "cwd"
    work.mkdir()
    out = tmp_path / "out"
    for command in COMMANDS:
        proc = cli(*argv_for(command, path, case, out), cwd=work)
        check_line(proc.stderr, proc.returncode, str(path) if case.where == "file" else case.where, case.key,
                   case.also)
        assert proc.stdout == "" and not out.exists() and not any(work.iterdir())


def test_plugin_error_in_a_real_process(tmp_path: Path) -> None:
    exp = tmp_path / "good.yaml"
    exp.write_text(GOOD)
    proc = cli("plan", str(exp), env={**ENV, "EVALFLEET_PLUGINS": "evalfleet_no_such_plugin"})
    check_line(proc.stderr, proc.returncode, "EVALFLEET_PLUGINS", "'evalfleet_no_such_plugin'")


PIPE_COMMANDS = [["overrides", "{exp}"], ["plan", "{exp}", "--json"], ["plan", "{exp}"]]


@pytest.mark.parametrize("argv", PIPE_COMMANDS, ids=["overrides", "plan-json", "plan-table"])
def test_reader_gone_before_the_first_line_is_a_normal_end(argv: list[str], tmp_path: Path) -> None:
    """`evalfleet overrides EXP | head`: the reader may be gone before we write; exit 0, nothing on stderr
    (was BrokenPipeError, exit 1). The read end is closed before the process starts, so every write fails."""
    exp = tmp_path / "good.yaml"
    exp.write_text(GOOD)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "evalfleet.cli", *[a.format(exp=exp) for a in argv]],
                              stdout=write_end, stderr=subprocess.PIPE, env=ENV, timeout=60)
    finally:
        os.close(write_end)
    assert proc.returncode == 0 and proc.stderr == b"", (proc.returncode, proc.stderr.decode())


def test_reader_closing_the_pipe_after_one_line_is_a_normal_end(tmp_path: Path) -> None:
    """`evalfleet plan EXP --json | head -1` on a plan of megabytes: the writer is blocked on a full pipe
    when the reader leaves."""
    exp = tmp_path / "big.yaml"
    exp.write_text(GOOD.replace("num_episodes: 2", "num_episodes: 20000"))
    proc = subprocess.Popen([sys.executable, "-m", "evalfleet.cli", "plan", str(exp), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    rc = proc.wait(timeout=60)
    assert first.strip() == b"{"
    assert rc == 0 and err == "", (rc, err)


# --------------------------------------------------------------- recorded-latency files (issue #52, finding 10)

def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _written(name: str, text: str) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        (tmp / name).write_text(text)
        return tmp / name
    return make


LATENCY_FILES = {  # id: (the file, made in a folder of its own; what the line must say besides the path and key)
    "dev-zero": (lambda tmp: Path("/dev/zero"), "not a regular file"),
    "fifo": (lambda tmp: _fifo(tmp / "latencies.fifo"), "not a regular file"),
    "a-folder": (lambda tmp: tmp, "folder"),
    "100000-deep-list": (_written("deep.json", "[" * 100_000 + "]" * 100_000), "nested more than 64 levels"),
    "65-deep-record-line": (_written("deep.jsonl", '{"policy_latency_ms": 5, "x": ' + "[" * 65 + "]" * 65 + "}\n"),
                            "nested more than 64 levels"),
    "100001-values": (_written("many.json", "[" + ",".join(["1"] * 100_001) + "]"), "more than 100,000"),
}


def _memory_guard() -> None:
    """A reader of /dev/zero fails the test with a MemoryError instead of exhausting the machine."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))


@pytest.mark.parametrize("case_id", list(LATENCY_FILES))
def test_a_recorded_latency_file_that_is_no_list_of_latencies_is_refused_at_plan(case_id: str,
                                                                                tmp_path: Path) -> None:
    make, part = LATENCY_FILES[case_id]
    folder = tmp_path / "files"
    folder.mkdir()
    path = make(folder)
    exp = tmp_path / "exp.yaml"
    exp.write_text(run_doc(timing=f"{{mode: simulated, latency: {{recorded: '{path}'}}}}"))
    proc = subprocess.run([sys.executable, "-m", "evalfleet.cli", "plan", str(exp)], capture_output=True, text=True,
                          env=ENV, timeout=60, preexec_fn=_memory_guard)  # guards: a hang or a memory hog fails
    check_line(proc.stderr, proc.returncode, str(path), f"{RUN}.timing.latency.recorded", (part,))


def test_a_recorded_latency_file_of_lines_and_records_is_read(tmp_path: Path, capsys) -> None:
    """The harness can fail: numbers, a record with policy_latency_ms and one without, a blank line."""
    (tmp_path / "latencies.jsonl").write_text('10\n\n{"policy_latency_ms": 30.5}\n{"episode": 2}\n20\n')
    exp = tmp_path / "exp.yaml"
    exp.write_text(run_doc(timing="{mode: simulated, latency: {recorded: latencies.jsonl}}"))
    assert main(["plan", str(exp)]) == 0, capsys.readouterr().err
    from evalfleet.experiment.loading import load_experiment

    latency = load_experiment(str(exp)).experiment.runs["push_expert"].timing.latency
    assert latency.recorded == [10.0, 30.5, 20.0]


# ------------------------------------------------------------------- resume over garbled part files (tolerated)

GARBLED_PARTS = {
    "null": "null\n",
    "json-list": "[1, 2]\n",
    "non-int-episode": '{"run": "push_expert", "episode": "x", "status": "success"}\n',
    "non-numeric-attempt": '{"run": "push_expert", "episode": 0, "status": "error", "attempt": "zz"}\n',
}


@pytest.fixture(scope="module")
def finished_good_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One finished run of GOOD (its output folder), which each garbling test copies."""
    tmp = tmp_path_factory.mktemp("good_run")
    exp = tmp / "good.yaml"
    exp.write_text(GOOD)
    first = cli("run", str(exp), "--output", str(tmp / "out"), "--workers", "1", "--no-progress", cwd=tmp)
    assert first.returncode == 0, first.stderr
    return tmp / "out"


@pytest.mark.parametrize("kind", list(GARBLED_PARTS))
def test_resume_over_garbled_part_files_reruns_them_without_a_traceback(kind: str, tmp_path: Path,
                                                                        finished_good_run: Path) -> None:
    """A part file holding `null`, a JSON list or a record with garbage fields is garbled input, skipped like a
    torn line (DESIGN: readers tolerate them): the resume re-runs those episodes and ends cleanly."""
    import shutil

    exp = tmp_path / "good.yaml"
    exp.write_text(GOOD)
    out = tmp_path / "out"
    shutil.copytree(finished_good_run, out, symlinks=True)  # a finished run of GOOD, garbled below
    parts = sorted((out / "push_expert" / "parts").glob("*.jsonl"))
    assert parts
    for part in parts:
        part.write_text(GARBLED_PARTS[kind])
    (out / "push_expert" / "episode_results.jsonl").write_text(GARBLED_PARTS[kind])
    again = cli("run", str(exp), "--output", str(out), "--workers", "1", "--no-progress", "--resume", cwd=tmp_path)
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
    result = json.loads((out / "experiment_result.json").read_text())
    assert "push_expert" in json.dumps(result) and "Traceback" not in again.stdout
    from evalfleet.rollout.records import latest_records

    assert sorted(latest_records(out, "push_expert")) == [0, 1]  # both planned episodes recorded again
