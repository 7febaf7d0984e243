"""Environment options that used to pass load and fail (or mean something else) in the runner: image sizes
beyond every camera (issue 30: `image_size: 100000`), booleans taken for integers (`task: true` was LIBERO
task 1), and pydantic's union member names in key paths (`task.int`). Each exits 2 at load with one line
naming the file and the key path the user wrote, and `run` writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalfleet.cli import main
from evalfleet.sim.spec_checks import MAX_IMAGE_SIDE


def doc(environment: str) -> str:
    return ("runs:\n  r1:\n    environment: " + environment + "\n    policy: {type: random}\n"
            "    rollout_limit: {num_episodes: 2}\n")


CASES = {
    # (environment, the key path, a substring of the message)
    "metaworld-image-size": ("{type: metaworld, task: push-v3, image_size: 100000}", "image_size", "8..4096"),
    "metaworld-image-height": ("{type: metaworld, task: push-v3, image_size: [64, 100000]}", "image_size", "8..4096"),
    "robosuite-image-size": ("{type: robosuite, task: Lift, image_size: 100000}", "image_size", "8..4096"),
    "aloha-image-size": ("{type: aloha, task: insertion, image_size: 100000}", "image_size", "8..4096"),
    "libero-camera-size": ("{type: libero, camera_size: 100000}", "camera_size", "8..4096"),
    "libero-camera-size-too-small": ("{type: libero, camera_size: [4, 64]}", "camera_size", "8..4096"),
    "image-size-three-sides": ("{type: metaworld, task: push-v3, image_size: [64, 64, 3]}", "image_size",
                               "[height, width]"),
    "image-size-a-bool": ("{type: robosuite, image_size: true}", "image_size", "True"),
    "libero-task-a-bool": ("{type: libero, task: true}", "task", "not a boolean"),
    "libero-task-false": ("{type: libero, task: false}", "task", "not a boolean"),
    "libero-settle-steps-a-bool": ("{type: libero, settle_steps: true}", "settle_steps", "not a boolean"),
    "metaworld-max-steps-a-bool": ("{type: metaworld, task: push-v3, max_steps: true}", "max_steps", "not a boolean"),
    "pusht-image-size-a-bool": ("{type: pusht, image_size: true}", "image_size", "not a boolean"),
    "robosuite-control-freq-a-bool": ("{type: robosuite, control_freq: true}", "control_freq", "not a boolean"),
    "aloha-max-steps-a-bool": ("{type: aloha, task: insertion, max_steps: true}", "max_steps", "not a boolean"),
    "gymnasium-max-steps-a-bool": ("{type: gymnasium, id: CartPole-v1, success: {terminated: true}, max_steps: true}",
                                   "max_steps", "not a boolean"),
    # a union (`task: int | str`): the key path is the user's, not `task.int`
    "libero-task-fractional": ("{type: libero, task: 3.5}", "task", "3.5"),
    "libero-task-a-list": ("{type: libero, task: [1]}", "task", "valid string"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_refused_at_load_with_the_users_key_path(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    environment, key, message = CASES[case]
    path = tmp_path / "e.yaml"
    path.write_text(doc(environment))
    monkeypatch.chdir(tmp_path)
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"evalfleet: error: {path}: runs.r1.environment.{key}: "), err
    assert message in err, err


def test_run_with_an_oversized_image_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "e.yaml"
    path.write_text(doc("{type: metaworld, task: push-v3, cameras: [corner], image_size: 100000}"))
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(path), "--output", str(out), "--workers", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "runs.r1.environment.image_size" in err and str(MAX_IMAGE_SIDE) in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.yaml"]


@pytest.mark.parametrize("size", [8, MAX_IMAGE_SIDE, [8, MAX_IMAGE_SIDE], [480, 640]])
def test_sizes_within_the_bounds_load(size: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for environment in (f"{{type: metaworld, task: push-v3, image_size: {size}}}",
                        f"{{type: robosuite, image_size: {size}}}",
                        f"{{type: aloha, task: insertion, image_size: {size}}}",
                        f"{{type: libero, camera_size: {size}}}"):
        path = tmp_path / "e.yaml"
        path.write_text(doc(environment))
        assert main(["plan", str(path)]) == 0, capsys.readouterr().err


def test_a_libero_task_index_and_name_still_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for task in ("0", "9"):
        path = tmp_path / "e.yaml"
        path.write_text(doc(f"{{type: libero, task: {task}}}"))
        assert main(["plan", str(path)]) == 0, capsys.readouterr().err
