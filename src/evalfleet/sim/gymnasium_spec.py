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
The env is made by sim/gymnasium_make.py, the type's entry point.
"""

from __future__ import annotations

import keyword
import re
from typing import Any

from pydantic import ConfigDict, Field, field_validator, model_validator

from evalfleet.sim.base import EnvironmentInfo
from evalfleet.sim.protocol import FailureCode, TaskProtocol
from evalfleet.sim.registration import register_environment
from evalfleet.sim.spec_checks import Actions, EnvironmentOptions, Int, max_steps_field
from evalfleet.sim.standard_variations import action_noise, observation_noise, variation_table


class SuccessOptions(EnvironmentOptions):
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


class GymnasiumOptions(EnvironmentOptions):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    id: str = Field(min_length=1, description="the registered Gymnasium id, e.g. CartPole-v1")
    import_module: str | None = Field(default=None, alias="import",
                                      description="module whose import registers the id (e.g. gym_pusht)")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="passed to gymnasium.make")
    success: SuccessOptions
    instruction: str = ""
    max_steps: Int | None = max_steps_field(None, most=100_000,
                                            description="default: the id's registered max_episode_steps, else 1000")
    actions: Actions = "native"
    render: bool = Field(default=False, description="make with render_mode rgb_array; adds camera `render`")

    @field_validator("import_module")
    @classmethod
    def module_name(cls, v: str | None) -> str | None:
        return check_module_name(v)

    @field_validator("id")
    @classmethod
    def gym_id(cls, v: str) -> str:
        return check_gym_id(v)


NOISE_VARIATIONS = variation_table(
    action_noise("std of zero-mean Gaussian noise added to every action, in units of half the action range "
                 "(absolute where the range is unbounded)", 0.2),
    observation_noise("std of zero-mean Gaussian noise added to the state vector the policy sees (the state's own "
                      "units)", 0.05),
)

TERMINATED = FailureCode("terminated", "the environment terminated the episode itself (not by its step limit) "
                         "without success")


def task_protocol(opts: GymnasiumOptions) -> TaskProtocol:
    """An id's protocol: its success rule, step limit and make kwargs are the parameters (a kwarg can change the
    task itself)."""
    rule = opts.success.model_dump(exclude_none=True)
    (kind, value), = rule.items()
    success = {"info_key": f"info[{value!r}] is truthy at a step", "reward_at_least": f"a step's reward >= {value}",
               "terminated": "the environment terminates the episode (not truncation)"}[kind]
    return TaskProtocol(task=f"gymnasium:{opts.id}", success=f"{success}; it ends the episode",
                        failures=() if kind == "terminated" else (TERMINATED,),
                        parameters={"id": opts.id, "success": rule, "max_steps": opts.max_steps,
                                    "kwargs": opts.kwargs})


_make_gymnasium = register_environment(
    "gymnasium", "evalfleet.sim.gymnasium_make:make_gymnasium_env", options=GymnasiumOptions,
    summary="any registered Gymnasium environment id (deterministic where the environment is)",
    info=EnvironmentInfo(variations=NOISE_VARIATIONS, protocol=task_protocol),
)
