"""robosuite adapter: one task instance built once, reseeded per episode, nominal model restored first.

robosuite 1.4.0 draws every random choice of a reset (the placement sampler's object poses, the
robot's initial joint noise, the objects' sizes when the model is built) from NumPy's global
generator. So the global generator is seeded from the episode's seed just around `env.reset()` (and
from 0 around construction, so every instance builds the same objects), then put back as it was:
episode i's start depends only on its seed, whichever env instance or process plays it. `hard_reset`
is off (the model is built once; a reset restores its initial state), which also keeps the model
arrays the variations change, and restore, in one place.

State vector (robomimic's low-dim layout): the task's `object-state`, then `robot0_eef_pos` (3),
`robot0_eef_quat` (4), `robot0_gripper_qpos` (2). For Lift: cube_pos 0:3, cube_quat 3:7,
gripper_to_cube_pos 7:10, eef_pos 10:13, eef_quat 13:17, gripper_qpos 17:19.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from evalfleet.sim.base import StepResult
from evalfleet.sim.mujoco_env import MujocoEnvironment
from evalfleet.sim.mujoco_lists import bounded_iteration
from evalfleet.sim.mujoco_scene import PhysicsScales
from evalfleet.sim.mujoco_watch import ObjectWatch, PhysicsWatch
from evalfleet.sim.noise import RobotNoise
from evalfleet.sim.rendering import RendererCache
from evalfleet.sim.task_codes import NEVER_REACHED

if TYPE_CHECKING:  # the spec loads this module on first use; it passes the options and the instruction in
    from evalfleet.sim.robosuite_spec import RobosuiteOptions

ROBOT_STATE_KEYS = ("robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos")


@contextlib.contextmanager
def seeded_global_numpy(seed: int) -> Iterator[None]:
    """Seed NumPy's global generator for a block, then restore what it was (nothing else is disturbed)."""
    saved = np.random.get_state()
    np.random.seed(int(seed) % 2**32)
    try:
        yield
    finally:
        np.random.set_state(saved)


def controller_config(controller: str) -> dict[str, Any]:
    """robosuite 1.4's default config of the arm controller (the robot adds its own gripper)."""
    return import_robosuite().load_controller_config(default_controller=controller)


def import_robosuite() -> Any:
    """robosuite, imported without its import-time notices (no private macro file, optional robot
    models) and with its own logger at WARNING (it logs every controller config it loads at INFO)."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        import robosuite
    finally:
        logging.disable(previous)
    logging.getLogger("robosuite_logs").setLevel(logging.WARNING)
    return robosuite


def make_robosuite_env(options: RobosuiteOptions) -> Any:
    robosuite = import_robosuite()
    with seeded_global_numpy(0):
        return robosuite.make(
            options.task, robots=options.robot, controller_configs=controller_config(options.controller),
            has_renderer=False, has_offscreen_renderer=False, use_camera_obs=False, use_object_obs=True,
            reward_shaping=False, control_freq=options.control_freq, horizon=options.max_steps,
            ignore_done=True,  # the adapter ends episodes; robosuite would raise on a step past its horizon
            hard_reset=False,
        )


class RobosuiteBase(MujocoEnvironment):
    """What robosuite's adapter and LIBERO's (a robosuite env underneath) share: the model and data of its
    MjSim, the gripper commands zeroed at a reset, a step (noise, clipped to the bounds, the benchmark's own
    success check, PhysicsError on a non-finite state) and the failure codes read from the free objects and the
    first arm's end effector (sim/task_codes.py)."""

    _stability: PhysicsWatch | None = None
    _objects: ObjectWatch | None = None

    def start_watching(self) -> None:
        """At the end of a reset: the episode's start for the physics and object watches."""
        if self._objects is None:
            self._stability = PhysicsWatch()
            site = int(self.env.robots[0].eef_site_id)
            self._objects = ObjectWatch(self.model, effector=lambda data: data.site_xpos[site])
        self._stability.reset(self.data)
        self._objects.reset(self.data)

    def failure_code(self) -> str | None:
        """object_off_table / object_dropped from the free objects' heights, else never_reached when the end
        effector never came within REACH_M of an object."""
        if self._objects is None:
            return None
        code = self._objects.code()
        return code if code is not None or self._objects.reached else NEVER_REACHED.code

    @property
    def model(self) -> Any:
        return self.env.sim.model._model

    @property
    def data(self) -> Any:
        return self.env.sim.data._data

    def zero_gripper_commands(self) -> None:
        """robosuite 1.4 keeps a gripper's command (Panda's accumulates) across soft resets: an episode
        that ended with the gripper closed would start the next one closing it."""
        for robot in self.env.robots:
            if getattr(robot, "has_gripper", False):
                robot.gripper.current_action = np.zeros(robot.gripper.dof)

    def succeeded(self) -> bool:
        raise NotImplementedError

    def step(self, action: np.ndarray) -> StepResult:
        action = np.asarray(action, dtype=np.float64).reshape(self.action_dim)
        action = self._noise.action(action)
        action = np.clip(action, self.action_low, self.action_high)
        obs, reward, _done, _info = self.env.step(action)
        self._steps += 1
        if self._objects is not None:
            self._stability.check(self._steps)
            self._objects.update(self.data)
        success = self.succeeded()
        done = success or self._steps >= self.max_steps
        return StepResult(self._observation(obs), success, done, {"steps": self._steps, "reward": float(reward)})


class RobosuiteEnvironment(RobosuiteBase):
    def __init__(self, options: RobosuiteOptions, instruction: str):
        bounded_iteration()  # check_contact's loop over data.contact without an exception at its end
        self.options = options
        self.task = options.task
        self.instruction = instruction
        self.max_steps = options.max_steps
        self.cameras = tuple(options.cameras)
        self.env = make_robosuite_env(options)
        self.action_low, self.action_high = (np.asarray(b, dtype=np.float64) for b in self.env.action_spec)
        self.action_dim = int(self.action_low.shape[0])
        self._physics = PhysicsScales(self.model)
        self._renderers = RendererCache(lambda: self.model, options.image_hw(), options.render_quality)
        self._steps = 0
        self._noise = RobotNoise()

    # -- episode ---------------------------------------------------------------------------------
    def reset(self, seed: int, variations: dict[str, Any]) -> dict[str, Any]:
        self._physics.apply(self.model, variations)  # nominal first, then this episode's scales
        with seeded_global_numpy(seed):
            obs = self.env.reset()
        self.zero_gripper_commands()
        self._steps = 0
        self._noise.reset(seed, variations)
        self.start_watching()
        return self._observation(obs)

    def succeeded(self) -> bool:
        return bool(self.env._check_success())

    def _observation(self, obs: dict[str, Any]) -> dict[str, Any]:
        parts = [np.asarray(obs["object-state"], dtype=np.float64).reshape(-1)] if "object-state" in obs else []
        parts += [np.asarray(obs[k], dtype=np.float64).reshape(-1) for k in ROBOT_STATE_KEYS]
        state = np.concatenate(parts)
        state = self._noise.observation(state)
        out: dict[str, Any] = {"observation/state": state, "prompt": self.instruction}
        return self.camera_images(out, is_wrist=lambda camera: camera == "robot0_eye_in_hand")
