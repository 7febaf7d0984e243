"""OSMO's names and tokens: where a task's files lie, the task and workflow names (unique under OSMO's
comparison), and the refusal of a user value that OSMO would read as one of its ``{{...}}`` tokens."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from evalfleet.errors import UserError
from evalfleet.backends.osmo.settings import OSMO_NAME, OSMO_NAME_MAX, OsmoSettings

WHERE = "command line"
TASK_DIR = "/tmp/evalfleet"  # where a task's files are mounted (OSMO forbids paths under /osmo)
PREEMPTED_EXIT = "3006"  # OSMO ExitCode.FAILED_PREEMPTED
TOKEN = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")


def _canonical(name: str) -> str:
    """OSMO compares names ignoring case and treating '-' and '_' alike."""
    return name.lower().replace("_", "-")


def _slug(text: str, limit: int = 40) -> str:
    s = re.sub(r"[^A-Za-z0-9_-]+", "-", text)[:limit].strip("-_")
    return s or "x"


def _short_hash(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:6]


def task_names(runs: list[str]) -> dict[str, str]:
    """Run → a slug usable in OSMO names, unique under OSMO's comparison (case, '-'/'_')."""
    out: dict[str, str] = {}
    seen: set[str] = set()
    for run in runs:
        slug = _slug(run)
        if _canonical(slug) in seen:
            slug = f"{_slug(run, 33)}-{_short_hash(run)}"
        seen.add(_canonical(slug))
        out[run] = slug
    return out


def workflow_base_name(settings: OsmoSettings, experiment_name: str) -> str:
    if settings.workflow_name:
        return settings.workflow_name
    name = _slug(experiment_name, OSMO_NAME_MAX - 12)
    if not name[0].isalpha():
        name = f"e-{name}"[: OSMO_NAME_MAX - 12].rstrip("-_")
    assert OSMO_NAME.match(name), name
    return name


def _check_no_tokens(text: str, where_key: str) -> None:
    m = TOKEN.search(text)
    if m:
        raise UserError(f"the value {m.group(0)!r} would be read by OSMO as one of its {{{{...}}}} tokens; remove"
                        " the double braces", where=WHERE, key=where_key)


def scan_values(node: Any, key: str) -> None:
    """Refuse any key or string value under `node` holding an OSMO token (`key` names it in the error)."""
    if isinstance(node, dict):
        for k, v in node.items():
            _check_no_tokens(str(k), f"{key}.{k}")
            scan_values(v, f"{key}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            scan_values(v, f"{key}.{i}")
    elif isinstance(node, str):
        _check_no_tokens(node, key)


def check_output_url(settings: OsmoSettings, parts: int) -> None:
    """`osmo.output_url` may hold only `{{workflow_id}}`, and must hold it when the Experiment is split."""
    if settings.output_url:
        bad = [t for t in TOKEN.findall(settings.output_url) if t != "workflow_id"]
        if bad:
            raise UserError(f"osmo.output_url may hold only the {{{{workflow_id}}}} token, not {{{{{bad[0]}}}}}",
                            where=WHERE, key="osmo.output_url")
    if parts > 1 and settings.output_url and "workflow_id" not in TOKEN.findall(settings.output_url):
        raise UserError(f"the Experiment is split into {parts} workflows (more than osmo.max_tasks="
                        f"{settings.max_tasks} tasks) and every part uploads to osmo.output_url: keep"
                        " {{workflow_id}} in it so the parts do not overwrite each other", where=WHERE,
                        key="osmo.output_url")
