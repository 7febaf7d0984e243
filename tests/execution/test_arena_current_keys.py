"""Issue #26, must-show 1: an Experiment file shaped as Isaac Lab Arena's current ones, with labels,
environment_builder.placement_seed / language_instruction / camera size / episode_conditions_path and num_rebuilds,
given with --policy_config and --continue_on_error, plans, lists its overrides and dry-runs OSMO workflows that pass
the OSMO spec rules, whose runner tasks carry every key and flag to Arena's runner.

The file's shape is Arena's: isaaclab_arena_environments/experiment_configs/perflab/reduced_camera_benchmark_experiment
.yaml (a `shared:` environment / environment_builder with seed, placement_seed, camera_height, camera_width,
language_instruction / policy / num_rebuilds, and `runs:` as a map), settled_placement_replay_experiment.yaml (a
replay Run with no rollout_limit, its episodes given by the builder's recorded file) and ArenaRunCfg's `labels: {task,
policy}` (isaaclab_arena/evaluation/experiment_manifest.py reads `run_cfg.labels.task` / `.policy`); the policy file
is the policy section of osmo_failure_collection_smoke_experiment.yaml."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from evalfleet.cli import main
from test_osmo_rules import validate_workflow

EXPERIMENT = """\
shared:
  environment:
    type: pick_and_place_maple_table
    enable_cameras: true
    embodiment: droid_rel_joint_pos
    pick_up_object: rubiks_cube_hot3d_robolab
    destination_location: bowl_ycb_robolab
    hdr: home_office_robolab
  environment_builder:
    num_envs: 1
    env_spacing: 2.5
    seed: 42
    placement_seed: 42
    camera_height: 180
    camera_width: 320
    language_instruction: Pick up the Rubik's cube and place it in the bowl.
  policy:
    type: zero_action

runs:
  rubiks_cube_rebuilds:
    labels: {task: rubiks_cube_in_bowl, policy: pi05_droid}
    rollout_limit:
      num_episodes: 4
    num_rebuilds: 2
  rubiks_cube_replay:
    labels: {task: rubiks_cube_in_bowl, policy: pi05_droid}
    environment_builder:
      episode_conditions_path: recorded/episode_results_rebuild0.jsonl
    num_rebuilds: 1
