"""Every overridable leaf of an Experiment with its effective value (after merging and defaults)."""

from __future__ import annotations

from typing import Any

from evalfleet.experiment.overrides import format_value
from evalfleet.experiment.schema import Experiment
from evalfleet.secrets import mask_value


def _leaves(prefix: str, value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, dict) and value:
        out: list[tuple[str, Any]] = []
        for k, v in value.items():
            out.extend(_leaves(f"{prefix}.{k}", v))
        return out
    return [(prefix, value)]


def overridable_leaves(experiment: Experiment, document: dict[str, Any]) -> list[tuple[str, Any]]:
    leaves: list[tuple[str, Any]] = [
        ("name", experiment.name), ("seed", experiment.seed), ("server_sharing", experiment.server_sharing)
    ]
    shared = document.get("shared") or {}
    for key, value in shared.items():
        leaves.extend(_leaves(f"shared.{key}", value))
    for name, run in experiment.runs.items():
        data = run.model_dump(mode="json", exclude_none=True)
        # The tags are listed with their derived values, so they can be seen and set.
        data["task"], data["policy_name"] = run.task_tag(), run.policy_tag()
        leaves.extend(_leaves(f"runs.{name}", data))
    return leaves


def format_leaves(leaves: list[tuple[str, Any]]) -> list[str]:
    """`key=value` lines; secrets (an api_key, a token, credentials in a URL) show as *** (evalfleet.secrets)."""
    return [f"{key}={format_value(mask_value(key, value))}" for key, value in leaves]


def backend_setting_leaves(settings: dict[str, Any] | None) -> list[str]:
    """`root.key=value` for every setting of every registered backend (evalfleet/backend_registry.py), with its
    effective value; a secret-looking key masked unless its field says it holds only a name (`not_secret`)."""
    from evalfleet.backend_registry import backend_settings, setting_roots

    lines: list[str] = []
    for root, (_, model) in setting_roots().items():
        values = backend_settings(root, settings).model_dump(mode="json")
        for key, value in values.items():
            extra = model.model_fields[key].json_schema_extra
            plain = isinstance(extra, dict) and extra.get("not_secret")
            lines.append(f"{root}.{key}={format_value(value if plain else mask_value(key, value))}")
    return lines
