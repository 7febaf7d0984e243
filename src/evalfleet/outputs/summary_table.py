"""The run summary printed at the end of `evalfleet run`: one row per Run of experiment_result.json, in the
order the result lists them (the Experiment's order), legible at 80 columns and when piped."""

from __future__ import annotations

from typing import Any

from evalfleet.textlayout import Column, table_lines

COLUMNS = [Column("run"), Column("task"), Column("policy"), Column("status"), Column("episodes", "right"),
           Column("successes", "right"), Column("success rate (95% CI)", "right"), Column("errors", "right")]


def rate_text(run: dict[str, Any]) -> str:
    """`62.0% [48.2%, 74.1%]`, or `n/a` when no episode was decided (never 0%)."""
    if run.get("success_rate") is None:
        return "n/a"
    lo, hi = run["ci95"]
    return f"{run['success_rate']:.1%} [{lo:.1%}, {hi:.1%}]"


def summary_rows(result: dict[str, Any]) -> list[list[str]]:
    rows = []
    for name, r in result["runs"].items():
        counts = r.get("counts") or {}
        rows.append([str(r.get("run", name)), str(r.get("task")), str(r.get("policy")), str(r.get("status")),
                     str(r.get("decided", "")), str(counts.get("success", 0)), rate_text(r),
                     str(counts.get("error", 0))])
    return rows


def summary_table_lines(result: dict[str, Any], width: int, *, title: str | None = None) -> list[str]:
    """The summary as text lines for `width` columns: aligned columns when every cell fits whole, else one
    block per Run (name on its own line, then `field: value` pairs); names are never cut."""
    return table_lines(COLUMNS, summary_rows(result), width, title=title)
