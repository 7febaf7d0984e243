"""The failure taxonomy's roll-up for experiment_result.json: each Run's failed and errored episodes by
failure code, the Run's protocol identity, the codes by policy, and each code's kind and description.

The episodes counted are the ones the rates count (`records.RunRecords`: the final attempt of each planned
episode). A failed or errored record carries its code in `failure_code` (sim/protocol.py); records of other
formats are read in their own terms (`record_code`): Isaac Lab Arena's evaluation result (`failure_code`, its
`spec_hash` as the protocol identity, nested or not; its autograder's `failure_category`; a `timeout`
outcome) and vla-eval's `failure_reason` (its `failure_detail` stays in the record). A record without any
code (an older output) counts as `unclassified`.

`ProtocolCheck` refuses, before collect writes anything, to merge records of one Run made under two protocol
identities: a changed protocol is a different measurement.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from evalfleet import bounded_json
from evalfleet.errors import UserError
from evalfleet.sim.protocol import COMMON_CODES, ENV_ERROR, POLICY_ERROR, SERVER_LOST, STEP_LIMIT

UNCLASSIFIED = "unclassified"
UNCLASSIFIED_INFO = {"kind": None, "description": "the record carries no failure code (an output written before "
                     "failure codes, or a format without them)"}
PROTOCOL_KEY = "protocol"
_CODE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")

# vla-eval's failure_reason values (vla_eval.orchestrator, vla_eval.runners.base: the phase that raised) as
# evalfleet's codes; its act timeout is the server not answering. Other reasons are kept as they are.
VLAEVAL_REASONS = {"env_start": ENV_ERROR.code, "env_step": ENV_ERROR.code, "model_act": POLICY_ERROR.code,
                   "server_unreachable": SERVER_LOST.code, "connection_closed": SERVER_LOST.code,
                   "timeout": SERVER_LOST.code}
# Arena's autograder categories (isaaclab_arena/evaluation/episode_record.FailureCategory) kept as they are,
# but for its step-limit and unknown ones.
ARENA_CATEGORIES = {"timeout": STEP_LIMIT.code, "unknown": None}
_ARENA_NESTED = ("evaluation_result", "evaluation", "protocol_result")


def _code(value: Any) -> str | None:
    if isinstance(value, str):
        value = value.strip().lower()
        return value if _CODE.match(value) else None
    return None


def _arena_parts(rec: dict[str, Any]) -> list[dict[str, Any]]:
    return [rec] + [rec[k] for k in _ARENA_NESTED if isinstance(rec.get(k), dict)]


# Every key a failure code or a protocol identity is read from (directly or nested): a record with none of them
# (most of a large collect's) is answered without looking further. A key `record_code` or `record_protocol` comes
# to read belongs here too.
_CODE_KEYS = frozenset(("failure_code", "failure_reason", "failure_category", "consensus_failure_category", "outcome",
                        "episode_outcome", *_ARENA_NESTED))
_PROTOCOL_KEYS = frozenset(("spec_hash", *_ARENA_NESTED))


def record_code(rec: dict[str, Any]) -> str | None:
    """The failure code a record carries, in evalfleet's, Arena's or vla-eval's terms; None when it has none."""
    if rec.keys().isdisjoint(_CODE_KEYS):
        return None
    for part in _arena_parts(rec):  # evalfleet's field, and Arena's EvaluationResult.failure_code
        if (code := _code(part.get("failure_code"))) is not None:
            return code
    if (reason := _code(rec.get("failure_reason"))) is not None:  # vla-eval
        return VLAEVAL_REASONS.get(reason, reason)
    for key in ("failure_category", "consensus_failure_category"):  # Arena's autograder
        if (category := _code(rec.get(key))) is not None:
            return ARENA_CATEGORIES.get(category, category)
    if _code(rec.get("outcome")) == "timeout" or _code(rec.get("episode_outcome")) == "timeout":
        return STEP_LIMIT.code  # Arena's classify_outcome: the episode-length cap ended it
    return None


def record_protocol(rec: dict[str, Any]) -> str | None:
    """The protocol identity a record was made under: evalfleet's `protocol`, or Arena's `spec_hash`."""
    value = rec.get(PROTOCOL_KEY)
    if isinstance(value, str) and value:
        return value
    if rec.keys().isdisjoint(_PROTOCOL_KEYS):
        return None
    for part in _arena_parts(rec):
        if isinstance(part.get("spec_hash"), str) and part["spec_hash"]:
            return part["spec_hash"]
    return None


def count_codes(records: Iterable[dict[str, Any]]) -> dict[str, int]:
    """{code: episodes} of the failed and errored records, biggest first (ties by code)."""
    counts: dict[str, int] = {}
    for rec in records:
        if rec.get("status") == "success":  # any other status is a failure or an error (summarise_run)
            continue
        code = record_code(rec) or UNCLASSIFIED
        counts[code] = counts.get(code, 0) + 1
    return ranked(counts)


