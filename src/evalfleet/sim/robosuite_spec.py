"""Registration of the `robosuite` environment type (robosuite 1.4.0, MuJoCo): single-arm tasks.

    environment: {type: robosuite, task: Lift, robot: Panda, controller: OSC_POSE, max_steps: 300,
                  cameras: [agentview, robot0_eye_in_hand], image_size: 128}

Light on purpose: loading an Experiment never imports robosuite; sim/robosuite_env.py does, on first use.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from evalfleet.sim.base import ENVIRONMENTS, EnvironmentInfo, VariationInfo
from evalfleet.sim.spec_checks import ImageSize, Int, image_hw

# robosuite 1.4's single-arm tasks and the instruction a language-conditioned policy receives.
TASK_INSTRUCTIONS: dict[str, str] = {
    "Lift": "lift the cube",
    "Stack": "stack the red cube on the green cube",
    "PickPlace": "put each object into its bin",
    "PickPlaceSingle": "put the object into its bin",
    "PickPlaceMilk": "put the milk carton into its bin",
    "PickPlaceBread": "put the bread into its bin",
    "PickPlaceCereal": "put the cereal box into its bin",
    "PickPlaceCan": "put the can into its bin",
    "NutAssembly": "fit each nut onto its peg",
    "NutAssemblySingle": "fit the nut onto its peg",
    "NutAssemblySquare": "fit the square nut onto the square peg",
    "NutAssemblyRound": "fit the round nut onto the round peg",
    "Door": "open the door",
    "Wipe": "wipe the markings off the table",
}
# Cameras every single-arm task model has (`robot0_*` ride on the robot).
CAMERAS = ("frontview", "birdview", "agentview", "sideview", "robot0_robotview", "robot0_eye_in_hand")
ROBOTS = ("Panda", "Sawyer", "IIWA", "Jaco", "Kinova3", "UR5e")  # fixed-base single arms
# robosuite 1.4's arm controllers, less IK_POSE (it needs pybullet, which robosuite does not install).
CONTROLLERS = ("OSC_POSE", "OSC_POSITION", "JOINT_POSITION", "JOINT_VELOCITY", "JOINT_TORQUE")
MAX_STEPS = 300


class RobosuiteOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task: str = "Lift"
    robot: Literal[ROBOTS] = "Panda"  # type: ignore[valid-type]
    controller: Literal[CONTROLLERS] = Field(default="OSC_POSE", description="the arm's part controller")  # type: ignore[valid-type]
    control_freq: Int = Field(default=20, gt=0, le=500)
    max_steps: Int = Field(default=MAX_STEPS, gt=0, le=10_000)
    instruction: str | None = None
    cameras: list[str] = Field(default_factory=list)
    image_size: ImageSize = Field(default=128, description="pixels, or [height, width]")
    render_quality: Literal["fast", "default"] = "fast"

    @field_validator("task")
    @classmethod
    def known_task(cls, v: str) -> str:
        if v not in TASK_INSTRUCTIONS:
            import difflib

            close = difflib.get_close_matches(v, list(TASK_INSTRUCTIONS), n=3)
            raise ValueError(f"unknown robosuite task {v!r}; "
                             + (f"did you mean {', '.join(close)}?" if close
                                else f"tasks: {', '.join(TASK_INSTRUCTIONS)}"))
        return v

    @field_validator("cameras")
    @classmethod
    def known_cameras(cls, v: list[str]) -> list[str]:
        for name in v:
            if name not in CAMERAS:
                raise ValueError(f"unknown robosuite camera {name!r}; cameras: {', '.join(CAMERAS)}")
        return v

    def image_hw(self) -> tuple[int, int]:
        return image_hw(self.image_size)


VARIATIONS = {
    v.name: v
    for v in (
        VariationInfo(
            "robot.action_noise",
            "std of zero-mean Gaussian noise added to every action (actions are in [-1, 1])",
            {"distribution": "uniform", "low": 0.0, "high": 0.5},
        ),
        VariationInfo(
            "robot.observation_noise",
            "std of zero-mean Gaussian noise (metres, quaternion units) added to the state vector",
            {"distribution": "uniform", "low": 0.0, "high": 0.02},
        ),
        VariationInfo(
            "scene.friction_scale",
            "factor applied to the sliding friction of every geom",
            {"distribution": "uniform", "low": 0.5, "high": 1.5},
            nominal=1.0,
        ),
        VariationInfo(
            "object.mass_scale",
            "factor applied to the mass and inertia of every free (movable) object",
            {"distribution": "uniform", "low": 0.5, "high": 2.0},
            nominal=1.0,
        ),
    )
}


def _make_robosuite(options: Any, builder: dict[str, Any]) -> Any:
    from evalfleet.sim.robosuite_env import RobosuiteEnvironment

    opts = options if isinstance(options, RobosuiteOptions) else RobosuiteOptions.model_validate(options)
    return RobosuiteEnvironment(opts, opts.instruction or TASK_INSTRUCTIONS[opts.task])


ENVIRONMENTS.register(
    "robosuite",
    options=RobosuiteOptions,
    summary="robosuite 1.4 single-arm tasks (MuJoCo, CPU): Lift, Stack, PickPlace, ...; needs evalfleet[robosuite]",
    info=EnvironmentInfo(variations=VARIATIONS, action_dim=7),
)(_make_robosuite)
