"""LIBERO adapter: one task's env built once; episode i starts from the task's fixed initial state i mod 50.

LIBERO's evaluation protocol per episode: seed, `reset()`, `set_init_state(init_states[i])`, then a few
no-op steps so objects come to rest (`settle_steps`, not counted in the episode), then the policy. The
reset's own random draws (object placements, overwritten by the initial state) come from NumPy's global
generator: it is seeded from the episode's seed around `reset()` only, then restored, as in the
robosuite adapter. `hard_reset` is off (the model is built once), so the gripper's command, which
robosuite 1.4 keeps across soft resets, is zeroed at every reset. LIBERO's step() is the old 4-tuple.

State vector (16-D): `robot0_eef_pos` (3), `robot0_eef_quat` (4, xyzw), `robot0_gripper_qpos` (2),
`robot0_joint_pos` (7). Success is LIBERO's `check_success()` (the task's BDDL goal); the episode ends on it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from evalfleet.sim.libero_tasks import CAMERAS, configure_libero, get_task, init_states
from evalfleet.sim.mujoco_lists import bounded_iteration
from evalfleet.sim.noise import RobotNoise
from evalfleet.sim.rendering import RendererCache
from evalfleet.sim.robosuite_env import RobosuiteBase, import_robosuite, seeded_global_numpy

if TYPE_CHECKING:
    from evalfleet.sim.libero_spec import LiberoOptions

STATE_KEYS = ("robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos", "robot0_joint_pos")
NOOP = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0])  # hold still, gripper open (LIBERO's settling action)


def make_control_env(bddl_file: str) -> Any:
    configure_libero()
    import_robosuite()  # robosuite's import notices off, before LIBERO imports it
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        from libero.libero.envs.env_wrapper import ControlEnv
    finally:
        logging.disable(previous)
    with seeded_global_numpy(0):
        return ControlEnv(
            bddl_file_name=bddl_file, has_renderer=False, has_offscreen_renderer=False, use_camera_obs=False,
            ignore_done=True,  # the adapter ends episodes
            horizon=10**9, hard_reset=False,
        )


class LiberoEnvironment(RobosuiteBase):
    reset_takes_episode = True  # the runner passes the plan's episode index: it picks the initial state

    def __init__(self, options: LiberoOptions):
        bounded_iteration()  # robosuite's check_contact loops over data.contact: without an exception at its end
        self.options = options
        self.libero_task = get_task(options.suite, options.task)
        self.task = self.libero_task.name
        self.instruction = options.instruction or self.libero_task.instruction
        self.init_states = init_states(options.suite, self.libero_task.index)
        self.max_steps = options.step_limit()
        self.cameras = tuple(options.cameras)
        self.env = make_control_env(self.libero_task.bddl_file)
        self.action_low, self.action_high = (np.asarray(b, dtype=np.float64) for b in self.env.env.action_spec)
        self.action_dim = int(self.action_low.shape[0])
        self._renderers = RendererCache(lambda: self.model, options.image_hw(), options.render_quality)
        self._steps = 0
        self._noise = RobotNoise()

    def init_state_index(self, episode: int) -> int:
        return int(episode) % len(self.init_states)

    # -- episode ---------------------------------------------------------------------------------
    def reset(self, seed: int, variations: dict[str, Any], episode: int = 0) -> dict[str, Any]:
        with seeded_global_numpy(seed):
            self.env.reset()
        self.zero_gripper_commands()
        obs = self.env.set_init_state(self.init_states[self.init_state_index(episode)])
        for _ in range(self.options.settle_steps):
            obs, _reward, _done, _info = self.env.step(NOOP)
        self._steps = 0
        self._noise.reset(seed, variations)
        self.start_watching()  # after settling: objects at rest are the episode's start
        return self._observation(obs)

    def succeeded(self) -> bool:
        return bool(self.env.check_success())  # the task's BDDL goal

    def _observation(self, obs: dict[str, Any]) -> dict[str, Any]:
        state = np.concatenate([np.asarray(obs[k], dtype=np.float64).reshape(-1) for k in STATE_KEYS])
        state = self._noise.observation(state)
        out: dict[str, Any] = {"observation/state": state, "prompt": self.instruction}
        return self.camera_images(out, is_wrist=lambda camera: camera == "eye_in_hand")

    def mujoco_camera(self, camera: str) -> str:
        """evalfleet's camera name → MuJoCo's (`CAMERAS`); a MuJoCo name passes as it is."""
        return CAMERAS.get(camera, camera)
