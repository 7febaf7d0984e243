"""The Meta-World registration that Experiment files are validated against: its 50 task names match the
installed Meta-World, every task has a scripted expert, and `evalfleet variations` lists its variations."""

from __future__ import annotations

import json

import pytest

from evalfleet.cli import main
from evalfleet.policies.builtin import expert_class_name
from evalfleet.sim.metaworld_spec import TASK_INSTRUCTIONS, VARIATIONS

FIVE = ["robot.action_noise", "robot.observation_noise", "scene.friction_scale", "object.mass_scale",
        "object.position_noise"]


def test_task_names_match_the_installed_metaworld() -> None:
    import metaworld.env_dict as env_dict

    assert len(TASK_INSTRUCTIONS) == 50
    assert set(TASK_INSTRUCTIONS) == set(env_dict.ALL_V3_ENVIRONMENTS)
    assert all(text.strip() and text == text.strip() for text in TASK_INSTRUCTIONS.values())


def test_every_task_has_a_scripted_expert() -> None:
    import metaworld.policies as policies

    missing = [t for t in TASK_INSTRUCTIONS if not isinstance(getattr(policies, expert_class_name(t), None), type)]
    assert missing == []
    assert expert_class_name("pick-place-v3") == "SawyerPickPlaceV3Policy"
    assert expert_class_name("peg-insert-side-v3") == "SawyerPegInsertionSideV3Policy"
    # Every expert is used by exactly one task.
    assert len({expert_class_name(t) for t in TASK_INSTRUCTIONS}) == 50


def test_variations_command_lists_the_five_with_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["variations", "metaworld"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"metaworld: {len(VARIATIONS)} variations"  # the five + camera/scene ones
    for name in FIVE:
        line = next(line for line in out.splitlines() if line.strip().startswith(name))
        assert "default=" in line and "nominal=" in line
    assert 'default={"distribution": "uniform", "low": 0.0, "high": 0.5}' in out
    assert "components=x,y,z" in out


def test_variations_command_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["variations", "metaworld", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [v["name"] for v in data["metaworld"]][:5] == FIVE
    by_name = {v["name"]: v for v in data["metaworld"]}
    assert by_name["object.position_noise"]["kind"] == "vector"
    assert by_name["object.position_noise"]["components"] == ["x", "y", "z"]
    assert by_name["object.position_noise"]["default_sampler"] == {
        "distribution": "uniform", "low": [-0.03, -0.03, 0.0], "high": [0.03, 0.03, 0.0]}
    assert by_name["scene.friction_scale"]["nominal"] == 1.0
    for v in data["metaworld"]:
        assert v["description"]
        if v["nominal"] is None:  # a replacement colour: the model's own look is no value in the range
            continue
        sampler = v["default_sampler"]
        lows, highs = sampler["low"], sampler["high"]
        lows, highs = (lows, highs) if isinstance(lows, list) else ([lows], [highs])
        nominal = v["nominal"] if isinstance(v["nominal"], list) else [v["nominal"]]
        # The nominal (unchanged scene) value lies inside the default range.
        assert all(lo <= n <= hi for lo, n, hi in zip(lows, nominal, highs)), v["name"]


def test_variations_command_without_type_lists_every_environment(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["variations", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [v["name"] for v in data["metaworld"]][:5] == FIVE


def test_registered_variations_are_the_ones_listed() -> None:
    assert list(VARIATIONS)[:5] == FIVE  # then the camera and scene variations (tests/sim)
