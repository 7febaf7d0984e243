"""Which task and which policy a record belongs to.

evalfleet records carry `task` and `policy` tags. Arena's records do not; Arena's rule is that a task is the
Run name minus a `_<policy>` suffix, for the policies named on the command line (`--policies pi0 cosmos`).
Both work here: with `--policies`, a record belongs to a policy when its tag equals it or its Run name ends in
`_<policy>`; without, the tags are used and an untagged record is its own task with policy UNTAGGED.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable

from evalfleet.errors import UserError

UNTAGGED = "(untagged)"


@dataclass(frozen=True)
class Arm:
    task: str
    policy: str


def label(record: dict[str, Any], policies: list[str] | None) -> Arm | None:
    """The (task, policy) of a record, or None when --policies is given and the record matches none."""
    run = str(record["run"])
    tag_task = record.get("task") or None
    tag_policy = record.get("policy") or None
    if policies:
        if tag_policy in policies:
            return Arm(tag_task or _strip_suffix(run, tag_policy), tag_policy)
        matches = [p for p in policies if run.endswith("_" + p) and len(run) > len(p) + 1]
        if not matches:
            return None
        policy = max(matches, key=len)
        return Arm(tag_task or _strip_suffix(run, policy), policy)
    return Arm(tag_task or run, tag_policy or UNTAGGED)


def _strip_suffix(run: str, policy: str) -> str:
    suffix = "_" + policy
    return run[: -len(suffix)] if run.endswith(suffix) and len(run) > len(suffix) else run


def listing(items: Iterable[str], limit: int = 10) -> str:
    """A short comma-separated list for an error line."""
    items = list(items)
    shown = ", ".join(items[:limit])
    return shown + (f", ... ({len(items) - limit} more)" if len(items) > limit else "")


def filter_runs(records: list[dict[str, Any]], runs: list[str] | None, *, where: str) -> list[dict[str, Any]]:
    if not runs:
        return records
    known = sorted({r["run"] for r in records})
    missing = [r for r in runs if r not in known]
    if missing:
        raise UserError(
            f"no records for run(s) {', '.join(missing)}; runs present: {listing(known)}", where=where, key="--runs"
        )
    wanted = set(runs)
    return [r for r in records if r["run"] in wanted]


def assign_arms(
    records: Iterable[dict[str, Any]], policies: list[str] | None, *, where: str, flag: str = "--policies"
) -> list[tuple[Arm, dict[str, Any]]]:
    """Label records with their arm; raise UserError for a requested policy that has no records."""
    records = list(records)
    labelled = []
    for rec in records:
        arm = label(rec, policies)
        if arm is not None:
            labelled.append((arm, rec))
    if policies:
        seen = Counter(arm.policy for arm, _ in labelled)
        missing = [p for p in policies if not seen[p]]
        if missing:
            present = sorted({label(r, None).policy for r in records})
            raise UserError(
                f"no records for policy {', '.join(repr(p) for p in missing)} (matched by `policy` tag or a "
                f"`_<policy>` Run-name suffix); policies present: {listing(present)}; runs: "
                f"{listing(sorted({r['run'] for r in records}))}",
                where=where,
                key=flag,
            )
    return labelled


def ordered_policies(labelled: list[tuple[Arm, dict[str, Any]]], policies: list[str] | None) -> list[str]:
    if policies:
        return list(dict.fromkeys(policies))
    return sorted({arm.policy for arm, _ in labelled})

