"""`ExperimentResult`: what `evalfleet.run` and `evalfleet.evaluate` return, typed from
experiment_result.json (per-Run counts, rates with 95% intervals, statuses) and the paths written."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from evalfleet.layout import RESULT_FILE


@dataclass(frozen=True)
class RunResult:
    name: str
    task: str | None
    policy: str | None
    status: str  # completed | partial | failed
    reason: str | None
    planned: int | None
    decided: int
    successes: int
    failures: int
    errors: int  # infrastructure errors left (excluded from the rate)
    missing: int | None
    success_rate: float | None  # over decided episodes; None when nothing was decided
    ci95: tuple[float, float] | None  # Wilson interval
    set_aside: int = 0  # records found that are not this Run's planned episodes (never counted)
    # failed and errored episodes by failure code, biggest first (`unclassified`: a record without a code)
    failures_by_code: dict[str, int] = field(default_factory=dict)
    protocol: str | None = None  # the SHA-256 identity of the task protocol its records were made under

    @classmethod
    def from_json(cls, entry: dict[str, Any]) -> "RunResult":
        c = entry["counts"]
        ci = entry.get("ci95")
        return cls(name=entry["run"], task=entry.get("task"), policy=entry.get("policy"), status=entry["status"],
                   reason=entry.get("reason"), planned=entry.get("planned_episodes"), decided=entry["decided"],
                   successes=c["success"], failures=c["failure"], errors=c["error"], missing=c.get("missing"),
                   success_rate=entry.get("success_rate"), ci95=tuple(ci) if ci else None,
                   set_aside=(entry.get("set_aside") or {}).get("total", 0),
                   failures_by_code=dict(entry.get("failures") or {}), protocol=entry.get("protocol"))

    def rate_text(self) -> str:
        if self.success_rate is None:
            return "n/a"
        text = f"{self.success_rate:.1%}"
        if self.ci95:
            text += f" [{self.ci95[0]:.1%}, {self.ci95[1]:.1%}]"
        return text

    def __str__(self) -> str:
        return (f"{self.name}: {self.successes}/{self.decided} success {self.rate_text()} ({self.status}"
                + (f": {self.reason}" if self.reason else "") + ")")


@dataclass(frozen=True)
class ComparisonResult:
    """One entry of experiment_result.json's `comparisons` (sequential stopping's policy-vs-baseline decision)."""

    task: str
    policy: str
    baseline: str
    verdict: str  # better | worse | no_difference | undecided
    stopped_at: int | None  # episodes per Run at the deciding look (the cap when undecided)
    max_episodes: int
    difference: float  # policy-only minus baseline-only discordant pairs, over the pairs
    interval: tuple[float, float]  # valid for the sequential design: `interval_method`
    interval_method: str
    method: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, entry: dict[str, Any]) -> "ComparisonResult":
        return cls(entry["task"], entry["policy"], entry["baseline"], entry["verdict"], entry.get("stopped_at"),
                   entry["max_episodes"], entry["difference"], tuple(entry["interval"]), entry["interval_method"],
                   entry["method"], raw=entry)


@dataclass(frozen=True)
class ExperimentResult:
    name: str
    output: Path
    runs: dict[str, RunResult]  # in the Experiment's order
    result_file: Path
    report: Path
    plots: list[Path] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # experiment_result.json

    @classmethod
    def from_json(cls, name: str, output: Path, result: dict[str, Any], *, order: Iterable[str] = (),
                  report: Path, plots: Iterable[Path] = ()) -> "ExperimentResult":
        entries = result["runs"]
        names = [n for n in order if n in entries] + [n for n in entries if n not in set(order)]
        return cls(name=name, output=output, runs={n: RunResult.from_json(entries[n]) for n in names},
                   result_file=output / RESULT_FILE, report=report, plots=list(plots), raw=result)

    @property
    def ok(self) -> bool:
        """Every Run completed (all planned episodes decided, no infrastructure error left)."""
        return all(r.status == "completed" for r in self.runs.values())

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    @property
    def comparisons(self) -> list[ComparisonResult]:
        """Sequential stopping's decisions, one per (task, policy, baseline); [] without `stopping:`."""
        return [ComparisonResult.from_json(c) for c in self.raw.get("comparisons") or []]

    @property
    def failures_by_policy(self) -> dict[str, dict[str, int]]:
        """{policy: {failure code: episodes}} over its Runs, biggest first."""
        return {p: dict(c) for p, c in (self.raw.get("failures_by_policy") or {}).items()}

    @property
    def failure_codes(self) -> dict[str, dict[str, Any]]:
        """{code: {kind, description}} for every code counted (None where no protocol declares the code)."""
        return {c: dict(i) for c, i in (self.raw.get("failure_codes") or {}).items()}

    @property
    def trust(self) -> list[dict[str, Any]]:
        """The checks behind the numbers (outputs/trust.py): each {check, title, outcome: passed | flagged | info |
        not_run, detail, meaning}."""
        return [dict(c) for c in self.raw.get("trust") or [] if isinstance(c, dict)]

    def rates(self) -> dict[str, float | None]:
        return {n: r.success_rate for n, r in self.runs.items()}

    def gate(self, baseline: str, *, alpha: float = 0.05) -> dict[str, Any]:
        """The CI gate of this Experiment against the `baseline` policy, as `evalfleet compare OUT --baseline B
        --gate` decides it (analysis/compare.gate_output): {"passed": bool, "worse": [...], "rule": ...}; by the
        Experiment's own sequential comparisons where it stopped sequentially against `baseline`."""
        from evalfleet.analysis.compare import gate_output

        return gate_output(str(self.output), baseline, alpha=alpha)

    def __str__(self) -> str:
        lines = [f"{self.name}: {len(self.runs)} Runs, report {self.report}"]
        lines += [f"  {run}" for run in self.runs.values()]
        return "\n".join(lines)
