"""The run summary table (evalfleet.outputs.summary_table) at 80 columns, from a real collected folder."""

from __future__ import annotations

import json
from pathlib import Path

from evalfleet.outputs.collect import collect
from evalfleet.outputs.summary_table import summary_table_lines


def test_summary_at_80_columns_from_collected_folder(sample_output: Path) -> None:
    result = collect([str(sample_output)], str(sample_output), report=False)
    result = json.loads(json.dumps(result))  # what experiment_result.json holds
    names = list(result["runs"])
    assert len(names) >= 3
    lines = summary_table_lines(result, 80, title=f"results in {sample_output}")
    assert all(len(line) <= 80 for line in lines[1:]) and "…" not in "\n".join(lines)
    heads = [line for line in lines if line in names]
    assert heads == names  # every Run whole, on its own line, in the order given
    text = "\n".join(lines)
    for field in ("task:", "policy:", "status:", "episodes:", "successes:", "success rate (95% CI):", "errors:"):
        assert text.count(field) == len(names), field
    failed = next(n for n, r in result["runs"].items() if r["status"] == "failed")
    block = lines[lines.index(failed) + 1: lines.index(failed) + 4]
    assert "success rate (95% CI): n/a" in " ".join(block) and "0.0%" not in " ".join(block)


def test_summary_keeps_the_given_order_and_uses_columns_when_they_fit() -> None:
    def run(name: str, s: int, n: int) -> dict:
        return {"run": name, "task": "push-v3", "policy": "p", "status": "completed", "decided": n,
                "counts": {"success": s, "failure": n - s, "error": 1}, "success_rate": s / n, "ci95": [0.1, 0.9]}

    result = {"runs": {"zeta": run("zeta", 1, 4), "alpha": run("alpha", 3, 4)}}
    lines = summary_table_lines(result, 120)
    assert lines[0].split()[:4] == ["run", "task", "policy", "status"] and lines[0].endswith("errors")
    assert [line.split()[0] for line in lines[2:]] == ["zeta", "alpha"]  # as given, not sorted
    assert "75.0% [10.0%, 90.0%]" in lines[3]
    narrow = summary_table_lines(result, 80)
    assert narrow[0] == "zeta" and "alpha" in narrow
