"""The policy protocol.

A policy maps an observation dict to actions. It may return one action (shape (A,)) or a chunk of H
actions (shape (H, A)); the runner executes `open_loop_horizon` of a chunk before asking again.
Observations use openpi-style keys: `observation/state` (float vector), `prompt` (the task's
instruction), and for camera policies `observation/image`, `observation/wrist_image` (uint8 H×W×3).
"""

from __future__ import annotations

import os

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, runtime_checkable

import numpy as np

from evalfleet.errors import UserError
from evalfleet.registry import Registry
from evalfleet.sim.base import EnvironmentSpec


@dataclass(frozen=True)
class PolicyContext:
    """What a policy may know about where it runs, fixed for the whole shard."""

    run: str
    task: str  # the Run's task tag, e.g. "pick-place-v3"
    env_type: str
    env_options: dict[str, Any] = field(default_factory=dict)
    action_dim: int = 4
    seed: int = 0


@runtime_checkable
class Policy(Protocol):
    def reset(self, episode_seed: int, env_id: int = 0) -> None: ...

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray: ...

    def act_batch(self, observations: list[dict[str, Any]], env_ids: list[int]) -> list[np.ndarray]: ...


class BasePolicy:
    """Convenience base. One instance serves all of a shard's lockstepped envs; `env_id` tells them
    apart so stateful policies keep per-env state. `act_batch` loops over `act`; batched models and
    remote clients override it."""

    metadata: dict[str, Any] = {}

    def reset(self, episode_seed: int, env_id: int = 0) -> None:  # optional hook
        pass

    def declared_spec(self) -> PolicySpec | None:
        """What this policy needs of the environment (a remote client: what its server declared), or None
        to fall back on its registry entry's `info["spec"]`."""
        return None

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        raise NotImplementedError

    def act_batch(self, observations: list[dict[str, Any]], env_ids: list[int]) -> list[np.ndarray]:
        return [self.act(obs, env_id) for obs, env_id in zip(observations, env_ids)]

    def close(self) -> None:  # optional hook
        pass


def single_act(policy: Any) -> Callable[[dict[str, Any], int], np.ndarray] | None:
    """The policy's `act` where its `act_batch` is BasePolicy's (a loop over `act`), so one env's call can skip the
    loop; None where it batches (or wraps) on its own."""
    act_batch = getattr(type(policy), "act_batch", None)
    return policy.act if act_batch is BasePolicy.act_batch else None


# type name → factory(options: dict | BaseModel, context: PolicyContext) -> BasePolicy
POLICIES: Registry[BasePolicy] = Registry("policy")


# ===================================================================== declared spec, checked before the first episode

GRIPPER_CONVENTIONS = ("positive_closes", "positive_opens")
# How many runner processes share this host, set by the local backend in each runner's environment: a policy
# that computes on the CPU (a LeRobot checkpoint's torch) splits the cores among them (`cpu_threads`).
HOST_RUNNERS_ENV = "EVALFLEET_HOST_RUNNERS"


