"""The Environment protocol's optional members: declared with defaults by EnvironmentBase, read the same way
from a plugin's env that declares none of them (only reset/step/close), and the MuJoCo scene helper."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from evalfleet.sim.base import EnvironmentBase, StepResult, environment_spec, with_defaults
from evalfleet.sim.mujoco_scene import PhysicsScales


class MinimalPluginEnv:
    """A user's env: the required members only, inheriting nothing."""

    max_steps = 3
    instruction = "do it"

    def reset(self, seed, variations):
        return {"observation/state": np.zeros(2), "prompt": self.instruction}

    def step(self, action):
        return StepResult({"observation/state": np.zeros(2), "prompt": self.instruction}, False, False)

    def close(self):
        pass


class RenderingPluginEnv(MinimalPluginEnv):
    cameras = ["top"]
    action_dim = 2
    action_low, action_high = [-2.0, -2.0], [2.0, 2.0]
    actions = "normalized"

    def render(self, camera, height=None, width=None):
        return np.full((height or 4, width or 4, 3), 7, dtype=np.uint8)


def test_a_minimal_plugin_env_declares_nothing():
    spec = environment_spec("not-registered", {}, MinimalPluginEnv())
    assert (spec.action_dim, spec.action_low, spec.action_high, spec.cameras, spec.state_dim, spec.gripper) == (
        None, None, None, None, None, None)
    assert spec.describe() == "nothing declared"
    view = with_defaults(MinimalPluginEnv())
    assert (view.actions, view.control_hz, view.reset_takes_episode, view.image_sizes) == ("native", None, False, None)
    assert view.instruction == "do it" and view.max_steps == 3  # its own members pass through


def test_a_plugin_env_is_read_with_its_own_members():
    spec = environment_spec("not-registered", {}, RenderingPluginEnv())
    assert spec.cameras == ("top",) and spec.action_dim == 2
    assert spec.action_low == (-1.0, -1.0) and spec.action_high == (1.0, 1.0)  # normalized: it takes [-1, 1]


def test_render_video_defaults_to_render_and_a_missing_render_is_the_envs_own_error():
    frame = with_defaults(RenderingPluginEnv()).render_video("top", 6, 5, mesh_tolerance_px=1.0)
    assert frame.shape == (6, 5, 3) and frame.max() == 7
    with pytest.raises(AttributeError, match="'MinimalPluginEnv' object has no attribute 'render'"):
        with_defaults(MinimalPluginEnv()).render_video("top", 6, 5, mesh_tolerance_px=1.0)
    with pytest.raises(AttributeError, match="'MinimalPluginEnv' object has no attribute 'nothing'"):
        _ = with_defaults(MinimalPluginEnv()).nothing


def test_an_env_that_inherits_is_read_directly():
    class Adapter(EnvironmentBase):
        cameras = ("front",)

    env = Adapter()
    assert with_defaults(env) is env
    assert environment_spec("not-registered", {}, env).cameras == ("front",)


SCENE = """<mujoco><worldbody>
  <geom name="floor" type="plane" size="1 1 .1" friction="0.8 0.01 0.001"/>
  <body name="box" pos="0 0 .1"><freejoint/><geom type="box" size=".05 .05 .05" mass="0.3"/></body>
  <body name="arm" pos="0 .5 .1"><joint type="hinge"/><geom type="capsule" size=".02 .1" mass="1.0"/></body>
</worldbody></mujoco>"""


def test_physics_scales_scale_the_free_bodies_and_restore_nominal_bit_identical():
    model = mujoco.MjModel.from_xml_string(SCENE)
    friction, mass, inertia = model.geom_friction.copy(), model.body_mass.copy(), model.body_inertia.copy()
    scales = PhysicsScales(model)
    box, arm = (mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, n) for n in ("box", "arm"))
    assert scales.free_bodies == [box]
    scales.apply(model, {"scene.friction_scale": 0.5, "object.mass_scale": 2.0})
    assert np.array_equal(model.geom_friction[:, 0], friction[:, 0] * 0.5)
    assert np.array_equal(model.geom_friction[:, 1:], friction[:, 1:])  # only sliding friction
    assert model.body_mass[box] == mass[box] * 2.0 and model.body_mass[arm] == mass[arm]
    assert np.array_equal(model.body_inertia[box], inertia[box] * 2.0)
    scales.apply(model, {})
    assert np.array_equal(model.geom_friction, friction) and np.array_equal(model.body_mass, mass)
    assert np.array_equal(model.body_inertia, inertia)
