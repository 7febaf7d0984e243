"""`metaworld_vision`: the task's scripted expert driven by what one fixed camera sees.

It reads only `observation/depth` and `observation/segmentation` of the environment's image camera
(plus `observation/state[:4]`, the proprioception: hand xyz and gripper opening). Object and goal
positions are estimated by back-projecting their segmented pixels with the camera's NOMINAL
calibration, read from a freshly built task model when the policy is constructed, before any
variation. A moved, rotated or re-zoomed camera therefore puts the estimates in the wrong place,
which is the point: it is the reference policy for camera-sensitivity analysis.

The Run's environment must render what it needs:

    environment: {type: metaworld, task: ..., cameras: [corner], depth: true, segmentation: true}

(the camera is the environment's `image_camera`, `corner` by default; from `corner` the puck covers only
~25 pixels at 160 px, so use image_size ≥ 160 — at 128 px partial occlusion by the fingers makes the
estimates jitter by 1-2 cm and push-v3 success drops to ~0.9). The factory raises a UserError
naming the missing option otherwise.

Estimators (shape knowledge of the nominal model is fair game, like a trained detector's prior):
the object (a free body; pucks are upright cylinders) is the centroid of its top face (the highest
visible points) lowered by its half height; the goal (a sphere site) is the centroid of its visible
points pushed 2/3 of its radius away from the camera (the mean depth of a sphere's visible cap).
When the gripper hides the object (fewer than `visible_fraction` of the most pixels seen this episode),
the object is assumed to move with the hand if the gripper is closed and it was within 5 cm of the
hand, else to stay where it was.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from evalfleet.errors import UserError
from evalfleet.policies.base import POLICIES, BasePolicy, PolicyContext
from evalfleet.policies.builtin import expert_class_name

STATE_SIZE = 39
GRIPPER_CLOSED = 0.73  # observation/state[3] (finger opening, 1 = open) below this: closed on something
REQUIRED = "cameras: [<image_camera>], depth: true, segmentation: true"


class VisionOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    min_pixels: int = Field(default=4, gt=0, description="fewest segmented pixels that count as seeing a thing")
    visible_fraction: float = Field(
        default=0.7, ge=0, le=1,
        description="below this share of the most object pixels seen so far, the object counts as hidden",
    )


def check_environment(env_type: str, env_options: dict[str, Any], where: str | None = None) -> Any:
    """The Run's environment renders what this policy needs, else a UserError naming the option.
    Registered as the policy entry's `info["check_environment"]` so validation can call it before
    anything runs; the factory calls it too."""
    from evalfleet.sim.metaworld_spec import MetaworldOptions

    if env_type != "metaworld":
        raise UserError("metaworld_vision needs a `metaworld` environment", where=where, key="environment.type")
    env_opts = MetaworldOptions.model_validate(env_options)
    camera = env_opts.image_camera
    missing = [k for k, ok in (("cameras", camera in env_opts.cameras), ("depth", env_opts.depth),
                               ("segmentation", env_opts.segmentation)) if not ok]
    if missing:
        raise UserError(
            f"metaworld_vision sees only images; set environment options {REQUIRED} "
            f"(missing: {', '.join(missing)}; image_camera is {camera!r})",
            where=where, key="environment." + missing[0],
        )
    return env_opts


class MetaworldVisionPolicy(BasePolicy):
    def __init__(self, options: VisionOptions, context: PolicyContext):
        import mujoco
        import metaworld.policies as mw_policies

        from evalfleet.sim.metaworld_env import make_task_env
        from evalfleet.sim.rendering import camera_intrinsics, is_upside_down

        env_opts = check_environment(context.env_type, context.env_options, where=f"Run {context.run!r}")
        where = f"Run {context.run!r}"
        camera = env_opts.image_camera
        expert_cls = getattr(mw_policies, expert_class_name(env_opts.task), None)
        if expert_cls is None:
            raise UserError(f"Meta-World has no scripted expert for {env_opts.task!r}", where=where,
                            key="environment.task")
        self.expert = expert_cls()
        self.options = options

        # Nominal calibration: a fresh model, never touched by a variation.
        task_env = make_task_env(env_opts.task)
        model = task_env.model
        data = mujoco.MjData(model)
        mujoco.mj_forward(model, data)
        cam = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
        height, width = env_opts.image_hw()
        self.intrinsics = camera_intrinsics(model, cam, width, height)
        self.cam_pos = data.cam_xpos[cam].copy()
        self.cam_mat = data.cam_xmat[cam].reshape(3, 3).copy()
        self.upside_down = is_upside_down(data, cam)
        free = np.flatnonzero(model.jnt_type == mujoco.mjtJoint.mjJNT_FREE)
        bodies = sorted({int(model.jnt_bodyid[j]) for j in free})
        self.object_geoms = np.flatnonzero(np.isin(model.geom_bodyid, bodies))
        sizes = model.geom_size[self.object_geoms]
        self.object_half_height = float(sizes[0, 1]) if len(sizes) else 0.0
        self.goal_site = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, "goal")
        self.goal_radius = float(model.site_size[self.goal_site, 0]) if self.goal_site >= 0 else 0.0
        self._geom_type = int(mujoco.mjtObj.mjOBJ_GEOM)
        self._site_type = int(mujoco.mjtObj.mjOBJ_SITE)
        task_env.close()
        self._memory: dict[int, dict[str, Any]] = {}

    def reset(self, episode_seed: int, env_id: int = 0) -> None:
        self._memory[env_id] = {}

    # -- perception --------------------------------------------------------------------------------
    def _points(self, depth: np.ndarray, mask: np.ndarray) -> np.ndarray | None:
        from evalfleet.sim.rendering import back_project

        rows, cols = np.nonzero(mask)
        if len(rows) < self.options.min_pixels:
            return None
        return back_project(depth, (rows, cols), self.intrinsics, self.cam_pos, self.cam_mat, self.upside_down)

    def _object(self, depth: np.ndarray, seg: np.ndarray, memory: dict[str, Any]) -> np.ndarray | None:
        mask = (seg[..., 1] == self._geom_type) & np.isin(seg[..., 0], self.object_geoms)
        visible = int(mask.sum())
        memory["most_pixels"] = most = max(visible, memory.get("most_pixels", 0))
        if visible < self.options.visible_fraction * most:
            return None  # partly hidden (by the gripper): its visible part would bias the estimate
        pts = self._points(depth, mask)
        if pts is None:
            return None
        top = pts[pts[:, 2] > pts[:, 2].max() - 0.002]
        centre = top.mean(axis=0)
        centre[2] -= self.object_half_height
        return centre

    def _goal(self, depth: np.ndarray, seg: np.ndarray) -> np.ndarray | None:
        mask = (seg[..., 1] == self._site_type) & (seg[..., 0] == self.goal_site)
        pts = self._points(depth, mask)
        if pts is None:
            return None
        centre = pts.mean(axis=0)
        away = centre - self.cam_pos
        return centre + (2.0 / 3.0) * self.goal_radius * away / np.linalg.norm(away)

    def estimate(self, observation: dict[str, Any], env_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """(object position, goal position) in world coordinates, from the images alone."""
        try:
            depth = np.asarray(observation["observation/depth"])
            seg = np.asarray(observation["observation/segmentation"])
        except KeyError as exc:
            raise RuntimeError(f"metaworld_vision: observation has no {exc.args[0]!r}; set {REQUIRED}") from None
        memory = self._memory.setdefault(env_id, {})
        proprio = np.asarray(observation["observation/state"], dtype=float)
        hand, closed = proprio[:3], proprio[3] < GRIPPER_CLOSED
        obj = self._object(depth, seg, memory)
        if obj is None:  # hidden: it moves with the hand if it is held, else it stayed put
            last, offset = memory.get("object"), memory.get("object_offset")
            if last is None:
                obj = hand.copy()
            elif closed and offset is not None and np.linalg.norm(offset) < 0.05:
                obj = hand + offset
            else:
                obj = last
        memory["object"], memory["object_offset"] = obj, obj - hand
        goal = self._goal(depth, seg)
        if goal is None:
            goal = memory.get("goal", obj)
        memory["goal"] = goal
        return obj, goal

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        obj, goal = self.estimate(observation, env_id)
        state = np.zeros(STATE_SIZE)
        state[:4] = np.asarray(observation["observation/state"], dtype=float)[:4]  # proprioception
        state[4:7] = obj
        state[7:11] = (1.0, 0.0, 0.0, 0.0)
        state[18:22] = state[:4]
        state[22:25] = obj
        state[25:29] = state[7:11]
        state[-3:] = goal
        return np.asarray(self.expert.get_action(state), dtype=np.float32)


def _make(options: Any, context: PolicyContext) -> MetaworldVisionPolicy:
    opts = options if isinstance(options, VisionOptions) else VisionOptions.model_validate(options or {})
    return MetaworldVisionPolicy(opts, context)


POLICIES.register(
    "metaworld_vision", options=VisionOptions, info={"check_environment": check_environment},
    summary="Meta-World expert on object/goal positions estimated from one camera's depth + segmentation",
)(_make)