def cpu_threads() -> int:
    """The CPU threads one runner's policy should use: the cores this process may run on, divided among the runners
    on this host (HOST_RUNNERS_ENV; 1 when unset: a Ray or Slurm task already has only its own cores)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    try:
        runners = max(1, int(os.environ.get(HOST_RUNNERS_ENV, "1")))
    except ValueError:
        runners = 1
    return max(1, cores // runners)


SPEC_KEY = "spec"  # where a policy server's metadata carries the served policy's spec (openpi, vla-eval)
BOUNDS_TOLERANCE = 1e-6


class SpecMismatchError(UserError):
    """A policy's declared spec does not fit the Run's environment. The runner raises it before the Run's
    first episode; the worker records the Run as failed (`spec_mismatch`) instead of running episodes."""


@dataclass(frozen=True)
class PolicySpec:
    """What a policy declares it needs: action size and range it produces, the cameras (and their image
    sizes), the observation keys and state size it reads, and its gripper convention. None/empty: not
    declared, not checked. A local policy declares it in its registry entry (`info={"spec": fn}` with
    `fn(options, context) -> PolicySpec | None`, or `declared_spec()`); a served policy's spec travels in
    its server's metadata under `spec` (openpi metadata frame, vla-eval HELLO), see `from_mapping`."""

    source: str = "policy"  # how a message names this side, e.g. "policy zero (registry entry)"
    action_dim: int | None = None
    action_low: tuple[float, ...] | None = None
    action_high: tuple[float, ...] | None = None
    cameras: tuple[str, ...] = ()
    image_sizes: dict[str, tuple[int, int]] = field(default_factory=dict)
    state_dim: int | None = None
    keys: tuple[str, ...] = ()  # observation keys it reads; `observation/images/<camera>` means that camera
    gripper: str | None = None
    control_hz: float | None = None  # the control rate it was trained at (steps per second)

    def __post_init__(self) -> None:
        if self.gripper is not None and self.gripper not in GRIPPER_CONVENTIONS:
            raise ValueError(f"gripper must be one of {', '.join(GRIPPER_CONVENTIONS)}, got {self.gripper!r}")

    def required_cameras(self) -> tuple[str, ...]:
        from_keys = [k.split("/", 2)[2] for k in self.keys if k.startswith("observation/images/") and k.count("/") >= 2]
        return tuple(dict.fromkeys([*self.cameras, *self.image_sizes, *from_keys]))

    def to_mapping(self) -> dict[str, Any]:
        """The wire form (msgpack/JSON-safe): only what is declared."""
        out: dict[str, Any] = {}
        for name in ("action_dim", "state_dim", "gripper", "control_hz"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.action_low is not None and self.action_high is not None:
            out["action_low"], out["action_high"] = list(self.action_low), list(self.action_high)
        if self.cameras:
            out["cameras"] = list(self.cameras)
        if self.image_sizes:
            out["image_sizes"] = {c: list(hw) for c, hw in self.image_sizes.items()}
        if self.keys:
            out["keys"] = list(self.keys)
        return out

    @classmethod
    def from_mapping(cls, data: Any, source: str) -> PolicySpec:
        """From a server's declaration. Raises ValueError naming the field that is not what it should be."""
        if not isinstance(data, dict):
            raise ValueError(f"a spec must be a mapping, got {type(data).__name__}")  # noqa: TRY004 - callers catch ValueError
        unknown = sorted(set(data) - {"action_dim", "action_low", "action_high", "cameras", "image_sizes",
                                      "image_size", "state_dim", "keys", "gripper", "control_hz"})
        if unknown:
            raise ValueError(f"unknown spec field(s) {', '.join(map(str, unknown))}")

        def count(name: str) -> int | None:
            value = data.get(name)
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
                raise ValueError(f"spec {name} must be a positive integer, got {value!r}")
            return int(value)

        def numbers(name: str) -> tuple[float, ...] | None:
            value = data.get(name)
            if value is None:
                return None
            arr = np.asarray(value, dtype=float).reshape(-1)
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"spec {name} must be finite numbers")
            return tuple(float(x) for x in arr)

        def size(value: Any, name: str) -> tuple[int, int]:
            hw = list(value) if isinstance(value, (list, tuple)) else [value, value]
            if len(hw) != 2 or not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x > 0
                                       for x in hw):
                raise ValueError(f"spec {name} must be [height, width] in pixels, got {value!r}")
            return int(hw[0]), int(hw[1])

        cameras = tuple(str(c) for c in data.get("cameras") or ())
        sizes_in = data.get("image_sizes") or {}
        if not isinstance(sizes_in, dict):
            raise ValueError("spec image_sizes must map camera -> [height, width]")  # noqa: TRY004 - callers catch ValueError
        sizes = {str(c): size(hw, f"image_sizes.{c}") for c, hw in sizes_in.items()}
        if data.get("image_size") is not None:  # one size for every camera it names
            sizes = {c: size(data["image_size"], "image_size") for c in cameras} | sizes
        low, high = numbers("action_low"), numbers("action_high")
        if (low is None) != (high is None):
            raise ValueError("spec needs both action_low and action_high, or neither")
        hz = data.get("control_hz")
        if hz is not None and (isinstance(hz, bool) or not isinstance(hz, (int, float, np.number))
                               or not np.isfinite(hz) or not 0 < hz <= 100_000):
            raise ValueError(f"spec control_hz must be a positive number of steps per second, got {hz!r}")
        return cls(source=source, action_dim=count("action_dim"), action_low=low, action_high=high,
                   cameras=cameras, image_sizes=sizes, state_dim=count("state_dim"),
                   keys=tuple(str(k) for k in data.get("keys") or ()), gripper=data.get("gripper"),
                   control_hz=None if hz is None else float(hz))

    def describe(self) -> str:
        parts = []
        if self.action_dim is not None:
            parts.append(f"action_dim {self.action_dim}")
        if self.action_low is not None and self.action_high is not None:
            parts.append(f"actions in [{min(self.action_low):g}, {max(self.action_high):g}]")
        cams = self.required_cameras()
        if cams:
            parts.append("cameras " + ", ".join(
                f"{c} {'x'.join(map(str, self.image_sizes[c]))}" if c in self.image_sizes else c for c in cams))
        if self.state_dim is not None:
            parts.append(f"state_dim {self.state_dim}")
        other = [k for k in self.keys if not k.startswith("observation/images/")]
        if other:
            parts.append("keys " + ", ".join(other))
        if self.gripper:
            parts.append(f"gripper {self.gripper}")
        if self.control_hz is not None:
            parts.append(f"control at {self.control_hz:g} Hz")
        return "; ".join(parts) or "nothing declared"


