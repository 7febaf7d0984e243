"""`tracking.tensorboard.run_name` names a folder under the logdir (#52, polish): one that climbs out of it (`..`,
an absolute path, empty parts) is refused when the Experiment loads, exit 2, the key named; nothing is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalfleet_testkit import run_evalfleet

EXPERIMENT = """\
name: t
runs:
  r:
    environment: {type: metaworld, task: reach-v3}
    policy: {type: metaworld_expert}
    rollout_limit: {num_episodes: 1}
"""


@pytest.mark.parametrize("name", ["../escape", "a/../../b", "/abs", "a//b", ".", "a/."])
def test_a_tensorboard_run_name_outside_the_logdir_is_refused(tmp_path: Path, name: str) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT)
    done = run_evalfleet("run", str(path), f"tracking.tensorboard.run_name={name}", "--output", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr
    assert "tracking.tensorboard.run_name" in done.stderr and "outside the logdir" in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_nested_tensorboard_run_name_is_taken(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT)
    done = run_evalfleet("plan", str(path), "tracking.tensorboard.run_name=sweep/step-10")
    assert done.returncode == 0, done.stderr
