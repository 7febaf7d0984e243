"""ALOHA adapter: gym-aloha's own env (its reset seeding, its task rewards, its `info["is_success"]`),
with the observation its task builds replaced by one that renders nothing.

gym-aloha's task renders three 640×480 cameras in every `get_observation` (2–3 steps/s on one core)
whatever the env's `obs_type`; here the task instance's `get_observation` returns joint positions,
velocities and object poses only, and the adapter renders just the cameras the Run lists, at its
`image_size`, with evalfleet's offscreen renderer (state-only: thousands of steps/s). dm_control is
imported with `MUJOCO_GL=disable` when the user set no backend, so it never touches OpenGL itself
(no GLFW probe, nothing that could pin PyOpenGL to a platform evalfleet's renderer does not pick).

Episodes: gym-aloha's `reset(seed=)` draws the cube's (or the peg's and socket's) pose from the seed
and resets the physics (`mj_resetData`), so episode i depends on its seed only. Model values a
variation changes (friction, masses) are put back to nominal before every reset. Actions that make
the physics diverge (dm_control's PhysicsError, e.g. uniform random targets over the joints' whole
ranges) raise evalfleet's PhysicsError: the episode's record says `physics_error`. Failure codes:
`object_off_table` / `object_dropped` from the free objects' heights (sim/task_codes.py).

State vector by `obs_type`: `state`: qpos (14: per arm 6 joints, gripper 0..1), qvel (14), object
pose(s) (transfer_cube 7: cube xyz + quat; insertion 14: peg, socket); `pixels_agent_pos`: qpos (14,
LeRobot's `agent_pos`); `pixels`: empty.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from evalfleet.sim.base import StepResult
from evalfleet.sim.mujoco_env import MujocoEnvironment
from evalfleet.sim.mujoco_scene import PhysicsScales
from evalfleet.sim.mujoco_watch import ObjectWatch, PhysicsWatch
from evalfleet.sim.noise import RobotNoise
from evalfleet.sim.protocol import PhysicsError
from evalfleet.sim.rendering import RendererCache

if TYPE_CHECKING:
    from evalfleet.sim.aloha_spec import AlohaOptions

GRIPPERS = (6, 13)  # action components that are grippers (normalized 0 closed .. 1 open)


def import_gym_aloha() -> Any:
    """gym_aloha.env, with dm_control's own GL backend disabled unless the user chose one."""
    chose = "MUJOCO_GL" in os.environ
    if not chose:
        os.environ["MUJOCO_GL"] = "disable"  # read once, when dm_control's renderer module is imported
    try:
        import gym_aloha.env as aloha_env
    finally:
        if not chose:
            del os.environ["MUJOCO_GL"]  # evalfleet's renderer decides (and sets it) at its first render
    return aloha_env


class AlohaEnvironment(MujocoEnvironment):
    def __init__(self, options: AlohaOptions, instruction: str):
        aloha_env = import_gym_aloha()
        self.options = options
        self.task = options.task
        self.instruction = instruction
        self.max_steps = options.max_steps
        self.cameras = tuple(options.camera_list())
        self.actions = options.actions
        # obs_type only chooses what gym-aloha formats; its task's observation is replaced below.
        self.env = aloha_env.AlohaEnv(task=options.task, obs_type="pixels_agent_pos")
        self.env._format_raw_obs = lambda raw: raw
        self.env._env.task.get_observation = self._task_observation
        self.physics = self.env._env.physics
        model = self.model
        # Arms: the position actuators' control ranges; grippers: gym-aloha's normalized 0..1.
        ctrl = model.actuator_ctrlrange
        arm = [i for i in range(model.nu) if i % 8 < 6]
        low, high = np.zeros(14), np.ones(14)
        for k, i in enumerate(arm):
            slot = k + (1 if k >= 6 else 0)
            low[slot], high[slot] = ctrl[i]
        self.action_low, self.action_high = low, high
        self.action_dim = 14
        self._physics = PhysicsScales(model)
        from dm_control.rl.control import PhysicsError

        self._physics_error = PhysicsError
        self._renderers = RendererCache(lambda: self.model, options.image_hw(), options.render_quality)
        self._steps = 0
        self._noise = RobotNoise()
        self._stability = PhysicsWatch()
        self._objects = ObjectWatch(model)

    @property
    def model(self) -> Any:
        return self.physics.model.ptr

    @property
    def data(self) -> Any:
        return self.physics.data.ptr

    @property
    def state_dim(self) -> int:
        objects = 7 if self.task == "transfer_cube" else 14
        return {"state": 28 + objects, "pixels_agent_pos": 14, "pixels": 0}[self.options.obs_type]

    def _task_observation(self, physics: Any) -> dict[str, Any]:
        task = self.env._env.task
        return {
            "qpos": task.get_qpos(physics), "qvel": task.get_qvel(physics), "env_state": task.get_env_state(physics)
        }

    # -- episode ---------------------------------------------------------------------------------
    def reset(self, seed: int, variations: dict[str, Any]) -> dict[str, Any]:
        self._physics.apply(self.model, variations)  # nominal first, then this episode's scales
        # gym-aloha seeds NumPy RandomStates with it: 32 bits.
        raw, _info = self.env.reset(seed=int(seed) % 2**32)
        self._steps = 0
        self._noise.reset(seed, variations)
        self._stability.reset(self.data)
        self._objects.reset(self.data)
        return self._observation(raw)

    def step(self, action: np.ndarray) -> StepResult:
        a = np.asarray(action, dtype=np.float64).reshape(self.action_dim)
        if self.actions == "normalized":
            a = self.action_low + (np.clip(a, -1.0, 1.0) + 1.0) * 0.5 * (self.action_high - self.action_low)
        a = self._noise.action(a)
        # MuJoCo clamps the arms' controls to these ranges anyway; the grippers' 0..1 maps inside theirs.
        a = np.clip(a, self.action_low, self.action_high)
        self._steps += 1
        try:
            raw, reward, _terminated, _truncated, info = self.env.step(a)
        except self._physics_error as exc:  # the commanded joint targets made the physics diverge
            raise PhysicsError(f"the simulation became unstable at step {self._steps}: "
                               f"{str(exc).splitlines()[0]}") from exc
        self._stability.check(self._steps)
        self._objects.update(self.data)
        success = bool(info["is_success"])
        done = success or self._steps >= self.max_steps
        return StepResult(self._observation(raw), success, done, {"steps": self._steps, "reward": float(reward)})

    def _observation(self, raw: dict[str, Any]) -> dict[str, Any]:
        kind = self.options.obs_type
        parts = {"state": ("qpos", "qvel", "env_state"), "pixels_agent_pos": ("qpos",), "pixels": ()}[kind]
        state = (
            np.concatenate([np.asarray(raw[k], dtype=np.float64).reshape(-1) for k in parts]) if parts else np.zeros(0)
        )
        state = self._noise.observation(state)
        out: dict[str, Any] = {"observation/state": state, "prompt": self.instruction}
        return self.camera_images(out, is_wrist=lambda camera: camera.endswith("_wrist"))  # the first listed

    def failure_code(self) -> str | None:
        return self._objects.code()
