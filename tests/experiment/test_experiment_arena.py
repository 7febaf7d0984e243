"""An Isaac Lab Arena-shaped Experiment (tests/data/arena_experiment.yaml): types that are not installed
here still load, list overrides and plan; Arena's override spellings take effect; only `run` refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from evalfleet.cli import main
from evalfleet.experiment.loading import load_experiment

ARENA = Path(__file__).resolve().parents[2] / "tests" / "data" / "arena_experiment.yaml"
WRIST = "droid_abs_joint_pos.camera_extrinsics_wrist_camera"
EXTERNAL = "droid_abs_joint_pos.camera_extrinsics_external_camera"
RUNS = ["banana_in_bowl_pi0", "banana_in_bowl_cosmos", "mug_on_plate_pi0", "mug_on_plate_cosmos"]
PI0 = "isaaclab_arena_openpi.policy.pi0_remote_policy.Pi0RemotePolicy"
COSMOS = "isaaclab_arena_cosmos.policy.cosmos_remote_policy.CosmosActionEdgeRemotePolicy"


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


def plan(capsys: pytest.CaptureFixture[str], *overrides: str) -> dict:
    data = json.loads(cli(capsys, "plan", str(ARENA), *overrides, "--json"))
    return {"top": data, **{r["name"]: r for r in data["runs"]}}


def test_the_file_has_the_arena_shape() -> None:
    raw = ARENA.read_text()
    assert "&pi0_policy" in raw and "*pi0_policy" in raw and "&cosmos_policy" in raw and "*cosmos_policy" in raw
    doc = yaml.safe_load(raw)
    shared = doc["shared"]
    assert shared["environment"]["enable_cameras"] is True
    assert shared["environment_builder"]["num_envs"] == 4
    assert shared["rollout_limit"]["num_episodes"] == 100
    wrist = shared["variations"]["droid_abs_joint_pos"]["camera_extrinsics_wrist_camera"]
    assert wrist["enabled"] is False and len(wrist["sampler_cfg"]["low"]) == len(wrist["sampler_cfg"]["high"]) == 6
    assert list(doc["runs"]) == RUNS
    for run in doc["runs"].values():
        assert run["environment"]["type"].startswith("isaaclab_arena_environments/robolab/tasks/")
        assert {"remote_host", "remote_port"} <= set(run["policy"])


def test_loads_with_untyped_options_passed_through() -> None:
    exp = load_experiment(ARENA).experiment
    assert list(exp.runs) == RUNS
    pi0 = exp.runs["mug_on_plate_pi0"]
    assert pi0.policy.type == PI0 and pi0.policy.open_loop_horizon == 8
    assert pi0.policy.options() == {"remote_host": "localhost", "remote_port": 8000, "policy_config": "pi05_droid"}
    assert pi0.environment.options() == {"enable_cameras": True, "embodiment": "droid_abs_joint_pos"}
    assert pi0.environment_builder.num_envs == 4 and pi0.environment_builder.model_extra == {"headless": True}
    assert pi0.rollout_limit.num_episodes == 50  # the Run's own value beats shared's 100
    assert exp.runs["banana_in_bowl_pi0"].rollout_limit.num_episodes == 100
    assert exp.runs["banana_in_bowl_cosmos"].policy.type == COSMOS
    assert set(pi0.variations) == {WRIST, EXTERNAL, "banana.mass"}
    assert pi0.variations[WRIST].sampler()["low"] == [-0.02, -0.02, -0.02, -0.05, -0.05, -0.05]
    assert (pi0.task_tag(), pi0.policy_tag()) == ("mug_on_plate", "Pi0RemotePolicy")


def test_overrides_lists_it(capsys: pytest.CaptureFixture[str]) -> None:
    lines = cli(capsys, "overrides", str(ARENA)).splitlines()
    assert "shared.environment.enable_cameras=true" in lines
    assert "shared.environment_builder.num_envs=4" in lines
    assert "shared.rollout_limit.num_episodes=100" in lines
    assert f"shared.variations.{WRIST}.enabled=false" in lines
    assert f"shared.variations.{WRIST}.sampler_cfg.low=[-0.02, -0.02, -0.02, -0.05, -0.05, -0.05]" in lines
    for name in RUNS:
        assert f"runs.{name}.environment.enable_cameras=true" in lines
        assert f"runs.{name}.variations.{WRIST}.enabled=false" in lines
        assert any(line.startswith(f"runs.{name}.policy.remote_port=800") for line in lines)
    assert f"runs.mug_on_plate_cosmos.policy.type={COSMOS}" in lines


def test_plans_as_is(capsys: pytest.CaptureFixture[str]) -> None:
    p = plan(capsys)
    assert p["top"]["total_episodes"] == 100 + 100 + 50 + 50
    assert [r["name"] for r in p["top"]["runs"]] == RUNS
    for name in RUNS:
        assert p[name]["variations"] == {}  # every variation is disabled in the file
        assert all(e["variations"] == {} for e in p[name]["episodes"])
        assert p[name]["num_envs"] == 4
    assert p["banana_in_bowl_pi0"]["task"] == p["banana_in_bowl_cosmos"]["task"] == "banana_in_bowl"
    assert p["banana_in_bowl_pi0"]["policy"] == "Pi0RemotePolicy"
    assert p["mug_on_plate_cosmos"]["policy_type"] == COSMOS
    assert p["mug_on_plate_pi0"]["environment_type"] == "isaaclab_arena_environments/robolab/tasks/mug_on_plate.yaml"
    # The human-readable plan prints too.
    text = cli(capsys, "plan", str(ARENA))
    assert "300 episodes" in text


def test_arena_overrides_take_effect(capsys: pytest.CaptureFixture[str]) -> None:
    base = plan(capsys)
    p = plan(capsys, f"experiment_cfg.shared.variations.{WRIST}.enabled=true",
             "experiment_cfg.runs.banana_in_bowl_pi0.rollout_limit.num_episodes=4")
    assert p["banana_in_bowl_pi0"]["num_episodes"] == 4 and len(p["banana_in_bowl_pi0"]["episodes"]) == 4
    assert p["top"]["total_episodes"] == 4 + 100 + 50 + 50
    for name in RUNS:
        assert list(p[name]["variations"]) == [WRIST]  # enabled in shared, so in every Run
        assert p[name]["variations"][WRIST]["low"] == [-0.02, -0.02, -0.02, -0.05, -0.05, -0.05]
        for ep in p[name]["episodes"]:
            value = ep["variations"][WRIST]
            assert len(value) == 6
            lows, highs = p[name]["variations"][WRIST]["low"], p[name]["variations"][WRIST]["high"]
            assert all(lo <= v <= hi for v, lo, hi in zip(value, lows, highs))
        # Enabling a variation does not move the episode seeds.
        n = len(p[name]["episodes"])
        assert [e["seed"] for e in p[name]["episodes"]] == [e["seed"] for e in base[name]["episodes"]][:n]
    # Same task, different policy: the same draws (paired comparison).
    assert p["banana_in_bowl_pi0"]["episodes"] == p["banana_in_bowl_cosmos"]["episodes"][:4]
    assert p["mug_on_plate_pi0"]["episodes"] == p["mug_on_plate_cosmos"]["episodes"]


def test_nested_variation_override_inside_a_run(capsys: pytest.CaptureFixture[str]) -> None:
    p = plan(capsys, f"runs.mug_on_plate_cosmos.variations.{EXTERNAL}.enabled=true",
             "runs.mug_on_plate_cosmos.variations.banana.mass.enabled=true",
             "runs.mug_on_plate_cosmos.variations.banana.mass.sampler_cfg.high=0.1")
    assert set(p["mug_on_plate_cosmos"]["variations"]) == {EXTERNAL, "banana.mass"}
    assert all(0.05 <= e["variations"]["banana.mass"] <= 0.1 for e in p["mug_on_plate_cosmos"]["episodes"])
    assert p["mug_on_plate_pi0"]["variations"] == {}


def test_override_of_a_passthrough_policy_option(capsys: pytest.CaptureFixture[str]) -> None:
    loaded = load_experiment(ARENA, ["runs.banana_in_bowl_pi0.policy.remote_port=9000",
                                     "shared.environment.enable_cameras=false"])
    runs = loaded.experiment.runs
    assert runs["banana_in_bowl_pi0"].policy.options()["remote_port"] == 9000
    assert runs["mug_on_plate_pi0"].policy.options()["remote_port"] == 8000  # the alias was copied, not shared
    assert all(r.environment.options()["enable_cameras"] is False for r in runs.values())


@pytest.mark.parametrize("flag", [[], ["--list_overrides"]])
def test_run_refuses_uninstalled_types_and_writes_nothing(flag: list[str], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "x"
    rc = main(["run", str(ARENA), "--output", str(out), "--workers", "1", "--no-progress", *flag])
    stdout, err = capsys.readouterr()
    if flag:  # listing overrides is fine: nothing executes
        assert rc == 0 and "shared.rollout_limit.num_episodes=100" in stdout
    else:
        assert rc == 2, err
        lines = err.splitlines()
        assert len(lines) == 1, err
        assert str(ARENA) in lines[0]
        assert "banana_in_bowl_pi0" in lines[0]
        assert "isaaclab_arena_environments/robolab/tasks/banana_in_bowl.yaml" in lines[0]
        assert "not installed" in lines[0]
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_run_names_the_missing_policy_type_when_the_environment_is_known(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(
        "runs:\n"
        "  reach_pi0:\n"
        "    environment: {type: metaworld, task: reach-v3}\n"
        f"    policy: {{type: {PI0}, remote_host: localhost, remote_port: 8000}}\n"
        "    rollout_limit: {num_episodes: 2}\n"
    )
    out = tmp_path / "x"
    assert main(["run", str(path), "--output", str(out), "--workers", "1", "--no-progress"]) == 2
    line = capsys.readouterr().err.strip()
    assert "reach_pi0" in line and PI0 in line and "runs.reach_pi0.policy.type" in line
    assert not out.exists()


def test_yaml_merge_keys_extend_an_anchor(tmp_path: Path) -> None:
    text = ARENA.read_text().replace(
        "    policy: *cosmos_policy\n    rollout_limit:\n      num_episodes: 50\n",
        "    policy:\n      <<: *cosmos_policy\n      remote_port: 8002\n    rollout_limit:\n      num_episodes: 50\n")
    assert "<<: *cosmos_policy" in text
    path = tmp_path / "merged.yaml"
    path.write_text(text)
    runs = load_experiment(path).experiment.runs
    assert runs["mug_on_plate_cosmos"].policy.options() == {"remote_host": "localhost", "remote_port": 8002,
                                                             "checkpoint": "cosmos-action-edge-2b"}
    assert runs["banana_in_bowl_cosmos"].policy.options()["remote_port"] == 8001
