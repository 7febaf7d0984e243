"""Registration of the `pusht` environment type: gym-pusht's Push-T (pymunk physics, pygame drawing, no GL).

    environment: {type: pusht, obs_type: state | pixels | pixels_agent_pos, max_steps: 300,
                  actions: native | normalized, image_size: 96, render: false}

Seeded by `reset(seed=)` (deterministic); success is `info["is_success"]` (the block covers > 95 % of
the target). Actions are the agent's target position in pixels, 0..512 per axis (`native`), or
[-1, 1] mapped onto that square (`normalized`, for the built-in random/zero baselines). The adapter is
sim/gymnasium_env.py's; this module imports neither gym-pusht nor pygame.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evalfleet.sim.base import ENVIRONMENTS, EnvironmentInfo, VariationInfo
from evalfleet.sim.spec_checks import Int

PUSHT_ID = "gym_pusht/PushT-v0"
MAX_STEPS = 300  # gym-pusht's registered limit (LeRobot evaluates with the same)
INSTRUCTION = "push the T-shaped block onto the T-shaped target"
ACTION_LOW, ACTION_HIGH = 0.0, 512.0


class PushTOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    obs_type: Literal["state", "pixels", "pixels_agent_pos"] = "state"
    max_steps: Int = Field(default=MAX_STEPS, gt=0, le=10_000)
    actions: Literal["native", "normalized"] = "native"
    image_size: Int = Field(default=96, ge=8, le=1024, description="side of the `top` camera image (pixels obs)")
    render: bool = Field(default=False, description="add camera `render`: the 680 px visualisation, every step")
    render_size: Int = Field(default=680, ge=96, le=2048)  # gym-pusht draws its action marker 0 px thick below 96
    instruction: str = INSTRUCTION

    def cameras(self) -> list[str]:
        return (["top"] if self.obs_type != "state" else []) + (["render"] if self.render else [])


VARIATIONS = {
    v.name: v
    for v in (
        VariationInfo(
            "robot.action_noise",
            "std of Gaussian noise added to every action, in units of half the action range (0.1 = 25.6 px)",
            {"distribution": "uniform", "low": 0.0, "high": 0.2},
        ),
        VariationInfo(
            "robot.observation_noise",
            "std of Gaussian noise (pixels; radians for the block angle) added to the state vector",
            {"distribution": "uniform", "low": 0.0, "high": 5.0},
        ),
    )
}


def _make_pusht(options: Any, builder: dict[str, Any]) -> Any:
    opts = options if isinstance(options, PushTOptions) else PushTOptions.model_validate(options)

    def make() -> Any:
        import gym_pusht  # noqa: F401 - registers the id
        import gymnasium

        return gymnasium.make(
            PUSHT_ID, obs_type=opts.obs_type, render_mode="rgb_array", max_episode_steps=opts.max_steps,
            observation_width=opts.image_size, observation_height=opts.image_size,
            visualization_width=opts.render_size, visualization_height=opts.render_size,
        )

    from evalfleet.sim.gymnasium_env import GymnasiumAdapter, SuccessRule

    return GymnasiumAdapter(
        make, name="pusht", success=SuccessRule(info_key="is_success"), instruction=opts.instruction,
        max_steps=opts.max_steps, actions=opts.actions, camera_names={"": "top", "pixels": "top"},
        render_camera="render" if opts.render else None,
    )


ENVIRONMENTS.register(
    "pusht",
    options=PushTOptions,
    summary="Push-T (gym-pusht, 2-D, CPU): push a T-shaped block onto a target; needs evalfleet[pusht]",
    info=EnvironmentInfo(variations=VARIATIONS, action_dim=2),
)(_make_pusht)
