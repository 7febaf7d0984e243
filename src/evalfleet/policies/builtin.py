"""Built-in policies: the Meta-World scripted experts, the Push-T planner, `random` and `zero`."""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from evalfleet.errors import UserError
from evalfleet.policies.base import POLICIES, BasePolicy, PolicyContext


class NoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ExpertOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    chunk_size: int = Field(default=1, gt=0, le=10_000,
                            description="actions returned per call: an open-loop plan of the expert when > 1")


class ChunkOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    chunk_size: int = Field(default=1, gt=0, description="actions returned per call (an action chunk when > 1)")


def _validated(model: type[BaseModel], options: Any) -> Any:
    return options if isinstance(options, model) else model.model_validate(options or {})


class ZeroPolicy(BasePolicy):
    def __init__(self, options: ChunkOptions, context: PolicyContext):
        self.shape = (options.chunk_size, context.action_dim) if options.chunk_size > 1 else (context.action_dim,)

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        return np.zeros(self.shape, dtype=np.float32)


class RandomPolicy(BasePolicy):
    """Uniform actions in [-1, 1], seeded per episode so an episode replays identically."""

    def __init__(self, options: ChunkOptions, context: PolicyContext):
        self.chunk_size = options.chunk_size
        self.action_dim = context.action_dim
        self._rngs: dict[int, np.random.Generator] = {}

    def reset(self, episode_seed: int, env_id: int = 0) -> None:
        self._rngs[env_id] = np.random.default_rng([episode_seed, 0x7A11D])

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        rng = self._rngs.setdefault(env_id, np.random.default_rng(0))
        shape = (self.chunk_size, self.action_dim) if self.chunk_size > 1 else (self.action_dim,)
        return rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)


def expert_class_name(task: str) -> str:
    """`pick-place-v3` → `SawyerPickPlaceV3Policy` (Meta-World's naming, with its one exception)."""
    base = task.removesuffix("-v3")
    special = {"peg-insert-side": "PegInsertionSide"}
    camel = special.get(base) or "".join(w.capitalize() for w in base.split("-"))
    return f"Sawyer{camel}V3Policy"


# Meta-World moves the hand's mocap by the action's clipped xyz times this per step (SawyerXYZEnv.action_scale).
METAWORLD_ACTION_SCALE = 1.0 / 100


class MetaworldExpertPolicy(BasePolicy):
    """The task's scripted expert from Meta-World, acting on `observation/state`. With `chunk_size` H > 1 it
    returns an action chunk: its own plan for the next H steps, made by asking the expert again with the hand
    moved as each planned action would move it (the objects assumed still), so a chunk is what a chunking
    policy would predict and goes stale as the world moves on without it."""

    def __init__(self, options: ExpertOptions | NoOptions, context: PolicyContext):
        import metaworld.policies as mw_policies

        task = context.env_options.get("task", context.task)
        cls = getattr(mw_policies, expert_class_name(str(task)), None)
        if cls is None:
            raise ValueError(f"Meta-World has no scripted expert for task {task!r}")
        self.expert = cls()
        self.chunk_size = getattr(options, "chunk_size", 1)

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        state = np.asarray(observation["observation/state"], dtype=np.float64)
        if self.chunk_size == 1:
            return np.asarray(self.expert.get_action(state), dtype=np.float32)
        state, chunk = state.copy(), []
        for _ in range(self.chunk_size):
            action = np.asarray(self.expert.get_action(state), dtype=np.float32)
            chunk.append(action)
            state[:3] += np.clip(action[:3], -1.0, 1.0) * METAWORLD_ACTION_SCALE
        return np.stack(chunk)


class PushTExpertOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_step: float = Field(default=30.0, gt=0, le=512,
                            description="px: how far from the agent an action may be (its speed)")


def check_pusht_environment(env_type: str, options: dict[str, Any]) -> None:
    """What `pusht_expert` needs of its Run (checked when the Experiment loads): Push-T, the T's pose in the
    observation (obs_type state or environment_state_agent_pos) and native actions (target pixels)."""
    if env_type != "pusht":
        raise UserError(f"pusht_expert plays Push-T; this Run's environment is {env_type!r}: use "
                        "`environment: {type: pusht}`", key="environment.type")
    obs_type = options.get("obs_type", "state")
    if obs_type not in ("state", "environment_state_agent_pos"):
        raise UserError(f"pusht_expert reads the T's pose, which obs_type {obs_type!r} does not give: use obs_type "
                        "state or environment_state_agent_pos", key="environment.obs_type")
    if options.get("actions", "native") != "native":
        raise UserError("pusht_expert gives target pixels: use the Push-T environment's `actions: native`",
                        key="environment.actions")


class PushTExpertPolicy(BasePolicy):
    """Push-T's scripted planner (policies/pusht_planner.py) on `obs_type: state` (the T's pose in the state) or
    `environment_state_agent_pos` (its pose from the keypoints); actions are native (target pixels)."""

    def __init__(self, options: PushTExpertOptions, context: PolicyContext):
        from evalfleet.policies.pusht_planner import PushTPlanner

        check_pusht_environment(context.env_type, context.env_options)
        self.planner = PushTPlanner(max_step=options.max_step)

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        from evalfleet.policies.pusht_planner import pose_from_keypoints

        state = np.asarray(observation["observation/state"], dtype=np.float64)
        if "observation/environment_state" in observation:
            xy, angle = pose_from_keypoints(observation["observation/environment_state"])
            return self.planner.target(state[:2], xy, angle).astype(np.float32)
        return self.planner.target(state[:2], state[2:4], float(state[4])).astype(np.float32)


POLICIES.register("zero", options=ChunkOptions, summary="all-zero actions (a do-nothing baseline)")(
    lambda options, context: ZeroPolicy(_validated(ChunkOptions, options), context)
)
POLICIES.register("random", options=ChunkOptions, summary="uniform random actions, seeded per episode")(
    lambda options, context: RandomPolicy(_validated(ChunkOptions, options), context)
)
POLICIES.register("metaworld_expert", options=ExpertOptions,
                  summary="Meta-World's scripted expert for the Run's task (chunk_size: its action chunks)")(
    lambda options, context: MetaworldExpertPolicy(_validated(ExpertOptions, options), context)
)
POLICIES.register("pusht_expert", options=PushTExpertOptions, info={"check_environment": check_pusht_environment},
                  summary="a scripted Push-T planner (obs_type state or environment_state_agent_pos; ~98% success)")(
    lambda options, context: PushTExpertPolicy(_validated(PushTExpertOptions, options), context)
)
