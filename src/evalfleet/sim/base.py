"""The environment protocol and registry.

An environment adapter is registered with its options model and the variations it offers; its factory
is named by an entry-point string ("module:attr", sim/registration.py) and imported on first use, so
loading or planning an Experiment never imports a simulator, and no spec module imports its env module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
from pydantic import BaseModel

from evalfleet.registry import Registry
from evalfleet.sim.protocol import ProtocolSource, TaskProtocol, generic_protocol


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
    # What the task's episodes are judged by (success, milestones, failure codes): a TaskProtocol or a
    # function of the Run's typed options giving one (sim/protocol.py); None: the generic protocol.
    protocol: ProtocolSource | None = None
    # Modules a runner may import before it is given any shard (its adapter, the simulator; never a GL module):
    # `evalfleet run` imports them once in a template its local runners are forked from
    # (backends/local/runner_template.py).
    preload: tuple[str, ...] = ()
    # The cameras `render(camera, ...)` draws, where the adapter knows them (checked at load against the Run's
    # recording cameras); None: any name is tried when the episode records.
    cameras: tuple[str, ...] | None = None
    # Whether an episode may be stepped on after the env reports success (Meta-World's may; a Gymnasium env that
    # terminates on success may not): what `success.hold_steps` needs, checked at load.
    steps_past_success: bool = False


@dataclass
class StepResult:
    observation: dict[str, Any]
    success: bool
    done: bool  # success, or the step limit reached
    info: dict[str, Any] = field(default_factory=dict)


class Environment(Protocol):
    """What the runner needs of every environment: `reset`, `step`, `close`, its `max_steps` and
    `instruction`. Its optional members are declared, with their defaults, by `EnvironmentBase`; an
    adapter inherits that class, and an env that does not (a plugin's own class with only these members)
    is read with the same defaults through `with_defaults`. What is declared is checked against the
    policy's spec before the first episode."""

    max_steps: int
    instruction: str

    def reset(self, seed: int, variations: dict[str, Any]) -> dict[str, Any]:
        """Start the episode with this seed and variation values; the nominal scene is restored first."""

    def step(self, action: np.ndarray) -> StepResult: ...

    def close(self) -> None: ...


class EnvironmentBase:
    """Every optional member of the `Environment` protocol, with the default that means "not declared"
    (as Gymnasium's `Env` declares its own). Adapters inherit it and set what they know. Also optional,
    with no default: `render(camera, height, width)` (uint8 H×W×3 of a named camera; video recording
    uses it, so an env without it cannot record)."""

    action_dim: int | None = None  # the action's size; None: actions are not checked before a step
    action_low: np.ndarray | None = None  # bounds of the actions it accepts (both, or none)
    action_high: np.ndarray | None = None
    actions: str = "native"  # "normalized": it takes [-1, 1] and scales to its bounds
    cameras: tuple[str, ...] | None = None  # names rendered into `observation/images/<camera>`
    image_sizes: dict[str, tuple[int, int]] | None = None  # {camera: (height, width)}
    state_dim: int | None = None  # the size of `observation/state`
    gripper: str | None = None  # the action's gripper convention (see EnvironmentInfo)
    control_hz: float | None = None  # steps per simulated second: recording renders only what its fps shows
    # True: the runner also passes `episode=` (the plan's index) to `reset`, for benchmarks with fixed
    # per-episode initial states.
    reset_takes_episode: bool = False

    def failure_code(self) -> str | None:
        """The task failure code (declared in the adapter's protocol) that explains the episode that just ended
        without success, read from the env's own state; None: nothing finer than `step_limit`."""
        return None

    def state_digest(self) -> str | None:
        """A short digest of the simulator's whole state now (`evalfleet verify` compares the state an episode
        ends in); None: the runner digests the last observation's `observation/state` instead."""
        return None

    def render_video(self, camera: str, height: int | None = None, width: int | None = None,
                     mesh_tolerance_px: float = 0.0) -> np.ndarray:
        """A frame only a video shows, which may simplify what its pixels cannot show (meshes to
        `mesh_tolerance_px` pixels); by default the plain `render`."""
        return self.render(camera, height, width)


class _WithDefaults(EnvironmentBase):
    """An env that does not inherit EnvironmentBase, seen with its defaults: each member is the env's own
    where it has one, else EnvironmentBase's."""

    def __init__(self, env: Any):
        self._env = env

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("_"):  # the view's own (its class, `_env`)
            return object.__getattribute__(self, name)
        env = object.__getattribute__(self, "_env")
        try:
            return getattr(env, name)
        except AttributeError:
            if not hasattr(EnvironmentBase, name):
                raise  # the env's own error, as if it were read directly
        return object.__getattribute__(self, name)


def with_defaults(env: Any) -> EnvironmentBase:
    """`env` itself where it inherits EnvironmentBase, else a view of it with EnvironmentBase's defaults
    for the optional members it does not declare."""
    return env if isinstance(env, EnvironmentBase) else _WithDefaults(env)


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
    control_hz: float | None = None  # steps per simulated second, where the env declares it

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
        if self.control_hz is not None:
            parts.append(f"control at {self.control_hz:g} Hz")
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
    action_dim = low = high = state_dim = control_hz = None
    if env is not None:
        env = with_defaults(env)
        env_cameras = env.cameras
        if isinstance(env_cameras, (list, tuple)):
            cameras = tuple(str(c) for c in env_cameras)
        sizes = _sizes_of(cameras or (), env) or sizes
        action_dim = env.action_dim
        low, high = env.action_low, env.action_high
        if low is not None and high is not None:
            low = tuple(float(x) for x in np.asarray(low, dtype=float).reshape(-1))
            high = tuple(float(x) for x in np.asarray(high, dtype=float).reshape(-1))
            if env.actions == "normalized":  # it takes [-1, 1] and scales to its bounds
                low, high = (-1.0,) * len(low), (1.0,) * len(high)
        else:
            low = high = None
        state_dim = env.state_dim
        gripper = env.gripper or gripper
        control_hz = env.control_hz
    return EnvironmentSpec(
        source=f"environment {env_type}", action_dim=int(action_dim) if action_dim is not None else None,
        action_low=low, action_high=high, cameras=cameras,
        image_sizes={c: hw for c, hw in sizes.items() if cameras is None or c in cameras},
        state_dim=int(state_dim) if state_dim is not None else None, gripper=gripper,
        control_hz=float(control_hz) if control_hz else None,
    )


def task_protocol(env_type: str, options: Any = None) -> TaskProtocol:
    """The protocol of a Run's task (sim/protocol.py): its adapter's registered one, given the Run's options,
    else the generic protocol."""
    entry = ENVIRONMENTS.get(env_type)
    info = entry.info if entry is not None and isinstance(entry.info, EnvironmentInfo) else None
    source = info.protocol if info is not None else None
    if source is None:
        return generic_protocol(env_type)
    if isinstance(source, TaskProtocol):
        return source
    typed = options
    if entry is not None and entry.options is not None and not isinstance(options, entry.options):
        typed = entry.options.model_validate(dict(options or {}))
    return source(typed)
