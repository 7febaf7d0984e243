"""A tiny environment and policies that fail on purpose, each in one way, for the failure-code tests (issue #26).
No simulator: an episode is a counter, so a test drives an episode into a code in milliseconds. Imported by the
tests in-process, or in runner subprocesses through EVALFLEET_PLUGINS=evalfleet_failure_plugins."""

from __future__ import annotations

import os
import signal
from typing import Any, Literal

import numpy as np

from evalfleet.policies.base import POLICIES, BasePolicy
from evalfleet.sim.base import EnvironmentBase, EnvironmentInfo, StepResult
from evalfleet.sim.protocol import FailureCode, PhysicsError, TaskProtocol
from evalfleet.sim.registration import register_environment
from evalfleet.sim.spec_checks import EnvironmentOptions

TIPPED_OVER = FailureCode("tipped_over", "the toy tipped over before its last step")


class FaultyOptions(EnvironmentOptions):
    task: str = "toy"
    fault: Literal["none", "physics", "step_raises", "tipped_over", "undeclared_code", "render_fails"] = "none"
    at_step: int = 2  # the step at which the fault strikes
    max_steps: int = 4
    succeed: bool = False  # True: the episode succeeds at its last step


def protocol(options: FaultyOptions) -> TaskProtocol:
    return TaskProtocol(task=f"test_faulty:{options.task}", success="succeed is set and the last step is reached",
                        failures=(TIPPED_OVER,), parameters={"max_steps": options.max_steps})


class FaultyEnv(EnvironmentBase):
    action_dim = 2
    control_hz = 10.0

    def __init__(self, options: FaultyOptions):
        self.options = options
        self.max_steps = options.max_steps
        self.instruction = "count to max_steps"
        self.steps = 0

    def reset(self, seed: int, variations: dict[str, Any]) -> dict[str, Any]:
        self.steps = 0
        return {"state": np.zeros(2)}

    def step(self, action: np.ndarray) -> StepResult:
        self.steps += 1
        fault = self.options.fault
        if self.steps == self.options.at_step:
            if fault == "physics":
                raise PhysicsError(f"the toy's state became NaN at step {self.steps}")
            if fault == "step_raises":
                raise RuntimeError(f"the toy broke at step {self.steps}")
        done = self.steps >= self.max_steps
        return StepResult({"state": np.full(2, float(self.steps))}, success=done and self.options.succeed, done=done)

    def failure_code(self) -> str | None:
        return {"tipped_over": TIPPED_OVER.code, "undeclared_code": "fell_in_a_hole"}.get(self.options.fault)

    def render(self, camera: str, height: int | None = None, width: int | None = None) -> np.ndarray:
        if self.options.fault == "render_fails":
            raise RuntimeError("no display for the toy's camera")
        return np.zeros((height or 16, width or 16, 3), dtype=np.uint8)

    def close(self) -> None:
        pass


register_environment("test_faulty", "evalfleet_failure_plugins:FaultyEnv", options=FaultyOptions,
                     info=EnvironmentInfo(action_dim=2, protocol=protocol))


class ZeroPolicy(BasePolicy):
    """Zeros of the size the env takes (`size` replaces it: a policy that does not fit), raising at call
    `raise_at` (0: never); SIGKILLs its own process at the start of the episode whose seed is `kill_seed`, on
    every attempt (a crash that always comes back)."""

    def __init__(self, options: dict, context: Any):
        self.size = int(options.get("size", context.action_dim))
        self.raise_at = int(options.get("raise_at", 0))
        self.kill_seed = options.get("kill_seed")
        self.calls = 0

    def reset(self, episode_seed: int, env_id: int = 0) -> None:
        if self.kill_seed is not None and episode_seed == int(self.kill_seed):
            os.kill(os.getpid(), signal.SIGKILL)

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        self.calls += 1
        if self.calls == self.raise_at:
            raise ValueError(f"the policy gave up at call {self.calls}")
        return np.zeros(self.size, dtype=np.float32)


POLICIES.register("test_zero")(ZeroPolicy)