CONTROL_HZ_TOLERANCE = 0.01  # relative: 80 Hz and 79.5 Hz are one rate, 80 Hz and 20 Hz are not


def spec_mismatches(policy: PolicySpec, env: EnvironmentSpec) -> list[str]:
    """Every way the policy's declaration and the environment disagree, each naming both sides' values.
    Parts either side leaves undeclared are not checked."""
    out: list[str] = []
    if policy.action_dim is not None and env.action_dim is not None and policy.action_dim != env.action_dim:
        out.append(f"action_dim: policy {policy.action_dim}, environment {env.action_dim}")
    if (policy.action_low is not None and policy.action_high is not None and env.action_low is not None
            and env.action_high is not None and len(env.action_low) == (env.action_dim or len(env.action_low))):
        p_low, p_high = np.asarray(policy.action_low), np.asarray(policy.action_high)
        e_low, e_high = np.asarray(env.action_low), np.asarray(env.action_high)
        try:
            outside = bool(np.any(p_low < e_low - BOUNDS_TOLERANCE) or np.any(p_high > e_high + BOUNDS_TOLERANCE))
        except ValueError:  # lengths differ: the action_dim check says so
            outside = False
        if outside:
            out.append(f"action bounds: policy [{p_low.min():g}, {p_high.max():g}], environment "
                       f"[{e_low.min():g}, {e_high.max():g}]")
    if env.cameras is not None:
        missing = [c for c in policy.required_cameras() if c not in env.cameras]
        if missing:
            out.append(f"cameras: policy needs {', '.join(missing)}, environment renders "
                       f"{', '.join(env.cameras) or 'none'}")
    for camera, hw in policy.image_sizes.items():
        have = env.image_sizes.get(camera)
        if have is not None and tuple(have) != tuple(hw):
            out.append(f"image size of {camera}: policy {hw[0]}x{hw[1]}, environment {have[0]}x{have[1]}")
    if policy.state_dim is not None and env.state_dim is not None and policy.state_dim != env.state_dim:
        out.append(f"state_dim: policy {policy.state_dim}, environment {env.state_dim}")
    if policy.gripper and env.gripper and policy.gripper != env.gripper:
        out.append(f"gripper: policy {policy.gripper}, environment {env.gripper}")
    if (policy.control_hz is not None and env.control_hz is not None
            and abs(policy.control_hz - env.control_hz) > CONTROL_HZ_TOLERANCE * env.control_hz):
        out.append(f"control rate: policy {policy.control_hz:g} Hz, environment {env.control_hz:g} Hz (each action "
                   "would last another time than it was trained for)")
    return out


def check_spec(policy: PolicySpec | None, env: EnvironmentSpec, *, run: str, where: str | None = None,
               key: str | None = None) -> None:
    """Raise SpecMismatchError (one line naming both sides) when `policy` does not fit `env`."""
    if policy is None:
        return
    problems = spec_mismatches(policy, env)
    if problems:
        raise SpecMismatchError(
            f"Run {run!r}: {policy.source} does not match {env.source}: {'; '.join(problems)}",
            where=where, key=key)


def registry_spec(type_name: str, options: Any, context: PolicyContext | None) -> PolicySpec | None:
    """The spec a policy type's registry entry declares (`info["spec"]`), or None."""
    entry = POLICIES.get(type_name)
    info = entry.info if entry is not None and isinstance(entry.info, dict) else {}
    declare = info.get("spec")
    if declare is None:
        return None
    spec = declare(options, context) if callable(declare) else declare
    if spec is not None and spec.source == "policy":
        from dataclasses import replace

        spec = replace(spec, source=f"policy {type_name} (registry entry)")
    return spec


def policy_spec(policy: Any, type_name: str, options: Any, context: PolicyContext | None) -> PolicySpec | None:
    """What a built policy declares: its own `declared_spec()` (a remote client: its server's), else its
    registry entry's."""
    declared = getattr(policy, "declared_spec", None)
    spec = declared() if callable(declared) else None
    return spec if spec is not None else registry_spec(type_name, options, context)
