"""`--policy_config FILE`: one policy section for every Run, as Isaac Lab Arena's experiment runner takes it
(isaac-sim/IsaacLab-Arena pull request #1271: "replace the complete policy for every Run").

The file is a policy section (`type:` and that type's options), or a map with one `policy:` key holding it.
Precedence, lowest first: `shared.policy` and each Run's own `policy:` are replaced whole (never merged, so no
option of the file's policy mixes with the Run's), then command-line overrides (`runs.NAME.policy.KEY=VALUE`)
apply on top, as for any other key.
"""

from __future__ import annotations

import copy
from typing import Any

from evalfleet.errors import UserError

FLAG = "--policy_config"


def read_policy_config(path: str) -> dict[str, Any]:
    """The policy section of a --policy_config file (bounded YAML, like an Experiment file)."""
    from evalfleet.experiment.safe_yaml import parse_yaml, read_text_bounded

    doc = parse_yaml(read_text_bounded(path, path), path)
    if isinstance(doc, dict) and set(doc) == {"policy"}:
        doc, key = doc["policy"], "policy"
    else:
        key = None
    if not isinstance(doc, dict) or not doc:
        raise UserError(f"a {FLAG} file holds one policy section: a map with `type:` and the policy's options "
                        "(or `policy:` holding that map)", where=path, key=key)
    if not isinstance(doc.get("type"), str) or not doc["type"].strip():
        raise UserError("the policy section needs a `type:` (a policy type, e.g. openpi_remote or Arena's dotted "
                        "class path)", where=path, key=f"{key}.type" if key else "type")
    return doc


def apply_policy_config(doc: dict[str, Any], section: dict[str, Any]) -> dict[str, Any]:
    """The normalised Experiment document with every Run's policy replaced by `section`."""
    out = dict(doc)
    if isinstance(out.get("shared"), dict) and "policy" in out["shared"]:
        out["shared"] = {k: v for k, v in out["shared"].items() if k != "policy"}
    out["runs"] = {name: {**run, "policy": copy.deepcopy(section)} if isinstance(run, dict) else run
                   for name, run in out["runs"].items()}
    return out


def blame_policy_config(exc: UserError, path: str) -> UserError:
    """An error in a Run's policy that came from the --policy_config file: name that file and its key."""
    parts = (exc.key or "").split(".")
    if len(parts) >= 3 and parts[0] == "runs" and parts[2] == "policy":
        rest = ".".join(parts[3:])
        return UserError(f"{exc.message} (in every Run's policy, from {FLAG} {path})", where=path, key=rest or None)
    return exc
