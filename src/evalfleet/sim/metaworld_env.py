"""Meta-World adapter: one seeded task instance, per-episode variations, nominal model restored first.

MT1's `reset(seed=)` is ignored by Meta-World, so the task class is constructed directly with random
resets enabled and seeded before every episode (`env.seed(s)` then `env.reset()`): the layout of
episode i depends only on its seed.
"""

from __future__ import annotations

import warnings
from typing import Any

import mujoco
import numpy as np

from evalfleet.experiment.plan import stable_hash
from evalfleet.sim.base import StepResult
from evalfleet.sim.metaworld_spec import TASK_INSTRUCTIONS, MetaworldOptions

warnings.filterwarnings("ignore", message="Constant\\(s\\) may be too high", category=UserWarning)


def make_task_env(task: str) -> Any:
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS

    env = ALL_V3_ENVIRONMENTS[task]()
    env._partially_observable = False  # the goal is part of the state, as the scripted experts expect
    del env.sawyer_observation_space  # cached for the old observability
    env._freeze_rand_vec = False
    env.seeded_rand_vec = True  # layouts come from env.np_random, which env.seed() sets
    env._set_task_called = True
    return env


def noise_rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, stable_hash("noise", name) % 2**32])


class MetaworldEnvironment:
    action_dim = 4

    def __init__(self, options: MetaworldOptions):
        self.options = options
        self.task = options.task
        self.instruction = options.instruction or TASK_INSTRUCTIONS[options.task]
        self.max_steps = options.max_steps
        self.env = make_task_env(options.task)
        if self.max_steps > self.env.max_path_length:
            self.env.max_path_length = self.max_steps
        model = self.env.model
        self._nominal_friction = model.geom_friction.copy()
        self._nominal_mass = model.body_mass.copy()
        self._nominal_inertia = model.body_inertia.copy()
        free = np.flatnonzero(model.jnt_type == mujoco.mjtJoint.mjJNT_FREE)
        self._free_qpos = [int(model.jnt_qposadr[j]) for j in free]
        self._free_bodies = sorted({int(model.jnt_bodyid[j]) for j in free})
        self._steps = 0
        self._action_noise = 0.0
        self._obs_noise = 0.0
        self._action_rng = self._obs_rng = np.random.default_rng(0)

    # -- episode ---------------------------------------------------------------------------------
    def reset(self, seed: int, variations: dict[str, Any]) -> dict[str, Any]:
        model = self.env.model
        # Nominal first, so no variation leaks from one episode into the next.
        model.geom_friction[:] = self._nominal_friction
        model.body_mass[:] = self._nominal_mass
        model.body_inertia[:] = self._nominal_inertia

        friction = variations.get("scene.friction_scale")
        if friction is not None:
            model.geom_friction[:, 0] = self._nominal_friction[:, 0] * float(friction)
        mass = variations.get("object.mass_scale")
        if mass is not None:
            for b in self._free_bodies:
                model.body_mass[b] = self._nominal_mass[b] * float(mass)
                model.body_inertia[b] = self._nominal_inertia[b] * float(mass)

        self.env.seed(int(seed))
        obs, _ = self.env.reset()
        offset = variations.get("object.position_noise")
        if offset is not None and self._free_qpos:
            data = self.env.data
            for adr in self._free_qpos:
                data.qpos[adr : adr + 3] += np.asarray(offset, dtype=float)
            mujoco.mj_forward(model, data)
            current = self.env._get_curr_obs_combined_no_goal()
            self.env._prev_obs = current
            obs = np.hstack((current, current, self.env._get_pos_goal())).astype(np.float64)

        self._steps = 0
        self._action_noise = float(variations.get("robot.action_noise") or 0.0)
        self._obs_noise = float(variations.get("robot.observation_noise") or 0.0)
        self._action_rng = noise_rng(seed, "robot.action_noise")
        self._obs_rng = noise_rng(seed, "robot.observation_noise")
        return self._observation(obs)

    def step(self, action: np.ndarray) -> StepResult:
        action = np.asarray(action, dtype=np.float64).reshape(-1)[: self.action_dim]
        if self._action_noise > 0:
            action = action + self._action_rng.normal(0.0, self._action_noise, size=action.shape)
        action = np.clip(action, -1.0, 1.0).astype(np.float32)
        obs, _reward, _terminated, _truncated, info = self.env.step(action)
        self._steps += 1
        success = bool(info.get("success", 0.0))
        done = success or self._steps >= self.max_steps
        return StepResult(self._observation(obs), success, done, {"steps": self._steps})

    def _observation(self, obs: np.ndarray) -> dict[str, Any]:
        state = np.asarray(obs, dtype=np.float64)
        if self._obs_noise > 0:
            state = state + self._obs_rng.normal(0.0, self._obs_noise, size=state.shape)
        return {"observation/state": state, "prompt": self.instruction}

    def close(self) -> None:
        self.env.close()
