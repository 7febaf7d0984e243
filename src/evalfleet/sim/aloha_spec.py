"""Registration of the `aloha` environment type: gym-aloha's bimanual ViperX tasks (dm_control, MuJoCo).

    environment: {type: aloha, task: insertion | transfer_cube, obs_type: state | pixels_agent_pos | pixels,
                  cameras: [top], image_size: [480, 640], max_steps: 400, actions: native | normalized}

Seeded per episode by gym-aloha's own `reset(seed=)` (it draws the objects' poses from the seed);
success is gym-aloha's `info["is_success"]` (the task's top reward, 4). gym-aloha renders three
640×480 cameras at every step whatever is asked (2–3 steps/s on one core); the adapter renders only
the cameras listed, at `image_size`, with evalfleet's offscreen renderer, and none for `obs_type:
state`. Light on purpose: loading an Experiment imports neither gym-aloha nor dm_control
(sim/aloha_env.py does, on first use).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from evalfleet.sim.base import ENVIRONMENTS, EnvironmentInfo, VariationInfo
from evalfleet.sim.spec_checks import ImageSize, Int, image_hw

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


class AlohaOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task: Literal[TASKS]  # type: ignore[valid-type]  # required: it is the Run's task tag, seeds derive from it
    obs_type: Literal["state", "pixels_agent_pos", "pixels"] = "state"
    cameras: list[Literal[CAMERAS]] | None = Field(  # type: ignore[valid-type]
        default=None, description="default: [top] for pixel observations, none for state")
    image_size: ImageSize = Field(default=(480, 640), description="pixels, or [height, width]")
    render_quality: Literal["fast", "default"] = Field(
        default="default",
        description="default: the model's own visuals, as gym-aloha (and policies trained on it) saw",
    )
    max_steps: Int = Field(default=MAX_STEPS, gt=0, le=10_000)
    actions: Literal["native", "normalized"] = "native"
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

    def image_hw(self) -> tuple[int, int]:
        return image_hw(self.image_size)


VARIATIONS = {
    v.name: v
    for v in (
        VariationInfo(
            "robot.action_noise",
            "std of zero-mean Gaussian noise added to every native action (radians; gripper in its 0..1 units)",
            {"distribution": "uniform", "low": 0.0, "high": 0.05},
        ),
        VariationInfo(
            "robot.observation_noise",
            "std of zero-mean Gaussian noise (radians, rad/s, metres) added to the state vector",
            {"distribution": "uniform", "low": 0.0, "high": 0.01},
        ),
        VariationInfo(
            "scene.friction_scale",
            "factor applied to the sliding friction of every geom",
            {"distribution": "uniform", "low": 0.5, "high": 1.5},
            nominal=1.0,
        ),
        VariationInfo(
            "object.mass_scale",
            "factor applied to the mass and inertia of every free object (cube; peg and socket)",
            {"distribution": "uniform", "low": 0.5, "high": 2.0},
            nominal=1.0,
        ),
    )
}


def _make_aloha(options: Any, builder: dict[str, Any]) -> Any:
    from evalfleet.sim.aloha_env import AlohaEnvironment

    opts = options if isinstance(options, AlohaOptions) else AlohaOptions.model_validate(options)
    return AlohaEnvironment(opts, opts.instruction or INSTRUCTIONS[opts.task])


ENVIRONMENTS.register(
    "aloha",
    options=AlohaOptions,
    summary="ALOHA bimanual sim (gym-aloha, dm_control, CPU): insertion, transfer_cube; needs evalfleet[aloha]",
    info=EnvironmentInfo(variations=VARIATIONS, action_dim=ACTION_DIM),
)(_make_aloha)
