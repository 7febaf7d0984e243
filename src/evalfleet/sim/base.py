"""The environment protocol and registry.

An environment adapter is registered with its options model and the variations it offers; the
factory is imported lazily so loading or planning an Experiment never imports a simulator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
from pydantic import BaseModel

from evalfleet.registry import Registry


@dataclass(frozen=True)
class VariationInfo:
    """One variation an environment type offers, named `asset.variation`."""

    name: str
    description: str
    default_sampler: dict[str, Any]  # used when the Experiment enables it without a sampler
    kind: Literal["scalar", "vector", "categorical"] = "scalar"
    components: tuple[str, ...] = ()  # names of a vector's components (x, y, z)
    nominal: Any = 0.0  # the value that leaves the scene unchanged
    options: type[BaseModel] | None = None  # the variation's own options besides the sampler

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "kind": self.kind,
            "default_sampler": self.default_sampler,
            "nominal": self.nominal,
        }
        if self.components:
            out["components"] = list(self.components)
        if self.options is not None:
            out["options"] = {
                k: (f.default if not f.is_required() else "required") for k, f in self.options.model_fields.items()
            }
        return out


@dataclass(frozen=True)
class EnvironmentInfo:
    variations: dict[str, VariationInfo] = field(default_factory=dict)
    builder_keys: frozenset[str] = frozenset({"num_envs", "seed"})
    # The action size a served policy is told before any env exists (the runner uses the real env's).
    action_dim: int = 4


@dataclass
class StepResult:
    observation: dict[str, Any]
    success: bool
    done: bool  # success, or the step limit reached
    info: dict[str, Any] = field(default_factory=dict)


class Environment(Protocol):
    """Adapters may also declare `action_low`/`action_high` (bounds of the actions they accept),
    `cameras` (names rendered into `observation/images/<camera>`), `render(camera, height, width)`
    (used by video recording) and `control_hz` (steps per simulated second: recording then renders only
    the states its `fps` shows)."""

    action_dim: int
    max_steps: int
    instruction: str

    def reset(self, seed: int, variations: dict[str, Any]) -> dict[str, Any]:
        """Start the episode with this seed and variation values; the nominal scene is restored first."""

    def step(self, action: np.ndarray) -> StepResult: ...

    def close(self) -> None: ...


# type name → factory(options: BaseModel | dict, builder: dict) -> Environment
ENVIRONMENTS: Registry[Environment] = Registry("environment")
