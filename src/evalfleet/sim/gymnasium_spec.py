"""Registration of the `gymnasium` environment type: any registered Gymnasium id.

    environment: {type: gymnasium, id: CartPole-v1, import: gymnasium, kwargs: {...},
                  success: {terminated: true} | {info_key: is_success} | {reward_at_least: 1.0},
                  instruction: "...", max_steps: 500, actions: native | normalized, render: false}

Light on purpose, and no code runs at load: loading an Experiment checks only the spelling of `import`
(a dotted module name) and `id` (`[namespace/]Name[-vN]`), never whether or what they import. Only
the runner imports `import`, exactly as named, then Gymnasium makes `id`; the runner's Python never
has the current folder on `sys.path`, so `import` names an installed module (or one on an explicit
PYTHONPATH), never a folder that happens to sit where the command ran. Gymnasium's own
`module:Name` form of an id (it imports `module`) is refused: write `import: module` and `id: Name`.
"""

from __future__ import annotations

import keyword
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from evalfleet.sim.base import ENVIRONMENTS, EnvironmentInfo, VariationInfo
from evalfleet.sim.spec_checks import EnvironmentOptionsError, Int


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


MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
# Gymnasium's id grammar (`gymnasium.envs.registration`), less its `module:` prefix.
GYM_ID = re.compile(r"([\w.-]+/)?[\w.-]+")


def check_module_name(module: str | None) -> str | None:
    """A dotted module name (`gym_pusht`, `my_pkg.envs`); checked by spelling only: nothing is imported
    or searched for here (finding a dotted name would import its parent package)."""
    if module is None:
        return module
    if not MODULE_NAME.fullmatch(module) or any(keyword.iskeyword(part) for part in module.split(".")):
        raise ValueError(f"`import` must be a dotted module name such as gym_pusht or my_pkg.envs (got {module!r})")
    return module


def check_gym_id(env_id: str) -> str:
    if ":" in env_id:
        module, _, name = env_id.rpartition(":")
        raise ValueError(f"an id of the form module:Name makes Gymnasium import a module; write "
                         f"`import: {module}` and `id: {name}` instead (got {env_id!r})")
    if not GYM_ID.fullmatch(env_id):
        raise ValueError(f"not a Gymnasium id: expected [namespace/]Name[-vN], e.g. CartPole-v1 (got {env_id!r})")
    return env_id


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
    def module_name(cls, v: str | None) -> str | None:
        return check_module_name(v)

    @field_validator("id")
    @classmethod
    def gym_id(cls, v: str) -> str:
        return check_gym_id(v)


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

        if opts.import_module:  # exactly the module named, from sys.path without the current folder
            try:
                importlib.import_module(opts.import_module)
            except ImportError as exc:
                raise EnvironmentOptionsError(
                    f"import {opts.import_module!r} failed ({type(exc).__name__}: {exc}); install the package "
                    "that provides it (the folder evalfleet runs in is not searched: see docs/environments.md)",
                    key="environment.import") from None
        kwargs = dict(opts.kwargs)
        if opts.render:
            kwargs["render_mode"] = "rgb_array"
        if opts.max_steps is not None:
            kwargs["max_episode_steps"] = opts.max_steps
        try:
            return gymnasium.make(opts.id, **kwargs)
        except (gymnasium.error.Error, TypeError) as exc:  # an unknown id, kwargs the env does not take
            raise EnvironmentOptionsError(f"gymnasium.make({opts.id!r}) failed: {type(exc).__name__}: {exc}",
                                          key="environment.id" if isinstance(exc, gymnasium.error.Error)
                                          else "environment.kwargs") from None

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
