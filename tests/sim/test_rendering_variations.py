"""Offscreen rendering: images the right way up; every camera and scene variation changes the image
and the next nominal episode renders bit-identical to nominal; state-only envs never render."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from evalfleet_testkit import run_evalfleet
from evalfleet.sim.metaworld_env import MetaworldEnvironment
from evalfleet.sim.metaworld_spec import VARIATIONS, MetaworldOptions
from evalfleet.sim.rendering import gl_backend

SCENE_VARIATIONS = {
    "camera.position_offset": [0.03, -0.02, 0.02],
    "camera.rotation_offset": [2.0, 3.0, -3.0],
    "camera.fov": 6.0,
    "light.intensity": 0.5,
    "light.direction": [0.3, 0.3, 0.0],
    "light.color": [1.0, 0.6, 0.6],
    "object.color": [0.0, 1.0, 0.0],
    "table.color": [0.2, 0.2, 0.9],
}


@pytest.fixture(scope="module")
def env():
    e = MetaworldEnvironment(MetaworldOptions(
        task="pick-place-v3", cameras=["corner", "gripperPOV"], image_size=[64, 80],
        depth=True, segmentation=True, max_steps=20,
    ))
    yield e
    e.close()


def _views(obs: dict) -> dict[str, np.ndarray]:
    return {k: v for k, v in obs.items() if k.startswith("observation/") and k != "observation/state"}


def test_observation_keys_shapes_and_upright_images(env):
    obs = env.reset(7, {})
    assert gl_backend() in ("egl", "osmesa")
    assert obs["observation/image"].shape == (64, 80, 3) and obs["observation/image"].dtype == np.uint8
    assert obs["observation/wrist_image"].shape == (64, 80, 3)
    assert obs["observation/images/corner"] is obs["observation/image"]
    assert obs["observation/depth"].shape == (64, 80) and obs["observation/depth"].dtype == np.float32
    assert obs["observation/segmentation"].shape == (64, 80, 2)
    assert obs["observation/state"].shape == (39,) and isinstance(obs["prompt"], str)
    depth = obs["observation/depth"]
    # Right way up: empty space (far depth) at the top of the corner view, the table at the bottom.
    assert depth[:4].mean() > 3 * depth[-4:].mean()
    assert env.step(np.zeros(4)).observation["observation/image"].shape == (64, 80, 3)


@pytest.mark.parametrize("name", sorted(SCENE_VARIATIONS))
def test_each_variation_changes_the_image_and_nominal_returns_bit_identical(env, name):
    assert name in VARIATIONS
    nominal = _views(env.reset(11, {}))
    varied = _views(env.reset(11, {name: SCENE_VARIATIONS[name]}))
    assert not np.array_equal(varied["observation/image"], nominal["observation/image"]), name
    again = _views(env.reset(11, {}))
    assert again.keys() == nominal.keys()
    for key in nominal:
        assert np.array_equal(again[key], nominal[key]), (name, key)


def test_camera_variations_move_only_the_varied_camera(env):
    nominal = _views(env.reset(3, {}))
    moved = _views(env.reset(3, {"camera.position_offset": [0.05, 0.0, 0.0]}))
    assert not np.array_equal(moved["observation/image"], nominal["observation/image"])
    assert np.array_equal(moved["observation/wrist_image"], nominal["observation/wrist_image"])


def test_state_only_environment_never_renders():
    e = MetaworldEnvironment(MetaworldOptions(task="reach-v3", max_steps=5))
    obs = e.reset(1, {"camera.fov": 5.0, "light.intensity": 0.7})
    e.step(np.zeros(4))
    assert set(obs) == {"observation/state", "prompt"} and not e._renderers
    e.close()


def test_options_name_what_is_missing():
    with pytest.raises(ValueError, match="add it to `cameras`"):
        MetaworldOptions(task="push-v3", depth=True)
    with pytest.raises(ValueError, match="unknown Meta-World camera"):
        MetaworldOptions(task="push-v3", cameras=["front"])


@pytest.mark.parametrize("backend", ["egl", "osmesa"])
def test_each_backend_renders_in_a_fresh_process(backend):
    code = (
        "from evalfleet.sim.metaworld_env import MetaworldEnvironment\n"
        "from evalfleet.sim.metaworld_spec import MetaworldOptions\n"
        "e = MetaworldEnvironment(MetaworldOptions(task='reach-v3', cameras=['corner'], image_size=32))\n"
        "img = e.reset(1, {})['observation/image']; e.close()\n"
        "print(img.shape, int(img.std() > 5))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
    env["MUJOCO_GL"] = backend
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert proc.stdout.strip() == "(32, 32, 3) 1"
    assert "Error" not in proc.stderr  # clean teardown (no EGL errors at exit)


def test_cli_lists_the_camera_and_scene_variations():
    proc = run_evalfleet("variations", "metaworld", "--json")
    assert proc.returncode == 0, proc.stderr
    names = {v["name"] for v in json.loads(proc.stdout)["metaworld"]}
    assert set(SCENE_VARIATIONS) <= names
