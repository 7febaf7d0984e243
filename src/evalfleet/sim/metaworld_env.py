"""Meta-World adapter: one seeded task instance, per-episode variations, nominal model restored first.

MT1's `reset(seed=)` is ignored by Meta-World, so the task class is constructed directly with random
resets enabled and seeded before every episode (`env.seed(s)` then `env.reset()`): the layout of
episode i depends only on its seed.
"""

from __future__ import annotations

import warnings
from typing import Any

import mujoco
import numpy as np

from evalfleet.sim.base import StepResult
from evalfleet.sim.metaworld_spec import TASK_INSTRUCTIONS, MetaworldOptions, MetaworldProgress
from evalfleet.sim.mujoco_env import MujocoEnvironment
from evalfleet.sim.mujoco_lists import bounded_iteration
from evalfleet.sim.mujoco_scene import PhysicsScales, free_joints
from evalfleet.sim.mujoco_watch import ObjectWatch, PhysicsWatch
from evalfleet.sim.noise import RobotNoise
from evalfleet.sim.rendering import RendererCache
from evalfleet.sim.task_codes import NEVER_REACHED

warnings.filterwarnings("ignore", message="Constant\\(s\\) may be too high", category=UserWarning)


def make_task_env(task: str) -> Any:
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS

    env = ALL_V3_ENVIRONMENTS[task]()
    env._partially_observable = False  # the goal is part of the state, as the scripted experts expect
    del env.sawyer_observation_space  # cached for the old observability
    env._freeze_rand_vec = False
    env.seeded_rand_vec = True  # layouts come from env.np_random, which env.seed() sets
    env._set_task_called = True
    return env


