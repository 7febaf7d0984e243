"""A policy whose declared spec is whatever its options say (`declare: {...}`), for the spec-check tests.
Loaded in runner and server subprocesses through EVALFLEET_PLUGINS=spec_test_plugins (or
`evalfleet serve --import spec_test_plugins`) with this folder on PYTHONPATH."""

from __future__ import annotations

from typing import Any

import numpy as np

from evalfleet.policies.base import POLICIES, BasePolicy, PolicySpec


class DeclaringZeroPolicy(BasePolicy):
    """All-zero actions of the context's size; its registry entry declares `options["declare"]`."""

    def __init__(self, options: dict[str, Any], context: Any):
        self.action_dim = int(getattr(context, "action_dim", 4))

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        return np.zeros(self.action_dim, dtype=np.float32)


def declared(options: dict[str, Any], context: Any) -> PolicySpec | None:
    spec = dict(options or {}).get("declare")
    return None if spec is None else PolicySpec.from_mapping(spec, "policy spec_zero (registry entry)")


POLICIES.register("spec_zero", info={"spec": declared}, summary="zero actions; declares options.declare")(
    DeclaringZeroPolicy
)
