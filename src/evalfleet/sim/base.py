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
    # The gripper convention of the action's gripper component, where the adapter declares one
    # ("positive_closes" | "positive_opens"); checked against a policy that declares one too.
    gripper: str | None = None


@dataclass
class StepResult:
    observation: dict[str, Any]
    success: bool
    done: bool  # success, or the step limit reached
    info: dict[str, Any] = field(default_factory=dict)


class Environment(Protocol):
    """Adapters may also declare `action_low`/`action_high` (bounds of the actions they accept),
    `cameras` (names rendered into `observation/images/<camera>`), `image_sizes` ({camera: (h, w)}),
    `state_dim`, `gripper` (see EnvironmentInfo), `render(camera, height, width)` (used by video
    recording; `render_video(camera, height, width, mesh_tolerance_px)` instead where present: a frame
    only a video shows, which may simplify what its pixels cannot show), `control_hz` (steps per
    simulated second: recording then renders only the states its `fps` shows), and
    `reset_takes_episode = True`: the runner then also passes `episode=` (the plan's index) to `reset`, for
    benchmarks with fixed per-episode initial states. What is declared is checked against the policy's spec
    before the first episode."""

    action_dim: int
    max_steps: int
    instruction: str

    def reset(self, seed: int, variations: dict[str, Any]) -> dict[str, Any]:
        """Start the episode with this seed and variation values; the nominal scene is restored first."""

    def step(self, action: np.ndarray) -> StepResult: ...

    def close(self) -> None: ...


# type name → factory(options: BaseModel | dict, builder: dict) -> Environment
ENVIRONMENTS: Registry[Environment] = Registry("environment")


# ===================================================================== what a built environment provides


@dataclass(frozen=True)
class EnvironmentSpec:
    """What a Run's environment provides, against which a policy's declared spec is checked before the
    first episode (`policies.base.check_spec`). `None` (or an empty mapping) means "not declared": that
    part is not checked. Built by `environment_spec`, from the adapter's options model (cameras, image
    sizes) and, once an env exists, its own attributes (action size and bounds, cameras, state size)."""

    source: str  # how a message names this side, e.g. "environment metaworld"
    action_dim: int | None = None
    action_low: tuple[float, ...] | None = None
    action_high: tuple[float, ...] | None = None
    cameras: tuple[str, ...] | None = None
    image_sizes: dict[str, tuple[int, int]] = field(default_factory=dict)  # camera -> (height, width)
    state_dim: int | None = None
    gripper: str | None = None  # e.g. "positive_closes"; see policies.base.GRIPPER_CONVENTIONS

    def describe(self) -> str:
        parts = []
        if self.action_dim is not None:
            parts.append(f"action_dim {self.action_dim}")
        if self.action_low is not None and self.action_high is not None:
            parts.append(f"action bounds [{_span(self.action_low)}, {_span(self.action_high)}]")
        if self.cameras is not None:
            cams = [f"{c} {'x'.join(map(str, self.image_sizes[c]))}" if c in self.image_sizes else c
                    for c in self.cameras]
            parts.append(f"cameras {', '.join(cams) or 'none'}")
        if self.state_dim is not None:
            parts.append(f"state_dim {self.state_dim}")
        if self.gripper:
            parts.append(f"gripper {self.gripper}")
        return "; ".join(parts) or "nothing declared"


def _span(values: tuple[float, ...]) -> str:
    unique = sorted(set(values))
    return f"{unique[0]:g}" if len(unique) == 1 else "(" + ", ".join(f"{v:g}" for v in values) + ")"


def _call_or_value(value: Any) -> Any:
    return value() if callable(value) else value


def _sizes_of(cameras: tuple[str, ...], source: Any) -> dict[str, tuple[int, int]]:
    """Image sizes declared by an env or its options: `image_sizes` ({camera: [h, w]}), else one size for
    every camera (`image_hw()`, or `image_size`: N or [h, w])."""
    sizes = _call_or_value(getattr(source, "image_sizes", None))
    if isinstance(sizes, dict):
        return {str(c): (int(hw[0]), int(hw[1])) for c, hw in sizes.items()}
    one = _call_or_value(getattr(source, "image_hw", None))
    if one is None:
        one = getattr(source, "image_size", None)
    if isinstance(one, int) and not isinstance(one, bool):
        one = (one, one)
    if isinstance(one, (tuple, list)) and len(one) == 2:
        return {c: (int(one[0]), int(one[1])) for c in cameras}
    return {}


def environment_spec(env_type: str, options: Any, env: Any = None) -> EnvironmentSpec:
    """What the Run's environment provides: from its registered options model (known before anything
    runs: cameras, image sizes) and, when `env` is given, the built env's attributes (`action_dim`,
    `action_low`/`action_high`, `cameras`, `image_sizes`, `state_dim`, `gripper`). An env whose
    `actions` is "normalized" accepts [-1, 1] whatever its native bounds."""
    entry = ENVIRONMENTS.get(env_type)
    typed: Any = options
    if entry is not None and entry.options is not None and not isinstance(options, entry.options):
        try:
            typed = entry.options.model_validate(dict(options or {}))
        except Exception:  # noqa: BLE001 - validation reports bad options elsewhere; declare nothing here
            typed = None
    cameras = _call_or_value(getattr(typed, "cameras", None)) if typed is not None else None
    cameras = tuple(str(c) for c in cameras) if isinstance(cameras, (list, tuple)) else None
    info = entry.info if entry is not None and isinstance(entry.info, EnvironmentInfo) else None
    gripper = info.gripper if info is not None else None
    sizes = _sizes_of(cameras or (), typed) if typed is not None else {}
    action_dim = low = high = state_dim = None
    if env is not None:
        env_cameras = getattr(env, "cameras", None)
        if isinstance(env_cameras, (list, tuple)):
            cameras = tuple(str(c) for c in env_cameras)
        sizes = _sizes_of(cameras or (), env) or sizes
        action_dim = getattr(env, "action_dim", None)
        low, high = getattr(env, "action_low", None), getattr(env, "action_high", None)
        if low is not None and high is not None:
            low = tuple(float(x) for x in np.asarray(low, dtype=float).reshape(-1))
            high = tuple(float(x) for x in np.asarray(high, dtype=float).reshape(-1))
            if getattr(env, "actions", None) == "normalized":  # it takes [-1, 1] and scales to its bounds
                low, high = (-1.0,) * len(low), (1.0,) * len(high)
        else:
            low = high = None
        state_dim = getattr(env, "state_dim", None)
        gripper = getattr(env, "gripper", None) or gripper
    return EnvironmentSpec(
        source=f"environment {env_type}", action_dim=int(action_dim) if action_dim is not None else None,
        action_low=low, action_high=high, cameras=cameras,
        image_sizes={c: hw for c, hw in sizes.items() if cameras is None or c in cameras},
        state_dim=int(state_dim) if state_dim is not None else None, gripper=gripper,
    )
