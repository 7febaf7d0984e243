"""Issue #26 must-show 4: the report's failure tables in a real browser (tests/outputs' Playwright fixtures):
visible, biggest failure mode first, their numbers those of experiment_result.json, the description on hover;
a screenshot under the test's tmp_path."""

from __future__ import annotations

import json
from pathlib import Path

from test_failure_rollup import coded, write_run
from test_outputs_report_browser import open_report

from evalfleet.outputs.collect import collect


def test_report_failure_tables(chromium, tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_run(out, "push_expert", [coded("push_expert", 0, "success", None),
                                   *[coded("push_expert", e, "failure", "object_dropped") for e in (1, 2, 3)],
                                   coded("push_expert", 4, "error", "policy_error")], planned=5)
    write_run(out, "push_random", [coded("push_random", e, "failure", "step_limit", policy="random")
                                   for e in range(4)], planned=4, policy="random")
    collect([str(out)], str(out), report=True)
    result = json.loads((out / "experiment_result.json").read_text())
    context, page, seen = open_report(chromium, out / "index.html")
    try:
        for table in ("#failures-by-run", "#failures-by-policy"):
            assert page.locator(table).is_visible() and (page.locator(table).bounding_box() or {})["height"] > 40
        rows = page.eval_on_selector_all("#failures-by-run tbody tr", """els => els.map(e => ({
            run: e.dataset.run, code: e.dataset.code, count: +e.querySelector('.count').innerText,
            share: e.querySelector('.share').innerText, kind: e.querySelector('.kind').innerText}))""")
        assert [r["count"] for r in rows] == sorted((r["count"] for r in rows), reverse=True)  # biggest first
        assert {(r["run"], r["code"]): r["count"] for r in rows} == {
            (run, code): n for run, entry in result["runs"].items() for code, n in entry["failures"].items()}
        for r in rows:
            of = result["runs"][r["run"]]["episodes_recorded"]
            assert r["share"] == f"{100 * r['count'] / of:.1f}%"
            assert r["kind"] == result["failure_codes"][r["code"]]["kind"]
        by_policy = page.eval_on_selector_all("#failures-by-policy tbody tr", """els => els.map(e =>
            [e.dataset.policy, e.dataset.code, +e.querySelector('.count').innerText])""")
        assert {(p, c): n for p, c, n in by_policy} == {
            (p, c): n for p, counts in result["failures_by_policy"].items() for c, n in counts.items()}
        hover = page.locator('#failures-by-run tr[data-code="object_dropped"] code')
        assert hover.get_attribute("title") == result["failure_codes"]["object_dropped"]["description"]
        page.locator("#failures").screenshot(path=str(tmp_path / "failures.png"))
        assert (tmp_path / "failures.png").stat().st_size > 1000
        assert not seen["pageerror"] and not seen["blocked"]
    finally:
        context.close()
