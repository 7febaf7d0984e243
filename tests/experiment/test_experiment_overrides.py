"""`evalfleet overrides`: every leaf is listed, and feeding any listed line back as an override leaves the
plan unchanged; merge order (defaults < shared < Run < override); the Arena spellings of the flags."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evalfleet.cli import main
from evalfleet.experiment.listing import format_leaves, overridable_leaves
from evalfleet.experiment.loading import load_experiment
from evalfleet.experiment.overrides import format_value
from evalfleet.experiment.plan import make_plan

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
DATA = ROOT / "tests" / "data"
ARENA = DATA / "arena_experiment.yaml"
TRICKY = DATA / "tricky_values.yaml"


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


def plan_json(capsys: pytest.CaptureFixture[str], path: Path, *overrides: str) -> dict:
    return json.loads(cli(capsys, "plan", str(path), *overrides, "--json", "--shard-size", "7"))


def listed(capsys: pytest.CaptureFixture[str], path: Path, *overrides: str) -> list[str]:
    return cli(capsys, "overrides", str(path), *overrides).splitlines()


@pytest.mark.parametrize("path", [QUICKSTART, ARENA, TRICKY], ids=["quickstart", "arena", "tricky"])
def test_every_listed_line_fed_back_leaves_the_plan_unchanged(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = listed(capsys, path)
    assert len(lines) > 20
    baseline = plan_json(capsys, path)
    for line in lines:
        assert "=" in line, line
        assert plan_json(capsys, path, line) == baseline, f"override {line!r} changed the plan"
    # ... and all of them at once, with the Arena prefix.
    assert plan_json(capsys, path, *[f"experiment_cfg.{line}" for line in lines]) == baseline
    # Listing with the overrides applied prints the same lines (an explicit tag may move in the order).
    assert sorted(listed(capsys, path, *lines)) == sorted(lines)


@pytest.mark.parametrize("path", [QUICKSTART, ARENA, TRICKY], ids=["quickstart", "arena", "tricky"])
def test_every_leaf_of_the_resolved_experiment_is_listed(path: Path) -> None:
    loaded = load_experiment(path)
    keys = {line.split("=", 1)[0] for line in format_leaves(overridable_leaves(loaded.experiment, loaded.document))}

    def leaves(prefix: str, value: object) -> list[str]:
        if isinstance(value, dict) and value:
            return [k for sub, v in value.items() for k in leaves(f"{prefix}.{sub}", v)]
        return [prefix]

    resolved = loaded.resolved_document()
    expected = {"name", "seed"} | {k for name, run in resolved["runs"].items() for k in leaves(f"runs.{name}", run)}
    expected |= {f"runs.{name}.{tag}" for name in resolved["runs"] for tag in ("task", "policy_name")}
    assert expected <= keys, sorted(expected - keys)
    shared = yaml.safe_load(path.read_text()).get("shared") or {}
    assert any(k.startswith("shared.") for k in keys) == bool(shared)


def test_quickstart_listing_shows_effective_values(capsys: pytest.CaptureFixture[str]) -> None:
    lines = listed(capsys, QUICKSTART)
    assert lines[:2] == ["name=quickstart", "seed=0"]
    assert "shared.rollout_limit.num_episodes=50" in lines
    for run, task, policy, enabled in [("push_expert", "push-v3", "expert", "false"),
                                       ("push_expert_noisy", "push-v3", "expert_noisy", "true"),
                                       ("pick_place_expert", "pick-place-v3", "expert", "false"),
                                       ("pick_place_expert_noisy", "pick-place-v3", "expert_noisy", "true")]:
        assert f"runs.{run}.rollout_limit.num_episodes=50" in lines  # from shared
        assert f"runs.{run}.policy.type=metaworld_expert" in lines  # from shared
        assert f"runs.{run}.environment.task={task}" in lines
        assert f"runs.{run}.task={task}" in lines  # the derived tag
        assert f"runs.{run}.policy_name={policy}" in lines
        assert f"runs.{run}.variations.robot.action_noise.enabled={enabled}" in lines
        assert f"runs.{run}.variations.robot.action_noise.low=0.2" in lines  # the sampler comes from shared
        assert f"runs.{run}.environment_builder.num_envs=1" in lines
        assert f"runs.{run}.recording.video=false" in lines  # a built-in default
    assert len(lines) == len(set(lines))


def test_listed_values_are_one_line_each_and_read_back(capsys: pytest.CaptureFixture[str]) -> None:
    lines = listed(capsys, TRICKY)
    got = dict(line.split("=", 1) for line in lines)
    # The block scalar with line breaks stays on its line, double-quoted.
    assert got["shared.environment.notes"] == '"first line\\nsecond line: with a colon\\n"'
    # Strings that YAML would read as something else are quoted.
    assert got["shared.policy.remote_port"] == "'8000'"
    assert got["shared.policy.api_key_env"] == "'yes'"
    assert got["shared.policy.maybe_null"] == "'null'"
    assert got["runs.beta-2.policy_name"] == "beta policy"
    assert got["runs.beta-2.environment_builder.seed"] == "11"
    loaded = load_experiment(TRICKY)
    for key, value in overridable_leaves(loaded.experiment, loaded.document):
        assert yaml.safe_load(got[key]) == value, key


@pytest.mark.parametrize("value", ["a\nb", "x\r\ny", "yes", "8000", "", "null", "~", "a: b", "#", "k=v", "é ✓",
                                   1e-7, 3, 2.5, True, None, [], {}, [1, "2", None], {"a": {"b": "c\nd"}}])
def test_format_value_reads_back_on_one_line(value: object) -> None:
    text = format_value(value)
    assert "\n" not in text and "\r" not in text
    assert yaml.safe_load(text) == value


def test_override_changes_what_it_names_only(capsys: pytest.CaptureFixture[str]) -> None:
    base = plan_json(capsys, QUICKSTART)
    changed = plan_json(capsys, QUICKSTART, "runs.push_expert.rollout_limit.num_episodes=4")
    runs = {r["name"]: r for r in changed["runs"]}
    assert runs["push_expert"]["num_episodes"] == 4
    assert runs["push_expert"]["episodes"] == base["runs"][0]["episodes"][:4]
    for old in base["runs"][1:]:
        assert runs[old["name"]] == {**old, "shards": runs[old["name"]]["shards"]}


# --- merge order: built-in defaults < shared < the Run's own values < command-line overrides ---------

MERGE = """\
shared:
  rollout_limit: {num_episodes: 8}
  environment_builder: {num_envs: 3}
  recording: {video: true, fps: 10}
  policy: {type: zero, chunk_size: 2}
  variations:
    robot.action_noise: {enabled: true, low: 0.1, high: 0.2}
