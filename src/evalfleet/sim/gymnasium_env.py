"""A Gymnasium environment behind evalfleet's environment protocol (used by `gymnasium` and `pusht`).

It maps Gymnasium's `reset(seed=)`/`step()` 5-tuple onto `reset(seed, variations)`/`StepResult` and the
observation into the common vocabulary (DESIGN.md "Observations"): every image (uint8 H×W×C) becomes
`observation/images/<camera>` (the first one also `observation/image`), every other array is
flattened, in the observation's own key order, into one float64 `observation/state` (but for the key named
`environment_state=`, which becomes `observation/environment_state`: LeRobot's `observation.environment_state`,
e.g. Push-T's keypoints), and `prompt` is the instruction. Actions are the space's own (`native`, clipped to
its bounds) or `normalized`: [-1, 1] per dimension mapped linearly onto the bounds, so the built-in
`random`/`zero` policies make sense on any Box. Determinism is the environment's: on its first reset the
adapter resets twice with the same seed and warns once when the two first observations differ.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from evalfleet.sim.base import EnvironmentBase, StepResult
from evalfleet.sim.noise import noise_rng

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SuccessRule:
    """How an episode counts as a success: a truthy `info[info_key]`, a step reward of at least
    `reward_at_least`, or the environment terminating (not truncating)."""

    info_key: str | None = None
    reward_at_least: float | None = None
    terminated: bool = False

    def __call__(self, reward: float, terminated: bool, truncated: bool, info: dict[str, Any]) -> bool:
        if self.info_key is not None:
            return bool(info.get(self.info_key, False))
        if self.reward_at_least is not None:
            return float(reward) >= self.reward_at_least
        return bool(self.terminated and terminated and not truncated)


def is_image(value: Any) -> bool:
    return (
        isinstance(value, np.ndarray) and value.dtype == np.uint8 and value.ndim == 3 and value.shape[-1] in (1, 3, 4)
    )


def flatten_items(obs: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(key path, leaf) of a (nested) dict/tuple observation, in its own order."""
    if isinstance(obs, dict):
        return [item for k, v in obs.items() for item in flatten_items(v, f"{prefix}{k}/")]
    if isinstance(obs, tuple):  # a Tuple space
        return [item for i, v in enumerate(obs) for item in flatten_items(v, f"{prefix}{i}/")]
    return [(prefix.rstrip("/"), obs)]


def resize_nearest(image: np.ndarray, height: int, width: int) -> np.ndarray:
    if image.shape[:2] == (height, width):
        return image
    rows = (np.arange(height) * image.shape[0] / height).astype(int)
    cols = (np.arange(width) * image.shape[1] / width).astype(int)
    return image[rows][:, cols]


def _same(a: Any, b: Any) -> bool:
    left, right = flatten_items(a), flatten_items(b)
    return len(left) == len(right) and all(
        ka == kb and np.array_equal(np.asarray(va), np.asarray(vb)) for (ka, va), (kb, vb) in zip(left, right)
    )


