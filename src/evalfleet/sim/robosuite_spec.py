"""Registration of the `robosuite` environment type (robosuite 1.4.0, MuJoCo): single-arm tasks.

    environment: {type: robosuite, task: Lift, robot: Panda, controller: OSC_POSE, max_steps: 300,
                  cameras: [agentview, robot0_eye_in_hand], image_size: 128}

Light on purpose: loading an Experiment never imports robosuite; sim/robosuite_env.py does, named by its
entry point, on first use.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from evalfleet.sim.base import EnvironmentInfo
from evalfleet.sim.protocol import TaskProtocol
from evalfleet.sim.registration import register_environment
from evalfleet.sim.spec_checks import (CameraOptions, ImageSize, Int, RenderQuality, check_name, check_names,
                                       max_steps_field)
from evalfleet.sim.standard_variations import (FRICTION_SCALE, UNIT_ACTIONS, action_noise, mass_scale,
                                              observation_noise, variation_table)
from evalfleet.sim.task_codes import NEVER_REACHED, OBJECT_CODES, REACH_M, object_parameters

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


class RobosuiteOptions(CameraOptions):
    task: str = "Lift"
    robot: Literal[ROBOTS] = "Panda"  # type: ignore[valid-type]
    controller: Literal[CONTROLLERS] = Field(default="OSC_POSE", description="the arm's part controller")  # type: ignore[valid-type]
    control_freq: Int = Field(default=20, gt=0, le=500)
    max_steps: Int = max_steps_field(MAX_STEPS)
    instruction: str | None = None
    cameras: list[str] = Field(default_factory=list)
    image_size: ImageSize = Field(default=128, description="pixels, or [height, width]")
    render_quality: RenderQuality = "fast"

    @field_validator("task")
    @classmethod
    def known_task(cls, v: str) -> str:
        return check_name(v, TASK_INSTRUCTIONS, "robosuite task", f"tasks: {', '.join(TASK_INSTRUCTIONS)}")

    @field_validator("cameras")
    @classmethod
    def known_cameras(cls, v: list[str]) -> list[str]:
        return check_names(v, CAMERAS, "robosuite camera")

    def task_instruction(self) -> str:
        return self.instruction or TASK_INSTRUCTIONS[self.task]


VARIATIONS = variation_table(
    action_noise(UNIT_ACTIONS, 0.5),
    observation_noise("std of zero-mean Gaussian noise (metres, quaternion units) added to the state vector", 0.02),
    FRICTION_SCALE,
    mass_scale(),
)



def task_protocol(opts: RobosuiteOptions) -> TaskProtocol:
    """A robosuite task's protocol; `control_freq` is a parameter: it sets how long `max_steps` lasts."""
    return TaskProtocol(
        task=f"robosuite:{opts.task}",
        success="robosuite's own _check_success() for the task, checked after every step; it ends the episode",
        failures=(*OBJECT_CODES, NEVER_REACHED),
        parameters=object_parameters(task=opts.task, max_steps=opts.max_steps, control_freq=opts.control_freq,
                                     reach_m=REACH_M))


_make_robosuite = register_environment(
    "robosuite", "evalfleet.sim.robosuite_env:RobosuiteEnvironment", options=RobosuiteOptions,
    arguments=lambda opts: (opts.task_instruction(),),
    summary="robosuite 1.4 single-arm tasks (MuJoCo, CPU): Lift, Stack, PickPlace, ...; needs evalfleet[robosuite]",
    info=EnvironmentInfo(variations=VARIATIONS, action_dim=7, protocol=task_protocol),
)
