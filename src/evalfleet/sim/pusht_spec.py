"""Registration of the `pusht` environment type: gym-pusht's Push-T (pymunk physics, pygame drawing, no GL).

    environment: {type: pusht, obs_type: state | environment_state_agent_pos | pixels | pixels_agent_pos,
                  max_steps: 300, actions: native | normalized, image_size: 96, render: false}

`state` is gym-pusht's 5 values (agent x, y, block x, y, angle); `environment_state_agent_pos` is LeRobot's
keypoint observation: `observation/state` the agent's position, `observation/environment_state` the T's 8
keypoints (16 values), which a LeRobot checkpoint reads as `observation.state` / `observation.environment_state`.

Seeded by `reset(seed=)` (deterministic); success is `info["is_success"]` (the block covers > 95 % of
the target). Actions are the agent's target position in pixels, 0..512 per axis (`native`), or
[-1, 1] mapped onto that square (`normalized`, for the built-in random/zero baselines). The adapter is
sim/gymnasium_env.py's, made by sim/pusht_env.py (the type's entry point); this module imports neither
gym-pusht nor pygame.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from evalfleet.sim.base import EnvironmentInfo
from evalfleet.sim.protocol import FailureCode, TaskProtocol
from evalfleet.sim.registration import register_environment
from evalfleet.sim.spec_checks import Actions, EnvironmentOptions, Int, max_steps_field
from evalfleet.sim.standard_variations import action_noise, observation_noise, variation_table

PUSHT_ID = "gym_pusht/PushT-v0"
MAX_STEPS = 300  # gym-pusht's registered limit (LeRobot evaluates with the same)
INSTRUCTION = "push the T-shaped block onto the T-shaped target"
ACTION_LOW, ACTION_HIGH = 0.0, 512.0
SUCCESS_COVERAGE = 0.95  # gym-pusht's success_threshold
LOW_COVERAGE = 0.5  # an episode ending below it was far from the target
MOVED_PX, MOVED_RAD = 1.0, 0.01  # how far the block must have moved from its start, or turned, to count as pushed
BLOCK_UNTOUCHED = FailureCode("block_untouched", f"the block never moved (less than {MOVED_PX:g} px and "
                              f"{MOVED_RAD:g} rad from its start): the agent never pushed it")
LOW_COVERAGE_CODE = FailureCode("low_coverage", f"the block was pushed but ended covering less than "
                                f"{LOW_COVERAGE:.0%} of the target")


class PushTOptions(EnvironmentOptions):
    obs_type: Literal["state", "environment_state_agent_pos", "pixels", "pixels_agent_pos"] = "state"
    max_steps: Int = max_steps_field(MAX_STEPS)
    actions: Actions = "native"
    image_size: Int = Field(default=96, ge=8, le=1024, description="side of the `top` camera image (pixels obs)")
    render: bool = Field(default=False, description="add camera `render`: the 680 px visualisation, every step")
    render_size: Int = Field(default=680, ge=96, le=2048)  # gym-pusht draws its action marker 0 px thick below 96
    instruction: str = INSTRUCTION

    def cameras(self) -> list[str]:
        return (["top"] if self.obs_type != "state" else []) + (["render"] if self.render else [])


VARIATIONS = variation_table(
    action_noise("std of Gaussian noise added to every action, in units of half the action range (0.1 = 25.6 px)",
                 0.2),
    observation_noise("std of Gaussian noise (pixels; radians for the block angle) added to the state vector "
                      "and the keypoints", 5.0),
)



def task_protocol(opts: PushTOptions) -> TaskProtocol:
    return TaskProtocol(
        task="pusht:PushT-v0",
        success=f"the block covers more than {SUCCESS_COVERAGE:.0%} of the target (gym-pusht's info['is_success']); "
                "it ends the episode",
        failures=(BLOCK_UNTOUCHED, LOW_COVERAGE_CODE),
        parameters={"max_steps": opts.max_steps, "success_coverage": SUCCESS_COVERAGE, "low_coverage": LOW_COVERAGE,
                    "moved_px": MOVED_PX, "moved_rad": MOVED_RAD})


_make_pusht = register_environment(
    "pusht", "evalfleet.sim.pusht_env:make_pusht_env", options=PushTOptions,
    summary="Push-T (gym-pusht, 2-D, CPU): push a T-shaped block onto a target; needs evalfleet[pusht]",
    info=EnvironmentInfo(variations=VARIATIONS, action_dim=2, protocol=task_protocol),
)
