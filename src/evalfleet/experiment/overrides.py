"""Command-line overrides: `KEY=VALUE` with dotted keys and YAML-parsed values."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import yaml

from evalfleet.errors import UserError
from evalfleet.experiment.safe_yaml import MAX_DEPTH, parse_yaml

WHERE = "command line"
PREFIX_ALIASES = ("experiment_cfg.",)
EXPERIMENT_ROOTS = ("runs", "shared", "stopping", "seed", "name", "server_sharing", "tracking", "store", "floors")


def backend_roots() -> list[str]:
    """The roots of backend settings (`ray.address=...`): each registered backend's own, and any other root it
    owns (OSMO: `experiment_runner`, Arena's runner task). See evalfleet/backend_registry.py."""
    from evalfleet.backend_registry import setting_roots
    from evalfleet.plugins import load_registries

    load_registries()
    return sorted(setting_roots())


@dataclass(frozen=True)
class Override:
    text: str  # as typed, for error messages
    path: tuple[str, ...]  # without the experiment_cfg. prefix
    value: Any

    @property
    def key(self) -> str:
        return ".".join(self.path)

    @property
    def is_backend(self) -> bool:
        return self.path[0] not in EXPERIMENT_ROOTS  # parse_override admits only the two kinds of root


def shown_override(text: str) -> str:
    """An override as an error message quotes it: a secret key's value as *** (`runs.r.policy.api_key=***`),
    a URL without its credentials (secrets.mask_url). Never the value as typed: it may be the secret."""
    from evalfleet.secrets import MASK, looks_secret, mask_url

    key, sep, _ = text.partition("=")
    if sep and looks_secret(key.strip().rsplit(".", 1)[-1]):
        return f"{key}={MASK}"
    return mask_url(text, per_line=False)


def parse_override(text: str) -> Override:
    shown = shown_override(text)
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UserError(
            f"override {shown!r} is not KEY=VALUE (e.g. runs.NAME.rollout_limit.num_episodes=4)", where=WHERE
        )
    for prefix in PREFIX_ALIASES:
        if key.startswith(prefix):
            key = key[len(prefix):]
    path = tuple(key.split("."))
    if len(path) > MAX_DEPTH:
        raise UserError(f"override {shown[:80]!r}...: more than {MAX_DEPTH} key segments", where=WHERE)
    if any(not part for part in path):
        raise UserError(f"override {shown!r} has an empty key segment", where=WHERE)
    backends = backend_roots()
    if path[0] not in (*EXPERIMENT_ROOTS, *backends):
        roots = ", ".join(f"{r}." for r in (*EXPERIMENT_ROOTS[:3], *backends)) + ", seed, name"
        raise UserError(f"override {shown!r}: unknown key {path[0]!r}; keys start with {roots}", where=WHERE)
    if path[0] in ("seed", "name", "server_sharing") and len(path) != 1:
        raise UserError(f"override {shown!r}: {path[0]} has no sub-keys", where=WHERE)
    if path[0] in ("runs",) and len(path) < 3:
        raise UserError(
            f"override {shown!r}: name a key inside a Run, e.g. runs.NAME.rollout_limit.num_episodes=4", where=WHERE
        )
    try:
        # The same bounded loader as the file: no alias bombs, no deep nesting, finite numbers only.
        value = parse_yaml(raw, WHERE) if raw.strip() else ""
    except UserError as exc:
        detail = exc.message.replace("not valid YAML", "value is not valid YAML", 1)
        where_in_value = f" (at {exc.key})" if exc.key else ""
        raise UserError(f"override {shown!r}: {detail}{where_in_value}", where=WHERE) from None
    return Override(text, path, value)


def set_path(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    """Set a dotted path inside nested dicts, creating missing levels. A key that itself contains
    dots (a flat `asset.variation` name) is matched before splitting further."""
    node, i = doc, 0
    while True:
        j = _longest_key(node, path, i)
        key = ".".join(path[i:j])
        if j == len(path):
            node[key] = copy.deepcopy(value)
            return
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        elif not isinstance(child, dict):
            raise KeyError(".".join(path[:j]))
        node, i = child, j


def _longest_key(node: dict[str, Any], path: tuple[str, ...], start: int) -> int:
    for end in range(len(path), start, -1):
        if ".".join(path[start:end]) in node:
            return end
    return start + 1


class _OneLineDumper(yaml.SafeDumper):
    """Writes strings that contain line breaks double-quoted (`"a\\nb"`), so every value stays on one line."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = '"' if any(c in value for c in "\n\r\x85\u2028\u2029") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_OneLineDumper.add_representer(str, _represent_str)


def format_value(value: Any) -> str:
    """A value as YAML that `yaml.safe_load` reads back to the same value, on one line."""
    text = yaml.dump(value, Dumper=_OneLineDumper, default_flow_style=True, width=10**9, sort_keys=False).strip()
    if text.endswith("\n..."):
        text = text[: -len("\n...")]
    elif text.endswith("..."):
        text = text[:-3].strip()
    return text
