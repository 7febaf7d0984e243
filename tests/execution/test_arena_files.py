"""Isaac Lab Arena's own experiment files (copies in tests/data/arena/, unchanged) load, plan, list their
overrides and dry-run OSMO workflows that pass OSMO's spec rules; flat dotted keys mean the nested form."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from evalfleet.cli import main
from evalfleet.errors import UserError
from evalfleet.experiment.loading import load_experiment
from evalfleet.experiment.validation import is_external_type
from test_osmo_rules import validate_workflow

DATA = Path(__file__).resolve().parents[1] / "data" / "arena"
FILES = sorted(DATA.glob("*.yaml"))
ARENA_SUBMISSION_OVERRIDES = ("experiment_runner.image", "experiment_runner.record_camera_video",
                              "experiment_runner.record_viewport_video", "osmo.priority", "osmo.exec_timeout",
                              "osmo.queue_timeout", "osmo.dry_run")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_there_are_several_arena_files_including_the_two_named_ones() -> None:
    names = {f.name for f in FILES}
    assert len(FILES) >= 5
    assert {"banana_in_bowl_variation_record_replay.yaml", "osmo_failure_collection_smoke_experiment.yaml"} <= names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_loads_plans_lists_overrides_and_dry_runs(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = yaml.safe_load(path.read_text())
    loaded = load_experiment(path)
    runs = raw["runs"]
    names = [r["name"] for r in runs] if isinstance(runs, list) else list(runs)
    assert list(loaded.experiment.runs) == names

    rc, out, err = cli(capsys, "plan", str(path), "--json")
    assert rc == 0, err
    assert [r["name"] for r in json.loads(out)["runs"]] == names

    rc, out, err = cli(capsys, "overrides", str(path))
    assert rc == 0, err
    for key in ARENA_SUBMISSION_OVERRIDES:
        assert any(line.startswith(key + "=") for line in out.splitlines()), key

    rc, out, err = cli(capsys, "submit", str(path), "--backend", "osmo", "--dry-run")
    assert rc == 0, err
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert docs
    for doc in docs:
        validate_workflow(doc)
    groups = [g["name"] for d in docs for g in d["workflow"]["groups"]]
    assert len([g for g in groups if g != "collect-group"]) == len(names)


def test_flat_dotted_variations_mean_the_nested_form() -> None:
    run = load_experiment(DATA / "banana_in_bowl_variation_record_replay.yaml").experiment.runs[
        "banana_in_bowl_variations"]
    assert set(run.variations) == {"light.hdr_image", "bowl.disappear",
                                   "droid_abs_joint_pos.camera_extrinsics_wrist_camera"}
    assert run.variations["light.hdr_image"].enabled
    assert run.variations["light.hdr_image"].options()["hdr_names"] == [
        "home_office_robolab", "billiard_hall_robolab", "garage_robolab"]
    assert run.variations["bowl.disappear"].sampler_cfg.model_extra == {"probability": 0.5}
    wrist = run.variations["droid_abs_joint_pos.camera_extrinsics_wrist_camera"].sampler()
    assert wrist == {"distribution": "uniform", "low": [-0.04] * 3, "high": [0.04] * 3}


def _write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(body)
    return path


RUN_HEAD = """runs:
  r:
    environment: {type: pick_and_place_maple_table, embodiment: droid_abs_joint_pos}
    policy: {type: zero_action}
"""


def test_mixed_flat_and_nested_forms_merge_everywhere(tmp_path: Path) -> None:
    flat = load_experiment(_write(tmp_path, RUN_HEAD + """    rollout_limit.num_episodes: 3
    environment_builder.num_envs: 2
    environment_builder:
      placement_seed: 7
    variations:
      light.hdr_image.enabled: true
      light:
        hdr_image:
          hdr_names: [a]
""")).resolved_document()["runs"]["r"]
    assert flat["rollout_limit"] == {"num_episodes": 3}
    assert flat["environment_builder"]["num_envs"] == 2 and flat["environment_builder"]["placement_seed"] == 7
    assert flat["variations"]["light.hdr_image"] == {"enabled": True, "hdr_names": ["a"]}


def test_a_conflict_between_spellings_names_both_keys(tmp_path: Path) -> None:
    path = _write(tmp_path, RUN_HEAD + """    rollout_limit: {num_episodes: 1}
    variations:
      light.hdr_image.enabled: true
      light: {hdr_image: {enabled: false}}
""")
    with pytest.raises(UserError) as exc:
        load_experiment(path)
    message = str(exc.value)
    assert 'runs.r.variations["light.hdr_image.enabled"]' in message
    assert "runs.r.variations.light.hdr_image.enabled" in message


def test_arena_builder_and_runner_keys_are_carried_to_the_runner_task(tmp_path: Path) -> None:
    from evalfleet.backends.osmo.workflow import render_workflows

    path = _write(tmp_path, RUN_HEAD + """    rollout_limit: {num_episodes: 2}
    num_rebuilds: 2
    environment_builder:
      language_instruction: Pick up the cube.
      placement_seed: 3
      env_spacing: 5.0
      device: cuda:0
""")
    (wf,) = render_workflows(load_experiment(path))
    runner = wf.spec["workflow"]["groups"][0]["tasks"][0]
    files = {f["path"]: f["contents"] for f in runner["files"]}
    single = yaml.safe_load(next(c for p, c in files.items() if p.endswith(".yaml")))
    run = single["runs"]["r"]
    assert run["num_rebuilds"] == 2
    # Arena's runner gets the keys the file set, not evalfleet's defaults (no num_envs: 1 it never asked for).
    assert run["environment_builder"] == {"language_instruction": "Pick up the cube.", "placement_seed": 3,
                                          "env_spacing": 5.0, "device": "cuda:0"}


def test_registered_arena_names_are_external_but_near_misses_get_did_you_mean(tmp_path: Path) -> None:
    known = ["metaworld", "pusht"]
    assert is_external_type("pick_and_place_maple_table", known)
    assert not is_external_type("metaworl", known)
    path = _write(tmp_path,
                  RUN_HEAD.replace("pick_and_place_maple_table", "metaworl") + "    rollout_limit: {num_episodes: 1}\n")
    with pytest.raises(UserError, match="did you mean metaworld"):
        load_experiment(path)


def test_run_refuses_an_arena_type_with_one_line_and_writes_nothing(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    rc, stdout, err = cli(capsys, "run", str(DATA / "maple_table_experiment.yaml"), "--output", str(out))
    assert rc == 2
    assert len(err.strip().splitlines()) == 1
    assert "pick_and_place_maple_table" in err and "evalfleet submit" in err
    assert not out.exists()


def test_osmo_dry_run_setting_is_the_dry_run_flag(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = cli(capsys, "submit", str(DATA / "maple_table_experiment.yaml"), "--backend", "osmo",
                       "osmo.dry_run=true")
    assert rc == 0, err
    validate_workflow(yaml.safe_load(out))
