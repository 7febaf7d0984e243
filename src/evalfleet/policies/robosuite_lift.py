"""`robosuite_lift_scripted`: a scripted grasp-and-lift for robosuite's Lift with the OSC_POSE controller.

A per-env phase machine on the state vector (sim/robosuite_env.py's layout: cube_pos 0:3,
eef_pos 10:13, gripper_qpos 17:19): move above the cube with the gripper open, descend, close for a
fixed number of steps, lift. Position commands are a proportional step towards the phase's target
(OSC_POSE maps an action of 1 to 5 cm per step); orientation is held (zero rotation deltas). It is a
reference policy, not a learned one: it sees exactly what a state-based policy would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from evalfleet.errors import UserError
from evalfleet.policies.base import POLICIES, BasePolicy, PolicyContext

CUBE, EEF = slice(0, 3), slice(10, 13)
OSC_STEP_M = 0.05  # OSC_POSE's output_max for position: an action of 1 moves the goal 5 cm


class LiftOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hover_m: float = Field(default=0.06, gt=0, description="height above the cube to approach from")
    grasp_steps: int = Field(default=12, gt=0, description="steps the gripper closes before lifting")
    lift_m: float = Field(default=0.15, gt=0, description="how far above its start to lift the cube")
    gain: float = Field(default=1.0, gt=0)


@dataclass
class _Phase:
    name: str = "approach"
    steps: int = 0
    cube_start_z: float | None = None


class RobosuiteLiftPolicy(BasePolicy):
    def __init__(self, options: LiftOptions, context: PolicyContext):
        self.options = options
        self.action_dim = context.action_dim
        self._phases: dict[int, _Phase] = {}

    def reset(self, episode_seed: int, env_id: int = 0) -> None:
        self._phases[env_id] = _Phase()

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        opts = self.options
        state = np.asarray(observation["observation/state"], dtype=np.float64)
        cube, eef = state[CUBE], state[EEF]
        phase = self._phases.setdefault(env_id, _Phase())
        if phase.cube_start_z is None:
            phase.cube_start_z = float(cube[2])
        gripper = -1.0  # open
        if phase.name == "approach":
            target = cube + [0.0, 0.0, opts.hover_m]
            if np.linalg.norm(target - eef) < 0.01:
                phase.name = "descend"
        if phase.name == "descend":
            target = cube.copy()
            if np.linalg.norm(cube - eef) < 0.008:
                phase.name, phase.steps = "grasp", 0
        if phase.name == "grasp":
            target, gripper = cube.copy(), 1.0
            phase.steps += 1
            if phase.steps >= opts.grasp_steps:
                phase.name = "lift"
        if phase.name == "lift":
            target, gripper = np.array([cube[0], cube[1], phase.cube_start_z + opts.lift_m]), 1.0
        action = np.zeros(self.action_dim, dtype=np.float64)
        action[:3] = np.clip(opts.gain * (target - eef) / OSC_STEP_M, -1.0, 1.0)
        action[-1] = gripper
        return action.astype(np.float32)


def check_environment(env_type: str, options: dict[str, Any]) -> None:
    if env_type != "robosuite":
        raise UserError("robosuite_lift_scripted needs a `robosuite` environment", key="environment.type")
    if options.get("task", "Lift") != "Lift":
        raise UserError("robosuite_lift_scripted solves only task Lift", key="environment.task")
    if options.get("controller", "OSC_POSE") != "OSC_POSE":
        raise UserError("robosuite_lift_scripted drives the OSC_POSE controller; remove `controller` or set OSC_POSE",
                        key="environment.controller")


def _make(options: Any, context: PolicyContext) -> RobosuiteLiftPolicy:
    opts = options if isinstance(options, LiftOptions) else LiftOptions.model_validate(options or {})
    return RobosuiteLiftPolicy(opts, context)


POLICIES.register(
    "robosuite_lift_scripted", options=LiftOptions, info={"check_environment": check_environment},
    summary="a scripted grasp-and-lift for robosuite Lift (OSC_POSE), on the state vector",
)(_make)
