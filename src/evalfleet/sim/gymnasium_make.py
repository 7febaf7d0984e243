"""The `gymnasium` environment type's env: `import` imported exactly as named, then `gymnasium.make(id)`, in
sim/gymnasium_env.py's adapter. Named by the type's entry point (sim/gymnasium_spec.py): only a runner imports
Gymnasium or what `import` names."""

from __future__ import annotations

import importlib
from typing import Any

from evalfleet.sim.gymnasium_env import GymnasiumAdapter, SuccessRule
from evalfleet.sim.gymnasium_spec import TERMINATED, GymnasiumOptions, SuccessOptions
from evalfleet.sim.spec_checks import EnvironmentOptionsError


def success_rule(success: SuccessOptions) -> SuccessRule:
    return SuccessRule(success.info_key, success.reward_at_least, bool(success.terminated))


def terminated_code(adapter: GymnasiumAdapter) -> str | None:
    """`terminated` when the env ended the episode itself (its success rule is not termination), else None."""
    return TERMINATED.code if adapter.terminated else None


def make_gymnasium_env(opts: GymnasiumOptions) -> GymnasiumAdapter:
    def make() -> Any:
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

    return GymnasiumAdapter(make, name=opts.id, success=success_rule(opts.success), instruction=opts.instruction,
                            max_steps=opts.max_steps, actions=opts.actions,
                            render_camera="render" if opts.render else None,
                            failure=None if opts.success.terminated else terminated_code)
