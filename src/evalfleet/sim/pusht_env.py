"""The `pusht` environment type's env: gym-pusht's Push-T made by Gymnasium, in sim/gymnasium_env.py's adapter.
Named by the type's entry point (sim/pusht_spec.py), so gym-pusht and pygame load only when a runner builds one."""

from __future__ import annotations

from typing import Any

from evalfleet.sim.gymnasium_env import GymnasiumAdapter, SuccessRule
from evalfleet.sim.pusht_spec import PUSHT_ID, PushTOptions


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
        render_camera="render" if opts.render else None,
    )
