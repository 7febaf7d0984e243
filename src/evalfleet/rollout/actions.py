"""The runner's check of every action before the env steps it: `action_dim` finite numbers, or a
SpecMismatchError of the Run (never cut to size, stepped with, or counted as a failure)."""

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