runs:
  plain:
    environment: {type: metaworld, task: reach-v3}
  own:
    environment: {type: metaworld, task: reach-v3}
    rollout_limit: {num_episodes: 5}
    recording: {fps: 30}
    policy: {chunk_size: 4}
    variations:
      robot.action_noise: {enabled: false}
"""


@pytest.fixture
def merge_file(tmp_path: Path) -> Path:
    path = tmp_path / "merge.yaml"
    path.write_text(MERGE)
    return path


def test_merge_order(merge_file: Path) -> None:
    runs = load_experiment(merge_file).experiment.runs
    plain, own = runs["plain"], runs["own"]
    # shared over built-in defaults
    assert plain.rollout_limit.num_episodes == 8 and plain.environment_builder.num_envs == 3
    assert plain.recording.video is True and plain.recording.fps == 10 and plain.recording.every_n_episodes == 10
    assert plain.policy.type == "zero" and plain.policy.options() == {"chunk_size": 2}
    assert plain.variations["robot.action_noise"].enabled is True
    # a Run's own values over shared, deep-merged key by key
    assert own.rollout_limit.num_episodes == 5
    assert own.recording.fps == 30 and own.recording.video is True
    assert own.policy.type == "zero" and own.policy.options() == {"chunk_size": 4}
    spec = own.variations["robot.action_noise"]
    assert spec.enabled is False and spec.sampler() == {"distribution": "uniform", "low": 0.1, "high": 0.2}


def test_override_beats_run_and_shared_override_does_not_beat_run(merge_file: Path) -> None:
    # An override of a Run key wins over everything.
    overrides = ["runs.own.rollout_limit.num_episodes=2", "runs.plain.recording.fps=60"]
    runs = load_experiment(merge_file, overrides).experiment.runs
    assert runs["own"].rollout_limit.num_episodes == 2 and runs["plain"].recording.fps == 60
    # An override of shared changes shared: Runs that set the key themselves keep their own value.
    runs = load_experiment(merge_file, ["shared.rollout_limit.num_episodes=11",
                                        "experiment_cfg.shared.variations.robot.action_noise.high=0.9"]).experiment.runs
    assert runs["plain"].rollout_limit.num_episodes == 11
    assert runs["own"].rollout_limit.num_episodes == 5
    assert runs["plain"].variations["robot.action_noise"].high == 0.9
    assert runs["own"].variations["robot.action_noise"].high == 0.9  # the Run did not set `high` itself
    assert runs["own"].variations["robot.action_noise"].enabled is False


def test_switching_a_run_from_shared_num_episodes_to_num_steps(merge_file: Path) -> None:
    from evalfleet.errors import UserError

    # Run values are deep-merged over shared, so num_steps alone (or as a map) keeps shared's num_episodes: both set.
    for override in ("runs.plain.rollout_limit.num_steps=100", "runs.plain.rollout_limit={num_steps: 100}"):
        with pytest.raises(UserError, match="exactly one") as info:
            load_experiment(merge_file, [override])
        assert info.value.where == "command line" and override in info.value.message
    # null clears the shared value.
    run = load_experiment(merge_file, ["runs.plain.rollout_limit.num_steps=100",
                                       "runs.plain.rollout_limit.num_episodes=null"]).experiment.runs["plain"]
    assert run.rollout_limit.num_steps == 100 and run.rollout_limit.num_episodes is None


def test_seed_and_name_overrides(merge_file: Path) -> None:
    loaded = load_experiment(merge_file, ["seed=42", "name=renamed"])
    assert loaded.experiment.seed == 42 and loaded.experiment.name == "renamed"


def test_backend_overrides_are_kept_apart(merge_file: Path) -> None:
    loaded = load_experiment(merge_file, ["osmo.pool=my-pool", "ray.address=auto"])
    assert loaded.backend_settings == {"osmo": {"pool": "my-pool"}, "ray": {"address": "auto"}}
    assert make_plan(loaded, shard_size=3).to_json() == make_plan(load_experiment(merge_file), shard_size=3).to_json()


# --- command-line spellings ---------------------------------------------------------------------------


def test_experiment_cfg_alias(capsys: pytest.CaptureFixture[str]) -> None:
    plain = cli(capsys, "plan", str(QUICKSTART), "runs.push_expert.rollout_limit.num_episodes=4", "--json")
    for flag in ("--experiment_cfg", "--experiment-cfg"):
        aliased = cli(capsys, "plan", flag, str(QUICKSTART), "runs.push_expert.rollout_limit.num_episodes=4", "--json")
        assert aliased == plain
        assert cli(capsys, "plan", f"{flag}={QUICKSTART}", "--json",
                   "runs.push_expert.rollout_limit.num_episodes=4") == plain
    assert cli(capsys, "overrides", "--experiment_cfg", str(QUICKSTART)) == cli(capsys, "overrides", str(QUICKSTART))


@pytest.mark.parametrize("flag", ["--list-overrides", "--list_overrides"])
def test_run_list_overrides_prints_the_listing_and_runs_nothing(flag: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    expected = cli(capsys, "overrides", str(ARENA), "runs.mug_on_plate_pi0.rollout_limit.num_episodes=4")
    out = cli(capsys, "run", "--experiment_cfg", str(ARENA), flag, "runs.mug_on_plate_pi0.rollout_limit.num_episodes=4",
              "--output", str(tmp_path / "x"))
    assert out == expected
    assert "runs.mug_on_plate_pi0.rollout_limit.num_episodes=4" in out.splitlines()
    assert list(tmp_path.iterdir()) == []


def test_console_script_smoke(tmp_path: Path) -> None:
    exe = shutil.which("evalfleet")
    cmd = [exe] if exe else [sys.executable, "-m", "evalfleet.cli"]
    listing = subprocess.run([*cmd, "overrides", str(QUICKSTART)], capture_output=True, text=True, timeout=60,
                             check=True)
    line = "runs.pick_place_expert.rollout_limit.num_episodes=50"
    assert line in listing.stdout.splitlines()
    plan = subprocess.run([*cmd, "plan", str(QUICKSTART), line.replace("=50", "=3"), "--json"],
                          capture_output=True, text=True, timeout=60, check=True)
    data = json.loads(plan.stdout)
    assert {r["name"]: r["num_episodes"] for r in data["runs"]}["pick_place_expert"] == 3
    assert data["total_episodes"] == 153
    bad = subprocess.run([*cmd, "plan", str(tmp_path / "nope.yaml")], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stdout == "" and len(bad.stderr.splitlines()) == 1


def test_overrides_may_follow_options(capsys: pytest.CaptureFixture[str]) -> None:
    before = cli(capsys, "plan", str(QUICKSTART), "runs.push_expert.rollout_limit.num_episodes=4", "--json")
    assert cli(capsys, "plan", str(QUICKSTART), "--json", "runs.push_expert.rollout_limit.num_episodes=4") == before
