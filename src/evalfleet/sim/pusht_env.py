"""The `pusht` environment type's env: gym-pusht's Push-T made by Gymnasium, in sim/gymnasium_env.py's adapter.
Named by the type's entry point (sim/pusht_spec.py), so gym-pusht and pygame load only when a runner builds one."""

from __future__ import annotations

from typing import Any

from evalfleet.sim.gymnasium_env import GymnasiumAdapter, SuccessRule
import numpy as np

from evalfleet.sim.pusht_spec import (BLOCK_UNTOUCHED, LOW_COVERAGE, LOW_COVERAGE_CODE, MOVED_PX, MOVED_RAD, PUSHT_ID,
                                      PushTOptions)


def pusht_failure(adapter: GymnasiumAdapter) -> str | None:
    """block_untouched: the block's pose at the end is its pose at the reset; low_coverage: it ended covering
    less than LOW_COVERAGE of the target (gym-pusht's info['coverage']); else None (a near miss: step_limit)."""
    start = adapter.first_info.get("block_pose")
    end = adapter.last_info.get("block_pose", start)
    if start is not None and end is not None:
        moved = np.subtract(end, start)
        if np.hypot(moved[0], moved[1]) < MOVED_PX and abs(moved[2]) < MOVED_RAD:
            return BLOCK_UNTOUCHED.code
    if float(adapter.last_info.get("coverage", 0.0)) < LOW_COVERAGE:
        return LOW_COVERAGE_CODE.code
    return None


def make_pusht_env(opts: PushTOptions) -> GymnasiumAdapter:
    def make() -> Any:
        import gym_pusht  # noqa: F401 - registers the id
        import gymnasium

        return gymnasium.make(
            PUSHT_ID, obs_type=opts.obs_type, render_mode="rgb_array", max_episode_steps=opts.max_steps,
            observation_width=opts.image_size, observation_height=opts.image_size,
            visualization_width=opts.render_size, visualization_height=opts.render_size,
        )

    return GymnasiumAdapter(
        make, name="pusht", success=SuccessRule(info_key="is_success"), instruction=opts.instruction,
        max_steps=opts.max_steps, actions=opts.actions, camera_names={"": "top", "pixels": "top"},
        render_camera="render" if opts.render else None, failure=pusht_failure,
        environment_state="environment_state",
    )
