"""What a task's episode is judged by: its success criterion, ordered milestones and the failure codes its
adapter can tell apart, with a SHA-256 identity stored beside its records (as Arena's `EvaluationSpec`).

Every failed or errored episode record carries one `failure_code`: a task code its adapter declares
(`object_dropped`, ...), `step_limit` when the adapter can say nothing more, or one of the codes every Run
can produce (`COMMON_CODES`: a policy or simulator fault, or infrastructure). Records of one Run made under
two protocol identities are never merged silently: a changed protocol is a different measurement.

Simulator-free: spec modules declare protocols at registration, so `plan` and the report know them without
importing a simulator.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

PROTOCOL_HASH_DOMAIN = b"evalfleet.task_protocol.v1\0"

# task: the policy did not achieve the task (a `failure` record). fault: the policy or the simulator failed
# (an `error` record). infrastructure: evalfleet's machinery failed the episode (an `error` record, retried).
CodeKind = Literal["task", "fault", "infrastructure"]


@dataclass(frozen=True)
class FailureCode:
    code: str  # stable, machine-readable: lower_snake_case
    description: str
    kind: CodeKind = "task"

    def describe(self) -> dict[str, str]:
        return {"code": self.code, "description": self.description, "kind": self.kind}


STEP_LIMIT = FailureCode("step_limit", "the step limit was reached without success")
POLICY_ERROR = FailureCode("policy_error", "the policy raised, or its server answered with an error", "fault")
SPEC_MISMATCH = FailureCode("spec_mismatch", "the policy's action or inputs do not fit the environment", "fault")
PHYSICS_ERROR = FailureCode("physics_error", "the simulation became unstable (non-finite or diverging state)",
                            "fault")
ENV_ERROR = FailureCode("env_error", "the environment raised while resetting or stepping", "fault")
EPISODE_TIMEOUT = FailureCode("episode_timeout", "the episode exceeded its wall-clock deadline", "infrastructure")
RECORDING_ERROR = FailureCode("recording_error", "the episode's video could not be written", "infrastructure")
SERVER_LOST = FailureCode("server_lost", "the policy server stopped answering (connection lost)", "infrastructure")
RUNNER_CRASH = FailureCode("runner_crash", "the runner process died while the episode was in flight",
                           "infrastructure")
SUCCESS_AT_RESET = FailureCode("success_at_reset", "the task's success held at reset or after the first step: the "
                               "episode says nothing about the policy (left out of the rate)", "fault")
STALL = FailureCode("stall", "the runner stopped making progress and was restarted by the watchdog",
                    "infrastructure")

# Codes any Run can produce, whatever its benchmark (STEP_LIMIT included: the fallback task code).
COMMON_CODES: tuple[FailureCode, ...] = (STEP_LIMIT, POLICY_ERROR, SPEC_MISMATCH, PHYSICS_ERROR, ENV_ERROR,
                                         EPISODE_TIMEOUT, RECORDING_ERROR, SERVER_LOST, RUNNER_CRASH, STALL,
                                         SUCCESS_AT_RESET)


class PhysicsError(RuntimeError):
    """Raised by an adapter whose simulation became unstable: the episode's record says `physics_error`."""


@dataclass(frozen=True)
class TaskProtocol:
    """One task's evaluation semantics. `parameters` holds what changes the measurement (the step limit, a
    success threshold): two protocols with different parameters have different identities."""

    task: str  # "<env type>:<task>", e.g. "metaworld:reach-v3"
    success: str  # the success criterion, in words: what the adapter checks
    milestones: tuple[str, ...] = ()  # ordered, named as the records' progress criteria name them
    failures: tuple[FailureCode, ...] = ()  # the adapter's own task codes, beyond COMMON_CODES
    parameters: dict[str, Any] = field(default_factory=dict)
    version: str = "1"

    def __post_init__(self) -> None:
        codes = [c.code for c in self.codes()]
        if len(codes) != len(set(codes)):
            raise ValueError(f"protocol {self.task!r} declares a failure code twice: {codes}")

    def codes(self) -> tuple[FailureCode, ...]:
        """Every code an episode of this task can carry: the adapter's own, then the common ones."""
        return (*self.failures, *COMMON_CODES)

    def code(self, name: str) -> FailureCode | None:
        return next((c for c in self.codes() if c.code == name), None)

    def canonical(self) -> dict[str, Any]:
        return {"task": self.task, "success": self.success, "milestones": list(self.milestones),
                "failures": [c.describe() for c in self.failures], "parameters": self.parameters,
                "version": self.version}

    @property
    def identity(self) -> str:
        """SHA-256 of the canonical JSON: what a record's `protocol` field holds."""
        text = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False, default=str)
        return hashlib.sha256(PROTOCOL_HASH_DOMAIN + text.encode("utf-8")).hexdigest()

    def describe(self) -> dict[str, Any]:
        return {**self.canonical(), "identity": self.identity,
                "common_codes": [c.describe() for c in COMMON_CODES]}


# What an adapter registers (EnvironmentInfo.protocol): one protocol, or a function of the Run's typed
# options giving its task's protocol.
ProtocolSource = TaskProtocol | Callable[[Any], TaskProtocol]


def generic_protocol(env_type: str, parameters: dict[str, Any] | None = None) -> TaskProtocol:
    """The protocol of an adapter that declares none: success is what the env reports, nothing finer."""
    return TaskProtocol(task=f"{env_type}:*", success="the environment reports success",
                        parameters=dict(parameters or {}))
