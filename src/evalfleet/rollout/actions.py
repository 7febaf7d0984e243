"""The runner's check of every action before the env steps it: `action_dim` finite numbers, or a
SpecMismatchError of the Run (never cut to size, stepped with, or counted as a failure); and whether it lies
outside the bounds the env declares (`action_low`/`action_high`), which the env clips: counted per episode
(`clipped_actions`), since a policy clipped on most steps usually has the wrong action scale or convention."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def checked_action(action: Any, env: Any, run: Any, plan: Any, step: int, spec: Any) -> np.ndarray:
    """The action as the env's declared action spec takes it: `action_dim` finite numbers. Anything else is
    the policy not fitting its environment (a SpecMismatchError), never cut to size or stepped with."""
    dim = env.action_dim
    try:
        values = np.asarray(action, dtype=np.float64)
    except (TypeError, ValueError):
        problem = f"an action that is not numbers ({type(action).__name__})"
    else:
        if dim is not None and values.size != dim:
            problem = f"an action of shape {values.shape} ({values.size} values)"
        elif math.isfinite(sum(values.ravel().tolist())):  # the common case, ~5x cheaper than np.isfinite().all()
            return values  # (a sum of finite values that overflows to inf falls through to the exact check)
        elif not np.isfinite(values).all():
            bad = int(np.flatnonzero(~np.isfinite(values.reshape(-1)))[0])
            problem = f"a non-finite action ({values.reshape(-1)[bad]} at index {bad})"
        else:
            return values
    from evalfleet.policies.base import SpecMismatchError
    from evalfleet.sim.base import environment_spec

    env_type = run.environment.type
    env_spec = environment_spec(env_type, run.environment.options(), env)
    raise SpecMismatchError(
        f"policy {plan.policy!r} returned {problem} at step {step} of episode "
        f"{spec.index if spec else '?'}; environment {env_type} takes {env_spec.describe()} "
        "(finite values): make the policy produce that action, or choose the environment it was made for",
        where=f"Run {plan.name!r}")


def action_bounds(env: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """The env's declared action bounds as arrays (low, high), or None when it declares none."""
    low, high = getattr(env, "action_low", None), getattr(env, "action_high", None)
    if low is None or high is None:
        return None
    low, high = np.asarray(low, dtype=np.float64).reshape(-1), np.asarray(high, dtype=np.float64).reshape(-1)
    return (low, high) if low.shape == high.shape else None


def outside(values: np.ndarray, bounds: tuple[np.ndarray, np.ndarray]) -> bool:
    """Whether an action (checked: `action_dim` finite numbers) has a component outside the bounds."""
    flat = values.reshape(-1)
    return flat.shape == bounds[0].shape and bool((flat < bounds[0]).any() or (flat > bounds[1]).any())