def ranked(counts: dict[str, int]) -> dict[str, int]:
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def declared_codes(protocols: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{code: {kind, description}} from protocol.json documents (their own codes first, then the common
    ones they list), with evalfleet's common codes always known; the first declaration of a code wins."""
    out: dict[str, dict[str, Any]] = {}
    for doc in protocols:
        for entry in [*(doc.get("failures") or []), *(doc.get("common_codes") or [])]:
            if isinstance(entry, dict) and isinstance(entry.get("code"), str):
                out.setdefault(entry["code"], {"kind": entry.get("kind"), "description": entry.get("description")})
    for c in COMMON_CODES:
        out.setdefault(c.code, {"kind": c.kind, "description": c.description})
    return out


def run_failure_facts(records: Iterable[dict[str, Any]]) -> tuple[dict[str, int], set[str]]:
    """What the roll-up needs of one Run's records: {code: count} (`count_codes`) and their protocol identities."""
    records = list(records)
    return count_codes(records), {p for rec in records if (p := record_protocol(rec))}


def add_failures(runs: list[dict[str, Any]], records: dict[str, list[dict[str, Any]]],
                 protocols: dict[str, dict[str, Any]] | None = None, *,
                 facts: dict[str, tuple[dict[str, int], set[str]]] | None = None) -> dict[str, Any]:
    """Adds `failures` ({code: count}) and `protocol` to each Run summary in `runs` (in place) and returns the
    result's `failures_by_policy` ({policy: {code: count}}) and `failure_codes` ({code: {kind, description}}
    for every code counted; kind and description None where no protocol declares the code). `facts`: a Run's
    `run_failure_facts`, taken by collect while it held the Run's records, in place of `records`."""
    protocols = protocols or {}
    by_policy: dict[str, dict[str, int]] = {}
    for summary in runs:
        name = summary["run"]
        counts, ids = (facts or {}).get(name) or run_failure_facts(records.get(name, []))
        summary["failures"] = counts
        summary["protocol"] = min(ids) if ids else (protocols.get(name) or {}).get("identity")
        cell = by_policy.setdefault(str(summary.get("policy")), {})
        for code, n in counts.items():
            cell[code] = cell.get(code, 0) + n
    known = declared_codes(protocols.values())
    counted = {code for cell in by_policy.values() for code in cell}
    info = {code: (UNCLASSIFIED_INFO if code == UNCLASSIFIED else known.get(code, {"kind": None, "description": None}))
            for code in sorted(counted)}
    return {"failures_by_policy": {p: ranked(c) for p, c in by_policy.items() if c}, "failure_codes": info}


def top_codes(result: dict[str, Any], n: int = 3) -> list[tuple[str, int]]:
    """The experiment's `n` biggest failure codes over every Run: [(code, episodes)]."""
    total: dict[str, int] = {}
    for cell in (result.get("failures_by_policy") or {}).values():
        for code, count in cell.items():
            total[code] = total.get(code, 0) + count
    return list(ranked(total).items())[:n]


class ProtocolCheck:
    """The protocol identities one Run's records carry, with the first file each was seen in."""

    def __init__(self, run: str):
        self.run = run
        self.seen: dict[str, str] = {}

    def add(self, rec: dict[str, Any], where: str) -> None:
        identity = record_protocol(rec)
        if identity is None or identity in self.seen:
            return
        self.seen[identity] = where
        if len(self.seen) > 1:
            (first, first_where), (second, second_where) = list(self.seen.items())[:2]
            raise UserError(
                f"Run {self.run!r}'s records were made under two protocol identities: {first} (first in "
                f"{first_where}) and {second}; its task's success criterion, failure codes or parameters changed "
                "between them, so they are different measurements and are not merged. Collect each protocol's "
                "records into their own output: rerun the Run into a fresh output folder, or move the records of "
                "one identity out of the Run's folder", where=second_where, key=PROTOCOL_KEY)


def read_protocol(places: Iterable[tuple[Any, str]]) -> dict[str, Any] | None:
    """The first protocol.json among (location, path) places that has one (a Run's folders), or None. One that
    is not a JSON object with a `failures` list is refused naming it."""
    for loc, rel in places:
        if not loc.is_file(rel):
            continue
        try:
            doc = bounded_json.loads(loc.read_bytes(rel))
        except (ValueError, UnicodeDecodeError) as exc:
            raise UserError(f"not valid JSON ({exc}); rerun the Run, or delete the file to collect without its "
                            "codes' descriptions", where=loc.display(rel)) from None
        if not isinstance(doc, dict) or not isinstance(doc.get("failures", []), list):
            raise UserError("not a task protocol (a JSON object whose `failures` is a list of {code, description, "
                            "kind}); rerun the Run, or delete the file", where=loc.display(rel), key="failures")
        return doc
    return None
