"""The run summary printed at the end of `evalfleet run`: one row per Run of experiment_result.json, in the
order the result lists them (the Experiment's order), legible at 80 columns and when piped."""

from __future__ import annotations

from typing import Any

from evalfleet.outputs.failures import top_codes
from evalfleet.outputs.result import RunResult
from evalfleet.textlayout import Column, table_lines

COLUMNS = [Column("run"), Column("task"), Column("policy"), Column("status"), Column("episodes", "right"),
           Column("successes", "right"), Column("success rate (95% CI)", "right"), Column("errors", "right")]


def summary_rows(result: dict[str, Any]) -> list[list[str]]:
    rows = []
    for entry in result["runs"].values():
        r = RunResult.from_json(entry)
        rows.append([r.name, str(r.task), str(r.policy), r.status, str(r.decided), str(r.successes), r.rate_text(),
                     str(r.errors)])
    return rows


def summary_table_lines(result: dict[str, Any], width: int, *, title: str | None = None) -> list[str]:
    """The summary as text lines for `width` columns: aligned columns when every cell fits whole, else one
    block per Run (name on its own line, then `field: value` pairs); names are never cut."""
    return table_lines(COLUMNS, summary_rows(result), width, title=title) + failure_lines(result) \
        + comparison_lines(result)


def failure_lines(result: dict[str, Any]) -> list[str]:
    """One line naming the experiment's top failure codes, when any episode failed or errored."""
    top = top_codes(result)
    return [f"top failure codes: {', '.join(f'{code} {n}' for code, n in top)}"] if top else []


def comparison_lines(result: dict[str, Any]) -> list[str]:
    """One line per sequential comparison: `task/policy vs baseline: better at 30 of 200 episodes, ...`."""
    lines = []
    for c in result.get("comparisons") or []:
        lo, hi = c["interval"]
        lines.append(f"{c['task']}/{c['policy']} vs {c['baseline']}: {c['verdict'].replace('_', ' ')} at "
                     f"{c['stopped_at']} of {c['max_episodes']} episodes, difference {c['difference']:+.2f} "
                     f"[{lo:+.2f}, {hi:+.2f}] (anytime-valid), statistic {c['statistic']:.2f}")
    return lines
