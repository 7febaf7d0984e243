"""Secrets in a rendered workflow: nothing secret is in the spec itself. A literal secret travels as the
variable it is read from (`<key>_env: NAME`), and a task's `credentials` fill those variables from the OSMO
generic credential `osmo.credential` (see secrets.py and docs/cluster.md)."""

from __future__ import annotations

from typing import Any

from evalfleet.backends.osmo.settings import OsmoSettings
from evalfleet.secrets import looks_secret


def secrets_as_variables(node: Any, path: str) -> Any:
    """Every literal secret (`api_key`, Arena's `remote_api_token`, ...) → `<key>_env: <variable>`."""
    from evalfleet.secrets import env_name

    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            where = f"{path}.{key}"
            if looks_secret(str(key)) and not str(key).endswith("_env") and isinstance(value, str) and value:
                out[f"{key}_env"] = env_name(where)
            else:
                out[key] = secrets_as_variables(value, where)
        return out
    if isinstance(node, list):
        return [secrets_as_variables(v, f"{path}[{i}]") for i, v in enumerate(node)]
    return node


def secret_env_names(node: Any) -> list[str]:
    """The environment variables a Run's options read secrets from (`api_key_env: NAME`, ...)."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key.endswith("_env") and looks_secret(key[:-4]) and isinstance(value, str):
                found.append(value)
            else:
                found += secret_env_names(value)
    elif isinstance(node, list):
        for value in node:
            found += secret_env_names(value)
    return sorted(set(found))


def secret_credentials(policy: dict[str, Any], settings: OsmoSettings) -> dict[str, Any]:
    """A task's `credentials`: every variable its policy reads a secret from, out of the OSMO generic
    credential `osmo.credential` (key = the variable's name). Nothing secret is in the spec itself."""
    names = secret_env_names(policy)
    return {"credentials": {settings.credential: {name: name for name in names}}} if names else {}