class GymnasiumAdapter(EnvironmentBase):
    """One Gymnasium env instance; `make_env` is called once, in the process that steps it."""

    def __init__(
        self,
        make_env: Callable[[], Any],
        *,
        name: str,
        success: SuccessRule,
        instruction: str,
        max_steps: int | None,
        actions: str = "native",
        camera_names: dict[str, str] | None = None,
        render_camera: str | None = None,
        failure: Callable[["GymnasiumAdapter"], str | None] | None = None,
        environment_state: str | None = None,
    ):
        self.name = name  # for messages: the Gymnasium id
        self.env = make_env()
        self.success_rule = success
        self.instruction = instruction
        spec_limit = getattr(getattr(self.env, "spec", None), "max_episode_steps", None)
        self.max_steps = int(max_steps or spec_limit or 1000)
        self.actions = actions
        self.camera_names = camera_names or {}
        self.render_camera = render_camera  # a camera filled from env.render() (render_mode rgb_array)
        self.environment_state = environment_state  # the observation key kept apart as the environment state
        # The task failure code of an episode that ended without success (`failure_code`), from this adapter's
        # `first_info`/`last_info`/`terminated`; None: nothing finer than the step limit.
        self._failure = failure
        self.first_info: dict[str, Any] = {}  # the reset's info
        self.last_info: dict[str, Any] = {}  # the last step's
        self.terminated = False  # the last step terminated (not truncated)
        self._init_action_space(self.env.action_space)
        self.deterministic: bool | None = None  # known after the first reset
        self._steps = 0
        self._action_noise = self._obs_noise = 0.0
        self._action_rng = self._obs_rng = np.random.default_rng(0)

    def _init_action_space(self, space: Any) -> None:
        from gymnasium import spaces

        if isinstance(space, spaces.Box):
            self.discrete = None
            self.action_dim = int(np.prod(space.shape))
            self.action_low = np.broadcast_to(space.low, space.shape).reshape(-1).astype(np.float64)
            self.action_high = np.broadcast_to(space.high, space.shape).reshape(-1).astype(np.float64)
            self._action_shape, self._action_dtype = space.shape, space.dtype
        elif isinstance(space, spaces.Discrete):
            self.discrete = int(space.n)
            self.action_dim = 1
            self.action_low = np.array([float(space.start)])
            self.action_high = np.array([float(space.start + space.n - 1)])
        else:
            raise ValueError(  # noqa: TRY004 - callers catch ValueError
                f"{self.name}: action space {space} is neither a Box nor Discrete; evalfleet steps only those"
            )
        if self.actions == "normalized" and not np.all(np.isfinite([self.action_low, self.action_high])):
            raise ValueError(f"{self.name}: `actions: normalized` needs finite action bounds, got {space}")

    # -- episode ---------------------------------------------------------------------------------
    def reset(self, seed: int, variations: dict[str, Any]) -> dict[str, Any]:
        obs, info = self.env.reset(seed=int(seed))
        if self.deterministic is None:
            again, info = self.env.reset(seed=int(seed))
            self.deterministic = _same(obs, again)
            if not self.deterministic:
                message = (f"{self.name} is not deterministic: two resets with seed {seed} gave different first "
                           "observations, so per-episode results may differ between runs")
                log.warning(message)
                warnings.warn(message, RuntimeWarning, stacklevel=2)
            obs = again
        self._steps = 0
        self.first_info, self.last_info, self.terminated = dict(info or {}), {}, False
        self._action_noise = float(variations.get("robot.action_noise") or 0.0)
        self._obs_noise = float(variations.get("robot.observation_noise") or 0.0)
        self._action_rng = noise_rng(seed, "robot.action_noise")
        self._obs_rng = noise_rng(seed, "robot.observation_noise")
        return self._observation(obs)

    def step(self, action: np.ndarray) -> StepResult:
        obs, reward, terminated, truncated, info = self.env.step(self._env_action(action))
        self._steps += 1
        self.last_info, self.terminated = info, bool(terminated) and not truncated
        success = self.success_rule(reward, terminated, truncated, info)
        done = success or bool(terminated) or bool(truncated) or self._steps >= self.max_steps
        return StepResult(self._observation(obs), success, done, {"steps": self._steps, "reward": float(reward)})

    def failure_code(self) -> str | None:
        return self._failure(self) if self._failure is not None else None

    def _env_action(self, action: Any) -> Any:
        a = np.asarray(action, dtype=np.float64).reshape(self.action_dim)
        low, high = self.action_low, self.action_high
        if self.actions == "normalized":
            a = low + (np.clip(a, -1.0, 1.0) + 1.0) * 0.5 * (high - low)
        if self._action_noise > 0:
            # In units of half the action range where it is finite, so one noise level reads the same
            # on every benchmark (0.1 on Push-T's 0..512 px is 25.6 px).
            half = np.where(np.isfinite(high - low), (high - low) / 2, 1.0)
            a = a + self._action_rng.normal(0.0, self._action_noise, size=a.shape) * half
        a = np.clip(a, low, high)
        if self.discrete is not None:
            return int(np.rint(a[0]))
        return a.reshape(self._action_shape).astype(self._action_dtype)

    # -- observations ----------------------------------------------------------------------------
    def _observation(self, obs: Any) -> dict[str, Any]:
        images: dict[str, np.ndarray] = {}
        state: list[np.ndarray] = []
        environment: list[np.ndarray] = []
        for key, value in flatten_items(obs):
            if is_image(value):
                images[self.camera_names.get(key, key or "pixels")] = value  # a bare image: "pixels"
            else:
                vector = np.asarray(value, dtype=np.float64).reshape(-1)
                (environment if key == self.environment_state else state).append(vector)
        out: dict[str, Any] = {"observation/state": self._noisy(np.concatenate(state) if state else np.zeros(0)),
                               "prompt": self.instruction}
        if environment:
            out["observation/environment_state"] = self._noisy(np.concatenate(environment))
        if self.render_camera is not None:
            images[self.render_camera] = np.asarray(self.env.render(), dtype=np.uint8)
        for i, (camera, image) in enumerate(images.items()):
            out[f"observation/images/{camera}"] = image
            if i == 0:
                out["observation/image"] = image
        return out

    def _noisy(self, vector: np.ndarray) -> np.ndarray:
        if self._obs_noise > 0 and vector.size:
            return vector + self._obs_rng.normal(0.0, self._obs_noise, size=vector.shape)
        return vector

    def render(self, camera: str, height: int | None = None, width: int | None = None) -> np.ndarray:
        """The environment's rgb_array frame (video recording), resized (nearest) when asked."""
        frame = self.env.render()
        if frame is None:
            raise RuntimeError(f"{self.name} renders nothing; make it with `render: true` (render_mode rgb_array)")
        frame = np.asarray(frame, dtype=np.uint8)
        return resize_nearest(frame, int(height or frame.shape[0]), int(width or frame.shape[1]))

    def close(self) -> None:
        self.env.close()
