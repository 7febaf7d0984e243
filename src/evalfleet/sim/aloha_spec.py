"""Registration of the `aloha` environment type: gym-aloha's bimanual ViperX tasks (dm_control, MuJoCo).

    environment: {type: aloha, task: insertion | transfer_cube, obs_type: state | pixels_agent_pos | pixels,
                  cameras: [top], image_size: [480, 640], max_steps: 400, actions: native | normalized}

Seeded per episode by gym-aloha's own `reset(seed=)` (it draws the objects' poses from the seed);
success is gym-aloha's `info["is_success"]` (the task's top reward, 4). gym-aloha renders three
640×480 cameras at every step whatever is asked (2–3 steps/s on one core); the adapter renders only
the cameras listed, at `image_size`, with evalfleet's offscreen renderer, and none for `obs_type:
state`. Light on purpose: loading an Experiment imports neither gym-aloha nor dm_control
(sim/aloha_env.py does, named by its entry point, on first use).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from evalfleet.sim.base import EnvironmentInfo
from evalfleet.sim.protocol import TaskProtocol
from evalfleet.sim.registration import register_environment
from evalfleet.sim.spec_checks import (Actions, CameraOptions, ImageSize, Int, RenderQuality, max_steps_field)
from evalfleet.sim.standard_variations import (FRICTION_SCALE, action_noise, mass_scale, observation_noise,
                                              variation_table)
from evalfleet.sim.task_codes import OBJECT_CODES, object_parameters

TASKS = ("insertion", "transfer_cube")
INSTRUCTIONS = {
    "insertion": "pick up the peg and the socket, one in each gripper, and insert the peg into the socket",
    "transfer_cube": "pick up the cube with the right arm and hand it over to the left arm",
}
# The scene's cameras (gym-aloha renders top, angle and front_close; the others are in its model too).
CAMERAS = ("top", "angle", "front_close", "left_pillar", "right_pillar", "left_wrist", "right_wrist")
ACTION_DIM = 14  # per arm: 6 absolute joint positions (rad), gripper (0 closed .. 1 open)
# LeRobot evaluates ALOHA with 400 steps (8 s at 50 Hz); gym-aloha registers 300.
MAX_STEPS = 400


class AlohaOptions(CameraOptions):
    task: Literal[TASKS]  # type: ignore[valid-type]  # required: it is the Run's task tag, seeds derive from it
    obs_type: Literal["state", "pixels_agent_pos", "pixels"] = "state"
    cameras: list[Literal[CAMERAS]] | None = Field(  # type: ignore[valid-type]
        default=None, description="default: [top] for pixel observations, none for state")
    image_size: ImageSize = Field(default=(480, 640), description="pixels, or [height, width]")
    render_quality: RenderQuality = Field(
        default="default",
        description="default: the model's own visuals, as gym-aloha (and policies trained on it) saw",
    )
    max_steps: Int = max_steps_field(MAX_STEPS)
    actions: Actions = "native"
    instruction: str | None = None

    @model_validator(mode="after")
    def pixels_need_a_camera(self) -> "AlohaOptions":
        if self.obs_type != "state" and self.cameras == []:
            raise ValueError(f"obs_type {self.obs_type} needs at least one camera in `cameras`")
        return self

    def camera_list(self) -> list[str]:
        if self.cameras is not None:
            return list(self.cameras)
        return [] if self.obs_type == "state" else ["top"]

    def task_instruction(self) -> str:
        return self.instruction or INSTRUCTIONS[self.task]


VARIATIONS = variation_table(
    action_noise("std of zero-mean Gaussian noise added to every native action (radians; gripper in its 0..1 units)",
                 0.05),
    observation_noise("std of zero-mean Gaussian noise (radians, rad/s, metres) added to the state vector", 0.01),
    FRICTION_SCALE,
    mass_scale("every free object (cube; peg and socket)"),
)



def task_protocol(opts: AlohaOptions) -> TaskProtocol:
    return TaskProtocol(
        task=f"aloha:{opts.task}",
        success="gym-aloha's info['is_success'] (the task's top reward, 4), checked after every step; it ends the "
                "episode",
        failures=OBJECT_CODES, parameters=object_parameters(task=opts.task, max_steps=opts.max_steps))


_make_aloha = register_environment(
    "aloha", "evalfleet.sim.aloha_env:AlohaEnvironment", options=AlohaOptions,
    arguments=lambda opts: (opts.task_instruction(),),
    summary="ALOHA bimanual sim (gym-aloha, dm_control, CPU): insertion, transfer_cube; needs evalfleet[aloha]",
    info=EnvironmentInfo(variations=VARIATIONS, action_dim=ACTION_DIM, protocol=task_protocol),
)
