"""Reproduction verdicts (issue #53): published success rates checked against the store's board.

    # claims.yaml: a list (or `claims:` holding one)
    - {policy: pi0, task: push-v3, success: 0.92, source: "arXiv:2410.24164, table 2"}
    - {policy: pi0, suite: libero_10, success: 0.85, source: "the model card"}

A claim is 'reproduced' when the claimed rate lies inside our 95% Wilson interval, 'above' when it lies above it
(we measured less), 'below' when it lies below it (we measured more). A task claim gets one verdict per comparable
environment of that task (their rows are never pooled); a suite claim pools the policy's rows of the suite's tasks,
unless one of those tasks has several environments: then 'not comparable', naming the fields that differ.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, field_validator, model_validator

from evalfleet.errors import UserError
from evalfleet.experiment.numbers import Float
from evalfleet.store.board import Board, BoardRow, apart

MAX_BYTES = 1 << 20  # a claims file is a short list written by hand
MAX_CLAIMS = 10_000
Text = Annotated[str, Strict(), Field(min_length=1, max_length=500)]


class Claim(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy: Text
    task: Text | None = None
    suite: Text | None = None
    success: Float
    source: Text

    @field_validator("success")
    @classmethod
    def a_fraction(cls, v: float) -> float:
        if not 0.0 <= v <= 1.0:
            hint = f" (a fraction: {v / 100:g}, not a percentage)" if 1.0 < v <= 100.0 else ""
            raise ValueError(f"must lie in [0, 1]{hint}, got {v:g}")
        return v

    @model_validator(mode="after")
    def task_or_suite(self) -> "Claim":
        if (self.task is None) == (self.suite is None):
            raise ValueError("give `task` or `suite` (one of them)")
        return self

    @property
    def scope(self) -> str:
        return f"task {self.task}" if self.task is not None else f"suite {self.suite}"


def entry_problem(index: int, exc: ValidationError) -> tuple[str, str]:
    """(key, message) of an entry's first validation problem."""
    err = exc.errors()[0]
    loc = "".join(f".{p}" for p in err["loc"])
    if err["type"] == "extra_forbidden":
        return f"[{index}]{loc}", f"unknown key; a claim has {', '.join(Claim.model_fields)}"
    if err["type"] == "missing":
        return f"[{index}]{loc}", "required key is missing"
    message = str(err["msg"]).removeprefix("Value error, ")
    if err["type"].startswith(("float", "string")) or err["type"] == "is_instance_of":
        message += f", got {json.dumps(err.get('input'), default=str)[:60]}"
    return f"[{index}]{loc}", message


def read_claims(path: str) -> list[Claim]:
    """The claims of a YAML file; UserError naming the file and each bad entry's index and key."""
    from evalfleet.experiment.safe_yaml import parse_yaml

    where = str(path)
    try:
        data = Path(path).read_bytes()[:MAX_BYTES + 1]
    except OSError as exc:
        raise UserError(f"cannot read the claims file ({exc.strerror or exc})", where=where,
                        key="--claims") from None
    if len(data) > MAX_BYTES:
        raise UserError(f"larger than {MAX_BYTES // 1024} KiB: not a claims file", where=where)
    try:
        doc = parse_yaml(data.decode("utf-8"), where)
    except UnicodeDecodeError:
        raise UserError("not UTF-8 text", where=where) from None
    if isinstance(doc, dict) and set(doc) == {"claims"}:
        doc = doc["claims"]
    if not isinstance(doc, list) or not doc:
        raise UserError("expected a list of claims ({policy, task or suite, success, source} each), "
                        f"got {type(doc).__name__ if doc else 'nothing'}", where=where)
    if len(doc) > MAX_CLAIMS:
        raise UserError(f"more than {MAX_CLAIMS} claims", where=where)
    claims, problems = [], []
    for index, entry in enumerate(doc):
        if not isinstance(entry, dict):
            problems.append((f"[{index}]", f"expected a mapping {{policy, task, success, source}}, got "
                                           f"{type(entry).__name__}"))
            continue
        try:
            claims.append(Claim.model_validate(entry))
        except ValidationError as exc:
            problems.append(entry_problem(index, exc))
    refuse(problems, where)
    return claims


def refuse(problems: list[tuple[str, str]], where: str) -> None:
    """One UserError for every problem found (the first's key, each one `key: message`)."""
    if problems:
        first_key, first = problems[0]
        rest = "".join(f"; {k}: {m}" for k, m in problems[1:])
        raise UserError(first + rest, where=where, key=first_key)


