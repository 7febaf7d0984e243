"""Registration of the `gymnasium` environment type: any registered Gymnasium id.

    environment: {type: gymnasium, id: CartPole-v1, import: gymnasium, kwargs: {...},
                  success: {terminated: true} | {info_key: is_success} | {reward_at_least: 1.0},
                  instruction: "...", max_steps: 500, actions: native | normalized, render: false}

Light on purpose: loading an Experiment only checks that the `import` module is installed (without
importing it); the adapter (sim/gymnasium_env.py) imports it, and Gymnasium, on first use.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from evalfleet.sim.base import ENVIRONMENTS, EnvironmentInfo, VariationInfo
from evalfleet.sim.spec_checks import Int


class SuccessOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    info_key: str | None = None
    reward_at_least: float | None = None
    terminated: bool | None = None

    @model_validator(mode="after")
    def exactly_one(self) -> "SuccessOptions":
        given = [k for k in ("info_key", "reward_at_least", "terminated") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of info_key, reward_at_least, terminated"
                             + (f" (got {', '.join(given)})" if given else ""))
        if self.terminated is False:
            raise ValueError("`terminated: false` never succeeds; use `terminated: true` or another rule")
        return self

    def rule(self) -> Any:
        from evalfleet.sim.gymnasium_env import SuccessRule

        return SuccessRule(self.info_key, self.reward_at_least, bool(self.terminated))


def check_importable(module: str | None) -> str | None:
    """The module is installed (found on the path); it is not imported here."""
    if module is None:
        return module
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise ValueError(f"module {module!r} is not installed here; install the package that provides it "
                         "(it must register the environment id when imported)")
    return module


class GymnasiumOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    id: str = Field(min_length=1, description="the registered Gymnasium id, e.g. CartPole-v1")
    import_module: str | None = Field(default=None, alias="import",
                                      description="module whose import registers the id (e.g. gym_pusht)")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="passed to gymnasium.make")
    success: SuccessOptions
    instruction: str = ""
    max_steps: Int | None = Field(default=None, gt=0, le=100_000,
                                  description="default: the id's registered max_episode_steps, else 1000")
    actions: Literal["native", "normalized"] = "native"
    render: bool = Field(default=False, description="make with render_mode rgb_array; adds camera `render`")

    @field_validator("import_module")
    @classmethod
    def installed(cls, v: str | None) -> str | None:
        return check_importable(v)


NOISE_VARIATIONS = {
    v.name: v
    for v in (
        VariationInfo(
            "robot.action_noise",
            "std of zero-mean Gaussian noise added to every action, in units of half the action range "
            "(absolute where the range is unbounded)",
            {"distribution": "uniform", "low": 0.0, "high": 0.2},
        ),
        VariationInfo(
            "robot.observation_noise",
            "std of zero-mean Gaussian noise added to the state vector the policy sees (the state's own units)",
            {"distribution": "uniform", "low": 0.0, "high": 0.05},
        ),
    )
}


def _make_gymnasium(options: Any, builder: dict[str, Any]) -> Any:
    opts = options if isinstance(options, GymnasiumOptions) else GymnasiumOptions.model_validate(options)

    def make() -> Any:
        import importlib

        import gymnasium

        if opts.import_module:
            importlib.import_module(opts.import_module)
        kwargs = dict(opts.kwargs)
        if opts.render:
            kwargs["render_mode"] = "rgb_array"
        if opts.max_steps is not None:
            kwargs["max_episode_steps"] = opts.max_steps
        return gymnasium.make(opts.id, **kwargs)

    from evalfleet.sim.gymnasium_env import GymnasiumAdapter

    return GymnasiumAdapter(make, name=opts.id, success=opts.success.rule(), instruction=opts.instruction,
                            max_steps=opts.max_steps, actions=opts.actions,
                            render_camera="render" if opts.render else None)


ENVIRONMENTS.register(
    "gymnasium",
    options=GymnasiumOptions,
    summary="any registered Gymnasium environment id (deterministic where the environment is)",
    info=EnvironmentInfo(variations=NOISE_VARIATIONS),
)(_make_gymnasium)