"""

POLICY = """\
type: isaaclab_arena_openpi.policy.pi0_remote_policy.Pi0RemotePolicy
policy_variant: pi05
policy_device: cuda:0
remote_host: 127.0.0.1
remote_port: 8000
openpi_embodiment_adapter: droid
"""

# Three episodes as Arena's runner records them (episode_results_rebuild<R>.jsonl): what a replay reads.
RECORDED = "".join(json.dumps({"job_name": "earlier", "rebuild_idx": 0, "env_id": 0, "episode_in_env": i,
                               "success": i != 1, "variations": {"light": {"intensity": 500.0 + i}}}) + "\n"
                   for i in range(3))


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "recorded").mkdir()
    (tmp_path / "recorded" / "episode_results_rebuild0.jsonl").write_text(RECORDED)
    exp, policy = tmp_path / "rubiks_cube_experiment.yaml", tmp_path / "pi05_policy.yaml"
    exp.write_text(EXPERIMENT)
    policy.write_text(POLICY)
    return exp, policy


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_plan_shows_the_arena_keys_flags_and_the_episodes_arena_plays(files: tuple[Path, Path],
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    exp, policy = files
    rc, out, err = cli(capsys, "plan", str(exp), "--policy_config", str(policy), "--continue_on_error")
    assert rc == 0, err
    text = " ".join(out.split())
    # Arena splits num_episodes across rebuilds (run_execution.py _split_episodes_across_rebuilds): 4 in all, 2 + 2;
    # the replay Run plays the recorded file's 3 lines.
    assert "7 episodes" in text
    assert "4 episodes over 2 rebuilds (2+2)" in text
    assert "Isaac Lab Arena Runs" in text
    assert "environment pick_and_place_maple_table (Arena's)" in text
    assert "policy isaaclab_arena_openpi.policy.pi0_remote_policy.Pi0RemotePolicy (Arena's)" in text
    for shown in ("labels.task=rubiks_cube_in_bowl", "labels.policy=pi05_droid", "placement_seed=42",
                  "camera_height=180", "camera_width=320",
                  "language_instruction=\"Pick up the Rubik's cube and place it in the bowl.\"",
                  "episode_conditions_path='recorded/episode_results_rebuild0.jsonl'",
                  f"--policy_config {policy}", "--continue_on_error"):
        assert shown in text, shown

    rc, out, err = cli(capsys, "plan", str(exp), "--policy_config", str(policy), "--json")
    assert rc == 0, err
    runs = {r["name"]: r for r in json.loads(out)["runs"]}
    assert runs["rubiks_cube_rebuilds"]["num_episodes"] == 4
    assert runs["rubiks_cube_replay"]["num_episodes"] == 3
    assert {r["task"] for r in runs.values()} == {"rubiks_cube_in_bowl"}
    assert {r["policy"] for r in runs.values()} == {"pi05_droid"}


@pytest.mark.parametrize("command", [("overrides",), ("submit", "--backend", "osmo", "--list_overrides")])
def test_overrides_list_the_new_keys(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
                                     command: tuple[str, ...]) -> None:
    exp, policy = files
    rc, out, err = cli(capsys, command[0], str(exp), *command[1:], "--policy_config", str(policy))
    assert rc == 0, err
    lines = set(out.splitlines())
    for run in ("rubiks_cube_rebuilds", "rubiks_cube_replay"):
        for line in (f"runs.{run}.labels.task=rubiks_cube_in_bowl", f"runs.{run}.labels.policy=pi05_droid",
                     f"runs.{run}.environment_builder.placement_seed=42",
                     f"runs.{run}.environment_builder.camera_height=180",
                     f"runs.{run}.environment_builder.camera_width=320",
                     f"runs.{run}.policy.type=isaaclab_arena_openpi.policy.pi0_remote_policy.Pi0RemotePolicy"):
            assert line in lines, line
        assert any(x.startswith(f"runs.{run}.environment_builder.language_instruction=") for x in lines)
    assert "runs.rubiks_cube_rebuilds.num_rebuilds=2" in lines
    assert "runs.rubiks_cube_replay.num_rebuilds=1" in lines
    assert ("runs.rubiks_cube_replay.environment_builder.episode_conditions_path="
            "recorded/episode_results_rebuild0.jsonl") in lines
    assert "runs.rubiks_cube_replay.rollout_limit.num_episodes=3" in lines  # the file's count, as Arena takes it
    assert not any(x.startswith("shared.policy") for x in lines)  # replaced whole by --policy_config


def test_osmo_dry_run_passes_the_validator_and_its_runner_tasks_carry_everything(
        files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    exp, policy = files
    rc, out, err = cli(capsys, "submit", str(exp), "--backend", "osmo", "--dry_run", "--policy_config", str(policy),
                       "--continue_on_error")
    assert rc == 0, err
    (doc,) = [d for d in yaml.safe_load_all(out) if d]
    validate_workflow(doc)
    runners = {t["name"]: t for g in doc["workflow"]["groups"] for t in g["tasks"] if t.get("lead")}
    tasks = {name: {f["path"]: f["contents"] for f in t["files"]} for name, t in runners.items()
             if name != "collect"}
    assert len(tasks) == 2
    by_run = {}
    for files_of in tasks.values():
        single = yaml.safe_load(files_of["/tmp/evalfleet/experiment.yaml"])
        (name,) = single["runs"]
        by_run[name] = (single["runs"][name], files_of)

    for name, (run, files_of) in by_run.items():
        # Arena's runner gets every key in Arena's spelling ...
        assert run["labels"] == {"task": "rubiks_cube_in_bowl", "policy": "pi05_droid"}
        builder = run["environment_builder"]
        assert builder["placement_seed"] == 42 and builder["seed"] == 42
        assert (builder["camera_height"], builder["camera_width"]) == (180, 320)
        assert builder["language_instruction"] == "Pick up the Rubik's cube and place it in the bowl."
        # ... the --policy_config policy (wired to its server task), not the file's zero_action ...
        assert run["policy"]["type"] == "isaaclab_arena_openpi.policy.pi0_remote_policy.Pi0RemotePolicy"
        assert run["policy"]["policy_variant"] == "pi05"
        # ... and --continue_on_error on the command line of Arena's runner.
        attempt = files_of["/tmp/evalfleet/arena_attempt.sh"]
        assert "isaaclab_arena/evaluation/experiment_runner.py" in attempt
        assert "--continue_on_error" in attempt

    rebuilds, rebuild_files = by_run["rubiks_cube_rebuilds"]
    assert rebuilds["num_rebuilds"] == 2 and rebuilds["rollout_limit"] == {"num_episodes": 4}
    assert "--planned 4 " in rebuild_files["/tmp/evalfleet/run.sh"]  # 4 in all, not 4 per rebuild
    replay, replay_files = by_run["rubiks_cube_replay"]
    # The recorded file travels in the task and Arena takes the count from it (no num_episodes beside it).
    assert replay["environment_builder"]["episode_conditions_path"] == "/tmp/evalfleet/episode_conditions.jsonl"
    assert replay_files["/tmp/evalfleet/episode_conditions.jsonl"] == RECORDED
    assert replay["num_rebuilds"] == 1 and "rollout_limit" not in replay
    assert "--planned 3 " in replay_files["/tmp/evalfleet/run.sh"]


def test_without_continue_on_error_arenas_runner_stops_at_a_failed_run_as_arena_does(
        files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    exp, _ = files
    rc, out, err = cli(capsys, "submit", str(exp), "--backend", "osmo", "--dry-run")
    assert rc == 0, err
    assert "--continue_on_error" not in out
    assert "zero_action" in out  # the file's own policy without --policy_config


def _plan_error(capsys: pytest.CaptureFixture[str], path: Path, *argv: str) -> str:
    rc, out, err = cli(capsys, "plan", str(path), *argv)
    assert rc == 2, out
    assert len(err.strip().splitlines()) == 1
    return err


def test_arenas_episode_conditions_rules_are_checked_at_load(files: tuple[Path, Path],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    exp, _ = files
    text = exp.read_text()
    exp.write_text(text.replace("    num_rebuilds: 1\n", "    num_rebuilds: 2\n"))
    err = _plan_error(capsys, exp)
    assert "runs.rubiks_cube_replay.num_rebuilds" in err and "num_rebuilds: 1" in err
    exp.write_text(text.replace("    num_rebuilds: 1\n", "    num_rebuilds: 1\n    rollout_limit: {num_episodes: 5}\n"))
    err = _plan_error(capsys, exp)
    assert "runs.rubiks_cube_replay.rollout_limit.num_episodes" in err and "lists 3 episodes" in err
    exp.write_text(text.replace("recorded/episode_results_rebuild0.jsonl", "recorded/missing.jsonl"))
    err = _plan_error(capsys, exp)
    assert "runs.rubiks_cube_replay.environment_builder.episode_conditions_path" in err and "does not exist" in err


def test_a_label_that_disagrees_with_the_evalfleet_tag_names_both_keys(files: tuple[Path, Path],
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    exp, _ = files
    exp.write_text(exp.read_text().replace("    num_rebuilds: 2\n", "    num_rebuilds: 2\n    task: other_task\n"))
    err = _plan_error(capsys, exp)
    assert "runs.rubiks_cube_rebuilds" in err and "task ('other_task')" in err and "labels.task" in err


def test_fewer_episodes_than_rebuilds_is_refused_as_arena_refuses_it(files: tuple[Path, Path],
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    exp, _ = files
    exp.write_text(exp.read_text().replace("      num_episodes: 4\n", "      num_episodes: 1\n"))
    err = _plan_error(capsys, exp)
    assert "num_episodes (1) is below num_rebuilds (2)" in err


@pytest.mark.parametrize(("typo", "expected"), [("nosuch", "unknown policy type 'nosuch'"),
                                                ("openpi_remot", "did you mean openpi_remote")])
def test_a_bare_unknown_type_is_not_taken_for_an_arena_type(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            typo: str, expected: str) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(f"runs:\n  r:\n    environment: {{type: pick_and_place_maple_table}}\n"
                   f"    policy: {{type: {typo}}}\n    rollout_limit: {{num_episodes: 1}}\n")
    err = _plan_error(capsys, exp)
    assert expected in err and "runs.r.policy.type" in err
    # A registered Arena name that evalfleet does not list is Arena's when marked so; Arena's runner reads NAME.
    exp.write_text(exp.read_text().replace(typo, "arena:my_lab_policy"))
    rc, out, err = cli(capsys, "submit", str(exp), "--backend", "osmo", "--dry-run")
    assert rc == 0, err
    validate_workflow(yaml.safe_load(out))
    assert "type: my_lab_policy" in out and "arena:my_lab_policy" not in out.split("experiment.yaml")[1]


def test_evalfleet_environments_take_the_equivalents_or_name_the_key(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # Arena's recorded lines, nested asset → variation → value, here for one of Meta-World's variations.
    (tmp_path / "recorded.jsonl").write_text("".join(json.dumps({"episode_in_env": i, "variations": {
        "scene": {"friction_scale": 1.0 + i / 10}}}) + "\n" for i in range(3)))
    exp = tmp_path / "exp.yaml"
    head = "runs:\n  r:\n    environment: {type: metaworld, task: reach-v3}\n    policy: {type: metaworld_expert}\n"
    exp.write_text(head + "    rollout_limit: {num_episodes: 2}\n"
                   "    environment_builder: {language_instruction: reach the red dot}\n")
    rc, out, err = cli(capsys, "overrides", str(exp))
    assert rc == 0, err
    assert "runs.r.environment.instruction=reach the red dot" in out.splitlines()
    exp.write_text(head + "    rollout_limit: {num_episodes: 2}\n    environment_builder: {placement_seed: 3}\n")
    err = _plan_error(capsys, exp)
    assert "runs.r.environment_builder.placement_seed" in err and "Isaac Lab Arena" in err
    # episode_conditions_path means `conditions:` for evalfleet's environments: the same replay, 3 episodes.
    exp.write_text(head + "    environment_builder: {episode_conditions_path: recorded.jsonl}\n")
    rc, out, err = cli(capsys, "plan", str(exp), "--json")
    assert rc == 0, err
    (run,) = json.loads(out)["runs"]
    assert run["num_episodes"] == 3
    exp.write_text(head.replace("reach-v3}", "reach-v3}\n    conditions: recorded.jsonl") +
                   "    environment_builder: {episode_conditions_path: recorded.jsonl}\n")
    err = _plan_error(capsys, exp)
    assert "runs.r.environment_builder.episode_conditions_path and runs.r.conditions" in err


def test_policy_config_replaces_every_runs_policy_whole_and_overrides_apply_on_top(tmp_path: Path) -> None:
    """A real `evalfleet run` with --policy_config and --continue_on_error: the file's policy (zero) replaces the
    shared and per-Run policies whole (the Run's own `seed` option of `random` does not leak into it), an override
    on the Run's policy still applies after it, and the records say the policy the file gave."""
    from evalfleet_testkit import run_evalfleet

    env = {"type": "pusht", "obs_type": "state", "actions": "normalized", "max_steps": 3}
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({"name": "pc", "shared": {"environment": env, "policy": {"type": "random"},
                                                            "rollout_limit": {"num_episodes": 2}},
                                   "runs": {"a": {"policy": {"type": "random", "seed": 5}}, "b": {}}}))
    policy = tmp_path / "policy.yaml"
    policy.write_text("policy:\n  type: zero\n")
    done = run_evalfleet("overrides", str(exp), "--policy_config", str(policy))
    assert done.returncode == 0, done.stderr
    assert {"runs.a.policy.type=zero", "runs.b.policy.type=zero"} <= set(done.stdout.splitlines())
    assert not any(line.startswith(("runs.a.policy.seed", "shared.policy")) for line in done.stdout.splitlines())
    out = tmp_path / "out"
    done = run_evalfleet("run", str(exp), "--policy_config", str(policy), "--continue_on_error", "--output", str(out),
                         "--workers", "1", "--no-progress", "runs.b.policy_name=zero_b")
    assert done.returncode == 0, done.stderr
    written = yaml.safe_load((out / "experiment.yaml").read_text())["runs"]
    assert written["a"]["policy"] == {"type": "zero"} and written["b"]["policy"] == {"type": "zero"}
    result = json.loads((out / "experiment_result.json").read_text())
    assert {name: r["policy"] for name, r in result["runs"].items()} == {"a": "zero", "b": "zero_b"}