@dataclass(frozen=True)
class Verdict:
    index: int
    claim: Claim
    environment: str  # the environment's label (a task claim), the suite and its tasks (a suite claim)
    policy: str  # the policy's board label
    verdict: str  # reproduced | above | below | not comparable | no decided episodes
    decided: int
    successes: int
    interval: tuple[float, float] | None
    reason: str | None = None

    @property
    def success_rate(self) -> float | None:
        """None where the episodes are not comparable: a rate over them would mix what must not be mixed."""
        return self.successes / self.decided if self.decided and self.interval is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {"claim": self.index, "policy": self.claim.policy, "task": self.claim.task, "suite": self.claim.suite,
                "claimed": self.claim.success, "source": self.claim.source, "environment": self.environment,
                "board_policy": self.policy, "verdict": self.verdict, "decided": self.decided,
                "successes": None if self.verdict == "not comparable" else self.successes,
                "success_rate": self.success_rate,
                "interval": list(self.interval) if self.interval else None, "reason": self.reason}


def verdict_of(claimed: float, successes: int, decided: int) -> tuple[str, tuple[float, float] | None]:
    from evalfleet.analysis.stats import wilson_interval

    if not decided:
        return "no decided episodes", None
    lo, hi = wilson_interval(successes, decided)
    return ("above" if claimed > hi else "below" if claimed < lo else "reproduced"), (lo, hi)


def matches(row: BoardRow, claim: Claim) -> bool:
    return claim.policy in (row.policy.name, row.policy.label)


def check_known(board: Board, claims: list[Claim], where: str) -> None:
    """A claim the board cannot check (unknown policy, task or suite, or no episodes of that policy there) is
    refused, naming it and listing what the store has."""
    scope = " with the filters given" if board.filters.given() else ""
    policies = sorted({r.policy.name for r in board.rows})
    tasks = sorted({r.environment.task for r in board.rows})
    suites = sorted({r.environment.suite for r in board.rows})
    problems = []
    for index, claim in enumerate(claims):
        mine = [r for r in board.rows if matches(r, claim)]
        if not mine:
            problems.append((f"[{index}].policy", f"no policy {claim.policy!r} in the store{scope} (it has: "
                                                  f"{', '.join(policies) or 'none'})"))
        elif claim.task is not None and claim.task not in tasks:
            problems.append((f"[{index}].task", f"no task {claim.task!r} in the store{scope} (it has: "
                                                f"{', '.join(tasks) or 'none'})"))
        elif claim.suite is not None and claim.suite not in suites:
            problems.append((f"[{index}].suite", f"no suite {claim.suite!r} in the store{scope} (it has: "
                                                 f"{', '.join(suites) or 'none'})"))
        elif not [r for r in mine if claim.task in (None, r.environment.task)
                  and claim.suite in (None, r.environment.suite)]:
            theirs = sorted({r.environment.task if claim.task else r.environment.suite for r in mine})
            problems.append((f"[{index}].{'task' if claim.task else 'suite'}",
                             f"policy {claim.policy!r} has no episodes on {claim.scope} in the store{scope} (its "
                             f"{'tasks' if claim.task else 'suites'}: {', '.join(theirs)})"))
    refuse(problems, where)


def check_claims(board: Board, claims: list[Claim], where: str) -> list[Verdict]:
    """Each claim's verdicts (module doc); UserError for a claim the board cannot check."""
    check_known(board, claims, where)
    out = []
    for index, claim in enumerate(claims):
        rows = [r for r in board.rows if matches(r, claim) and claim.task in (None, r.environment.task)
                and claim.suite in (None, r.environment.suite)]
        if claim.task is not None:
            for r in rows:
                verdict, interval = verdict_of(claim.success, r.successes, r.decided)
                out.append(Verdict(index, claim, r.environment.label, r.policy.label, verdict, r.decided,
                                   r.successes, interval))
            continue
        for label in sorted({r.policy.label for r in rows}):
            out.append(suite_verdict(index, claim, [r for r in rows if r.policy.label == label]))
    return out


def suite_verdict(index: int, claim: Claim, rows: list[BoardRow]) -> Verdict:
    """A suite claim against one policy revision's rows of the suite's tasks, pooled."""
    by_task: dict[str, list[BoardRow]] = {}
    for r in rows:
        by_task.setdefault(r.environment.task, []).append(r)
    tasks = f"{claim.suite} ({len(by_task)} task{'s' if len(by_task) > 1 else ''}: " \
        f"{', '.join(sorted(by_task)[:5])}{', ...' if len(by_task) > 5 else ''})"
    label = rows[0].policy.label
    decided, successes = sum(r.decided for r in rows), sum(r.successes for r in rows)
    split = {t: rs for t, rs in by_task.items() if len(rs) > 1}
    if split:
        task, rs = sorted(split.items())[0]
        identities = {r.environment.fingerprint: r.environment.identity for r in rs}
        fields = apart(identities, rs[0].environment.fingerprint)
        return Verdict(index, claim, tasks, label, "not comparable", decided, successes, None,
                       f"{task} has {len(rs)} environments that differ in {', '.join(fields)}: not pooled; narrow "
                       "the board (--experiment, --since) or claim per task")
    verdict, interval = verdict_of(claim.success, successes, decided)
    return Verdict(index, claim, tasks, label, verdict, decided, successes, interval,
                   f"pooled over {len(by_task)} tasks" if len(by_task) > 1 else None)