class MetaworldEnvironment(MujocoEnvironment):
    action_dim = 4
    action_low = (-1.0, -1.0, -1.0, -1.0)  # Meta-World clips every action to [-1, 1]
    action_high = (1.0, 1.0, 1.0, 1.0)

    def __init__(self, options: MetaworldOptions):
        bounded_iteration()  # data.contact without an exception at its end: a quarter of push-v3's step
        self.options = options
        self.task = options.task
        self.instruction = options.instruction or TASK_INSTRUCTIONS[options.task]
        self.max_steps = options.max_steps
        self.env = make_task_env(options.task)
        if self.max_steps > self.env.max_path_length:
            self.env.max_path_length = self.max_steps
        model = self.env.model
        self._physics = PhysicsScales(model)
        self._free_qpos = [int(model.jnt_qposadr[j]) for j in free_joints(model)]
        self._nominal_scene = {
            name: getattr(model, name).copy()
            for name in ("cam_pos", "cam_quat", "cam_fovy", "light_diffuse", "light_specular", "light_dir",
                         "geom_rgba", "geom_matid")
        }
        self._object_geoms = np.flatnonzero(np.isin(model.geom_bodyid, self._physics.free_bodies))
        table = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "tablelink")
        self._table_geoms = np.flatnonzero(model.geom_bodyid == table) if table >= 0 else np.array([], int)
        self._varied_camera = mujoco.mj_name2id(
            model, mujoco.mjtObj.mjOBJ_CAMERA, options.varied_camera or options.image_camera
        )
        self._renderers = RendererCache(lambda: self.env.model, options.image_hw(), options.render_quality)
        self._steps = 0
        self._progress = MetaworldProgress()  # near object → halfway → success, from each step's info
        self._noise = RobotNoise()
        self._stability = PhysicsWatch()
        self._objects = ObjectWatch(model)

    # -- episode ---------------------------------------------------------------------------------
    def reset(self, seed: int, variations: dict[str, Any]) -> dict[str, Any]:
        model = self.env.model
        # Nominal first, so no variation leaks from one episode into the next.
        self._physics.apply(model, variations)
        for name, nominal in self._nominal_scene.items():
            getattr(model, name)[:] = nominal
        self._apply_scene_variations(variations)

        self.env.seed(int(seed))
        obs, _ = self.env.reset()
        # Meta-World moves the goal site in the model after its last forward pass: refresh the derived
        # positions (physics-neutral) so the first rendered frame shows this episode's goal.
        mujoco.mj_forward(self.env.model, self.env.data)
        offset = variations.get("object.position_noise")
        if offset is not None and self._free_qpos:
            data = self.env.data
            for adr in self._free_qpos:
                data.qpos[adr : adr + 3] += np.asarray(offset, dtype=float)
            mujoco.mj_forward(model, data)
            current = self.env._get_curr_obs_combined_no_goal()
            self.env._prev_obs = current
            obs = np.hstack((current, current, self.env._get_pos_goal())).astype(np.float64)

        self._steps = 0
        self._progress = MetaworldProgress()  # a new tracker: the last episode's record keeps its own
        self._noise.reset(seed, variations)
        self._stability.reset(self.env.data)
        self._objects.reset(self.env.data)
        return self._observation(obs)

    def step(self, action: np.ndarray) -> StepResult:
        action = np.asarray(action, dtype=np.float64).reshape(self.action_dim)
        if self._noise.action_std > 0:
            action = self._noise.action(action)
        # the clip as two ufuncs: ndarray.clip's Python wrapper costs more than the clip between MuJoCo's steps
        action = np.minimum(np.maximum(action, -1.0), 1.0).astype(np.float32)
        obs, reward, _terminated, _truncated, info = self.env.step(action)
        self._steps += 1
        self._stability.check(self._steps)
        self._objects.update(self.env.data)
        success = bool(info.get("success", 0.0))
        done = success or self._steps >= self.max_steps
        progress = self._progress.update(info, self._steps)
        return StepResult(self._observation(obs), success, done,
                          {"steps": self._steps, "progress": progress, "reward": float(reward)})

    def failure_code(self) -> str | None:
        """object_off_table / object_dropped from the free objects' heights, else never_reached when the hand
        never came near the object (the first progress criterion, `near_object`, never held)."""
        code = self._objects.code()
        if code is None and not self._progress.progress["criteria_by_name"]["near_object"]["complete"]:
            code = NEVER_REACHED.code
        return code

    def _apply_scene_variations(self, variations: dict[str, Any]) -> None:
        """Camera, light and colour variations, on a model already restored to nominal."""
        model = self.env.model
        cam = self._varied_camera
        value = variations.get("camera.position_offset")
        if value is not None:
            model.cam_pos[cam] += np.asarray(value, dtype=float)
        value = variations.get("camera.rotation_offset")
        if value is not None:
            roll, pitch, yaw = np.deg2rad(np.asarray(value, dtype=float))
            offset = np.array([1.0, 0, 0, 0])
            for axis, angle in (((0, 1, 0), yaw), ((1, 0, 0), pitch), ((0, 0, 1), roll)):  # camera frame
                q = np.zeros(4)
                mujoco.mju_axisAngle2Quat(q, np.array(axis, dtype=float), float(angle))
                mujoco.mju_mulQuat(offset, offset.copy(), q)
            quat = np.zeros(4)
            mujoco.mju_mulQuat(quat, model.cam_quat[cam].copy(), offset)
            model.cam_quat[cam] = quat
        value = variations.get("camera.fov")
        if value is not None:
            model.cam_fovy[cam] = float(np.clip(model.cam_fovy[cam] + float(value), 1.0, 179.0))
        intensity = variations.get("light.intensity")
        scale = 1.0 if intensity is None else float(intensity)
        color = variations.get("light.color")
        diffuse = self._nominal_scene["light_diffuse"] * scale
        if color is not None:
            diffuse = diffuse * np.asarray(color, dtype=float)
        model.light_diffuse[:] = diffuse
        model.light_specular[:] = self._nominal_scene["light_specular"] * scale
        value = variations.get("light.direction")
        if value is not None:
            direction = self._nominal_scene["light_dir"] + np.asarray(value, dtype=float)
            model.light_dir[:] = direction / np.maximum(np.linalg.norm(direction, axis=1, keepdims=True), 1e-9)
        for key, geoms in (("object.color", self._object_geoms), ("table.color", self._table_geoms)):
            value = variations.get(key)
            if value is not None and len(geoms):
                model.geom_matid[geoms] = -1
                model.geom_rgba[geoms, :3] = np.clip(np.asarray(value, dtype=float), 0.0, 1.0)

    def state_digest(self) -> str:
        """The MuJoCo state (time, positions, velocities, actuator activations), as 16 hex digits."""
        import hashlib

        data = self.env.data
        return hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes()
                                       for a in (data.time, data.qpos, data.qvel, data.act))).hexdigest()[:16]

    # -- rendering -------------------------------------------------------------------------------
    @property
    def data(self) -> Any:
        return self.env.data

    @property
    def control_hz(self) -> float:
        """Control steps per simulated second (video recording samples its frames by it)."""
        return 1.0 / (float(self.env.model.opt.timestep) * int(self.env.frame_skip))

    def render(self, camera: str, height: int | None = None, width: int | None = None, **kinds: bool) -> Any:
        """Render a named camera of the current state: uint8 H×W×3, or the renderer's dict
        ({"rgb", "depth"?, "segmentation"?}) when `depth=`/`segmentation=` keywords are given.
        The renderer is created on first use, in this process."""
        out = self._renderers.render(self.env.data, camera, height, width, **kinds)
        return out if kinds else out["rgb"]

    def _observation(self, obs: np.ndarray) -> dict[str, Any]:
        state = self._noise.observation(np.asarray(obs, dtype=np.float64))
        out: dict[str, Any] = {"observation/state": state, "prompt": self.instruction}
        opts = self.options
        for camera in opts.cameras:
            main = camera == opts.image_camera
            rendered = self.render(camera, depth=main and opts.depth, segmentation=main and opts.segmentation)
            out[f"observation/images/{camera}"] = rendered["rgb"]
            if main:
                out["observation/image"] = rendered["rgb"]
                if opts.depth:
                    out["observation/depth"] = rendered["depth"]
                if opts.segmentation:
                    out["observation/segmentation"] = rendered["segmentation"]
            if camera == opts.wrist_camera:
                out["observation/wrist_image"] = rendered["rgb"]
        return out