def test_a_bad_policy_config_names_its_file_and_key(files: tuple[Path, Path], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    exp, _ = files
    bad = tmp_path / "bad_policy.yaml"
    bad.write_text("policy_variant: pi05\n")
    err = _plan_error(capsys, exp, "--policy_config", str(bad))
    assert str(bad) in err and "type" in err
    bad.write_text("type: metaworld_expert\nnot_an_option: 1\n")
    err = _plan_error(capsys, exp, "--policy_config", str(bad))
    assert f"{bad}: not_an_option" in err and "--policy_config" in err


def test_camera_size_becomes_image_size_or_names_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    exp = tmp_path / "exp.yaml"
    body = ("    rollout_limit: {num_episodes: 1}\n"
            "    environment_builder: {camera_height: 96, camera_width: 128}\n")
    exp.write_text("runs:\n  r:\n    environment: {type: metaworld, task: reach-v3}\n"
                   "    policy: {type: metaworld_expert}\n" + body)
    rc, out, err = cli(capsys, "overrides", str(exp))
    assert rc == 0, err
    assert "runs.r.environment.image_size=[96, 128]" in out.splitlines()
    exp.write_text("runs:\n  r:\n    environment: {type: gymnasium, id: CartPole-v1}\n"
                   "    policy: {type: zero}\n" + body)
    err = _plan_error(capsys, exp)
    assert "runs.r.environment_builder.camera_height" in err and "no equivalent in environment type 'gymnasium'" in err


def test_an_arena_run_refuses_an_evalfleet_condition_set_instead_of_ignoring_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Arena's runner samples its own episodes: a `conditions:` set on an Arena Run used to be resolved on evalfleet's
    side and then never reach Arena (its episodes would not be the set's); now it is refused, naming the key."""
    source = tmp_path / "src.yaml"
    source.write_text("runs:\n  r:\n    environment: {type: pick_and_place_maple_table}\n"
                      "    policy: {type: zero_action}\n    rollout_limit: {num_episodes: 3}\n")
    rc, _, err = cli(capsys, "conditions", "export", str(source), "--output", str(tmp_path / "set.json"))
    assert rc == 0, err
    replay = tmp_path / "rep.yaml"
    replay.write_text(source.read_text().replace("    rollout_limit: {num_episodes: 3}\n",
                                                 "    conditions: set.json\n"))
    err = _plan_error(capsys, replay)
    assert "runs.r.conditions" in err and "episode_conditions_path" in err and str(replay) in err
    out_dir = tmp_path / "out"
    rc, _, err = cli(capsys, "submit", str(replay), "--backend", "osmo", "--dry-run", "--output-dir", str(out_dir))
    assert rc == 2 and "runs.r.conditions" in err
    assert not out_dir.exists()
