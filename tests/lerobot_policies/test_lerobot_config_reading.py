"""A LeRobot checkpoint's config.json is read at load (for the spec check) without lerobot: only a regular file,
bounded in size and depth, its features checked; every problem a UserError naming the file, the Run's key and the
fix. Needs no LeRobot venv."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from evalfleet.errors import UserError
from evalfleet.experiment.loading import load_experiment

GOOD = {"type": "act", "input_features": {"observation.state": {"type": "STATE", "shape": [39]},
                                          "observation.images.corner": {"type": "VISUAL", "shape": [3, 32, 32]}},
        "output_features": {"action": {"type": "ACTION", "shape": [4]}}}


@pytest.fixture
def lerobot_experiment(write_experiment, tmp_path):
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    path = write_experiment({"r1": {"environment": {"type": "metaworld", "task": "reach-v3", "cameras": ["corner"],
                                                    "image_size": 32},
                                    "policy": {"type": "lerobot", "path": str(checkpoint)},
                                    "rollout_limit": {"num_episodes": 1}}})
    return path, checkpoint / "config.json"


def _refusal(path) -> str:
    with pytest.raises(UserError) as caught:
        load_experiment(str(path))
    return caught.value.line()


def test_a_good_config_loads(lerobot_experiment):
    path, config = lerobot_experiment
    config.write_text(json.dumps(GOOD))
    assert list(load_experiment(str(path)).experiment.runs) == ["r1"]


@pytest.mark.parametrize("content, problem", [
    ('{"type": "act", "input_features": [1, 2]}', "`input_features` must map feature names to {type, shape}"),
    ('{"type": "act", "input_features": {"observation.state": [39]}}', "`input_features.observation.state` must be"),
    ('{"type": "act", "input_features": {"observation.state": {"type": "STATE", "shape": "39"}}}',
     "`shape` must be a list of non-negative integers"),
    ('{"type": "act", "input_features": {"observation.image": {"type": "VISUAL", "shape": [32]}}}',
     "has no height and width"),
    ('{"type": "act", "input_features": {}, "output_features": {"action": {"type": "ACTION", "shape": [-4]}}}',
     "`output_features.action` `shape` must be"),
    ('{"type": 3, "input_features": {}}', "`type`"),
    ('["act"]', "expected a JSON object, got a list"),
    ("[" * 200_000 + "]" * 200_000, "nested deeper than 32 levels"),
    ('{"a":' * 40 + '{"type": "act", "input_features": {}}' + "}" * 40, "nested deeper than 32 levels"),
    ("{not json", "is not JSON"),
])
def test_a_config_evalfleet_cannot_use_is_a_user_error_naming_file_run_and_fix(lerobot_experiment, content, problem):
    path, config = lerobot_experiment
    config.write_text(content)
    line = _refusal(path)
    assert line.startswith(f"{path}: runs.r1.policy.path: {config}: "), line
    assert problem in line and "give the folder LeRobot's save_pretrained wrote" in line, line


def test_a_huge_config_is_refused_without_reading_it_whole(lerobot_experiment):
    path, config = lerobot_experiment
    with open(config, "wb") as f:
        f.truncate(300 * 2**20)  # sparse: 300 MB that take no disk
    line = _refusal(path)
    assert f"runs.r1.policy.path: {config}: is larger than 10 MB" in line, line


def test_a_fifo_config_is_refused_at_once_by_plan(lerobot_experiment, tmp_path):
    """`evalfleet plan` used to wait forever for a writer; the timeout is only a safety net."""
    path, config = lerobot_experiment
    os.mkfifo(config)
    proc = subprocess.run([sys.executable, "-m", "evalfleet.cli", "plan", str(path)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert f"runs.r1.policy.path: {config}: is not a regular file (a FIFO, device or folder)" in line, line
