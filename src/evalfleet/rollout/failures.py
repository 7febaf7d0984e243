"""Which failure code an episode record carries (sim/protocol.py), and the Run's protocol beside its records.

Every `failure` or `error` record names one code: a `failure` the env's own `failure_code()` (a task code its
protocol declares) or `step_limit`; an `error` is classified from where and what failed (`policy_code`,
`env_code`; the runner itself gives `episode_timeout` and `recording_error`, and `rollout.inflight` gives
`runner_crash` and `stall` after a restart). Every record carries its Run's protocol identity, and
`<run>/protocol.json` holds the protocol it names. Records of another identity in a Run's folder are refused
(`check_records_protocol`): a changed protocol is a different measurement, never mixed silently.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any, Iterable

from evalfleet.errors import UserError
from evalfleet.layout import protocol_path
from evalfleet.sim.protocol import (
    ENV_ERROR,
    PHYSICS_ERROR,
    POLICY_ERROR,
    RECORDING_ERROR,
    SERVER_LOST,
    SPEC_MISMATCH,
    STEP_LIMIT,
    PhysicsError,
    TaskProtocol,
)


def describe_error(exc: BaseException) -> str:
    """An error record's `error`: the exception's type, message and where it was raised."""
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
    return f"{type(exc).__name__}: {exc}{where}"[:2000]


class UndeclaredFailureCode(RuntimeError):
    """An adapter's `failure_code()` named a code its protocol does not declare as a task code: the
    adapter's bug, never written into a record."""


def _fault_code(exc: BaseException) -> str | None:
    from evalfleet.policies.base import SpecMismatchError

    if isinstance(exc, PhysicsError):
        return PHYSICS_ERROR.code
    if isinstance(exc, SpecMismatchError):
        return SPEC_MISMATCH.code
    return None


def policy_code(exc: BaseException) -> str:
    """The code of an episode whose policy call (or policy reset) raised `exc`: `server_lost` for a served
    policy whose server is gone after its reconnects (an InfrastructureError that is not the server's own
    answer), else `policy_error`."""
    from evalfleet.errors import InfrastructureError
    from evalfleet.serving.common import RemotePolicyError

    code = _fault_code(exc)
    if code is not None:
        return code
    if isinstance(exc, InfrastructureError) and not isinstance(exc, RemotePolicyError):
        return SERVER_LOST.code
    return POLICY_ERROR.code


def env_code(exc: BaseException) -> str:
    """The code of an episode whose environment raised `exc` while resetting or stepping."""
    return _fault_code(exc) or ENV_ERROR.code


def recording_code(_exc: BaseException) -> str:
    """The code of an episode whose video frame or file could not be made."""
    return RECORDING_ERROR.code


def task_code(env: Any, protocol: TaskProtocol) -> str:
    """The code of an episode that ended without success: the env's `failure_code()` where it names one (it
    must be a task code of `protocol`), else `step_limit`."""
    code = env.failure_code()
    if code is None:
        return STEP_LIMIT.code
    declared = protocol.code(code) if isinstance(code, str) else None
    if declared is None or declared.kind != "task":
        task_codes = [c.code for c in protocol.codes() if c.kind == "task"]
        raise UndeclaredFailureCode(
            f"{type(env).__name__}.failure_code() returned {code!r}, which the protocol of {protocol.task!r} does "
            f"not declare as a task failure code (its task codes: {', '.join(task_codes)}); declare it in the "
            "adapter's TaskProtocol.failures, or return None for step_limit")
    return code


def run_protocol(run: Any) -> TaskProtocol:
    """A Run's task protocol, from its environment type and options; a success that must hold several steps
    (`success.hold_steps`) is another measurement, so another protocol identity."""
    import dataclasses

    from evalfleet.sim.base import task_protocol

    protocol = task_protocol(run.environment.type, run.environment.options())
    hold = getattr(getattr(run, "success", None), "hold_steps", 1)
    if hold > 1:
        protocol = dataclasses.replace(protocol, success=f"{protocol.success}, held for {hold} consecutive steps",
                                       parameters={**protocol.parameters, "success_hold_steps": hold})
    return protocol


def write_protocol(out_dir: Path, run: str, protocol: TaskProtocol) -> None:
    """`<run>/protocol.json`: the protocol the Run's records name (rewritten only when it differs)."""
    import json

    from evalfleet.rollout.heartbeat import write_json_atomic

    path = protocol_path(out_dir, run)
    described = protocol.describe()
    try:
        if json.loads(path.read_text(encoding="utf-8")) == described:
            return
    except (OSError, ValueError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, described)


def check_records_protocol(paths: Iterable[Path], protocol: TaskProtocol) -> None:
    """Refuse a Run folder whose records were made under another protocol identity (records that name none
    predate protocols and are taken as they are)."""
    from evalfleet.rollout.records import iter_record_dicts

    identity = protocol.identity
    for path in paths:
        for rec in iter_record_dicts(path):
            found = rec.get("protocol")
            if found is not None and found != identity:
                raise UserError(
                    f"its records were made under protocol {found}, but this Run's task {protocol.task!r} now has "
                    f"protocol {identity} (the task's success rule, step limit or failure codes changed); results "
                    "of two protocols are never mixed: write this Experiment to a new output folder (--output) "
                    "instead of resuming this one",
                    where=str(path), key="protocol")


def check_resume_protocols(out_dir: Path, runs: dict[str, Any]) -> None:
    """Before a resume writes anything: every Run's existing records carry its current protocol identity."""
    for name, run in runs.items():
        if (out_dir / name).is_dir():
            from evalfleet.rollout.records import run_logs

            check_records_protocol(run_logs(out_dir, name), run_protocol(run))

