"""Which policy servers an Experiment needs: one per Run whose policy type has a server binding that
applies, or, with `server_sharing: per_policy`, one per distinct server identity (Runs with the same
server-side settings share it and its batching)."""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass, field
from typing import Any

from evalfleet.errors import UserError
from evalfleet.policies.base import PolicyContext
from evalfleet.secrets import looks_secret
from evalfleet.serving.bindings import ServerBinding, ServerCommand, ServerUse, binding_for

DEFAULT_ACTION_DIM = 4


@dataclass
class ServerPlan:
    id: str  # a name safe for files and cluster task names
    binding: ServerBinding
    options: dict[str, Any]  # the first Run's policy options (server side equal for all)
    context: PolicyContext  # the first Run's context
    runs: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        res = self.binding.resources(self.options)
        return {
            "id": self.id,
            "policy_type": self.binding.policy_type,
            "protocol": self.binding.protocol,
            "runs": self.runs,
            "resources": {"gpus": res.gpus, "cpus": res.cpus, "memory_gb": res.memory_gb},
            "command": self.binding.command(self.options, "127.0.0.1", self.binding.default_port, self.context)
            .shell(hide=tuple(k for k in self.binding.command(self.options).env if looks_secret(k))),
        }


def policy_context(name: str, run: Any, seed: int = 0) -> PolicyContext:
    from evalfleet.sim.base import ENVIRONMENTS

    entry = ENVIRONMENTS.get(run.environment.type)
    action_dim = DEFAULT_ACTION_DIM
    if entry is not None and entry.info is not None:
        action_dim = getattr(entry.info, "action_dim", DEFAULT_ACTION_DIM)
    return PolicyContext(run=name, task=run.task_tag(), env_type=run.environment.type,
                         env_options=run.environment.options(), action_dim=action_dim, seed=seed)


def plan_server_groups(runs: dict[str, Any], sharing: str = "per_run", seed: int = 0) -> list[ServerPlan]:
    plans: dict[str, ServerPlan] = {}
    uses: dict[str, list[ServerUse]] = {}
    for name, run in runs.items():
        binding = binding_for(run.policy.type)
        options = run.policy.options()
        if binding is None or not binding.needs_server(options):
            continue
        context = policy_context(name, run, seed)
        if sharing == "per_policy":
            identity = binding.server_identity(options, context)
            key = f"{_slug(binding.policy_type)}-{hashlib.sha256(identity.encode()).hexdigest()[:8]}"
        else:
            key = f"{name}-server"
        plan = plans.get(key)
        if plan is None:
            plan = plans[key] = ServerPlan(key, binding, options, context)
        plan.runs.append(name)
        uses.setdefault(key, []).append(ServerUse(name, options, context))
    for key, group in uses.items():
        plans[key].binding.check(group)
    return list(plans.values())


def server_commands(runs: dict[str, Any], where: str, host: str = "127.0.0.1") -> list[tuple[str, ServerCommand]]:
    """(Run, the command its server runs when bound to `host`) for every served Run; a binding's refusal (e.g.
    a non-loopback host without a key) names the Run."""
    commands = []
    for name, run in runs.items():
        binding = binding_for(run.policy.type)
        options = run.policy.options()
        if binding is None or not binding.needs_server(options):
            continue
        try:
            commands.append((name, binding.command(options, host, binding.default_port, policy_context(name, run))))
        except UserError as exc:
            raise UserError(f"Run {name!r}: {exc.message}", where=where,
                            key=f"runs.{name}.{exc.key}" if exc.key else f"runs.{name}.policy") from None
    return commands


def check_server_programs(runs: dict[str, Any], where: str) -> None:
    """For servers started on this machine (the local backend), before anything is written: the program each
    one runs (a `python:` interpreter or venv's bin/python, `vla-eval`) must exist here and be executable."""
    for name, command in server_commands(runs, where):
        program = command.argv[0]
        if program == "evalfleet":  # this Python's own (serving.process.ServerProcess)
            continue
        found = shutil.which(program)
        if found is None or not os.path.isfile(found):
            own = command.argv[1:3] == ["-m", "evalfleet.cli"]
            fix = ("set `python` to an interpreter or a venv folder (LeRobot's venv: `bash scripts/lerobot-env.sh`)"
                   if own else f"install {program} here")
            raise UserError(f"Run {name!r} starts its policy server with {program}, which does not exist or is not"
                            f" an executable file here: {fix}", where=where,
                            key=f"runs.{name}.policy.python" if own else f"runs.{name}.policy")


def plan_servers(runs: dict[str, Any], sharing: str = "per_run", seed: int = 0) -> list[dict[str, Any]]:
    return [p.to_json() for p in plan_server_groups(runs, sharing, seed)]


def _slug(policy_type: str) -> str:
    return policy_type.rsplit(".", 1)[-1].replace("_", "-").lower()
