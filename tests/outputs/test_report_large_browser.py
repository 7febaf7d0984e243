"""A report too large to load at once (issue #29): index.html keeps the summary and a manifest, its size set by
the number of Runs, never by the number of episodes; a Run's episode table is a script beside it, loaded in a
real browser (from disk) only when the user opens that Run."""

from __future__ import annotations

import json
import re
from pathlib import Path

from outputs_helpers import record, write_jsonl, write_status
from test_outputs_report_browser import open_report, visible_rows

from evalfleet.outputs.collect import collect
from evalfleet.outputs.report_episodes import AUTO_LOAD_EPISODES

RUNS = 4


def build(root: Path, per_run: int) -> Path:
    """RUNS Runs of `per_run` episodes as runners leave them (two shard logs each), collected with the report."""
    for r in range(RUNS):
        run = f"run{r}"
        recs = [record(run, e, "error" if e == 11 else "success" if (e + r) % 3 == 0 else "failure",
                       **({"error": "simulator crashed"} if e == 11 else {})) for e in range(per_run)]
        write_jsonl(root / run / "parts" / "a.jsonl", recs[0::2])
        write_jsonl(root / run / "parts" / "b.jsonl", recs[1::2])
        write_status(root / run, planned=per_run, state="completed")
    collect([str(root)], str(root), report=True)
    return root


def manifest(index: Path) -> dict:
    html = index.read_text(encoding="utf-8")
    return json.loads(re.search(r'<script type="application/json" id="episode-data">(.*?)</script>', html,
                                re.S).group(1))


def test_large_report_loads_a_runs_episodes_when_opened(chromium, tmp_path: Path):
    from playwright.sync_api import expect  # the chromium fixture has checked that Playwright is there

    per_run = AUTO_LOAD_EPISODES // RUNS + 1000  # above the size the page loads at once
    small, large = build(tmp_path / "small", 1000), build(tmp_path / "large", per_run)
    total = RUNS * per_run

    # index.html does not grow with the episodes (only their counts' digits differ); the tables beside it do.
    sizes = {name: (root / "index.html").stat().st_size for name, root in (("small", small), ("large", large))}
    assert abs(sizes["large"] - sizes["small"]) < 100, sizes
    tables = {name: sum(f.stat().st_size for f in (root / "report_episodes").iterdir())
              for name, root in (("small", small), ("large", large))}
    assert tables["large"] > 4 * tables["small"] and tables["large"] > 10 * sizes["large"], (tables, sizes)
    assert manifest(small / "index.html")["auto"] is True
    m = manifest(large / "index.html")
    assert m["auto"] is False and m["total"] == total and m["counts"] == [per_run] * RUNS

    context, page, seen = open_report(chromium, large / "index.html")
    try:
        # The summary is painted from the page alone; no episode table was fetched.
        summary = page.eval_on_selector_all("#summary tbody tr", "rows => rows.map(r => [r.dataset.run, r.innerText])")
        assert [run for run, _ in summary] == [f"run{r}" for r in range(RUNS)]
        assert all(re.search(r"\d+\.\d% \[\d+\.\d–\d+\.\d\]", text) for _, text in summary), summary
        assert not [u for u in seen["requests"] if "report_episodes" in u]
        assert visible_rows(page) == []
        assert page.inner_text("#count").startswith(f"0 of 0 episodes loaded ({total} in all")

        # Opening a Run loads its table (one script) and shows its episodes, filters and sorting included.
        page.select_option("#f-run", label=f"run2 ({per_run})")
        page.wait_for_selector("#episodes tbody tr[data-row]")
        assert [u.rsplit("/", 2)[-2:] for u in seen["requests"] if "report_episodes" in u] == \
            [["report_episodes", "0002.js"]]
        assert page.inner_text("#count").startswith(f"{per_run} of {per_run} episodes loaded ({total} in all")
        rows = visible_rows(page)
        assert len(rows) == 100 and {r["Run"] for r in rows} == {"run2"}
        assert [int(r["Episode"]) for r in rows] == list(range(100))
        assert rows[11]["Status"] == "error" and rows[11]["Error"] == "simulator crashed"
        page.fill(".varfilter[data-key='cube.mass'] .f-min", "0.9")
        assert all(float(r["cube.mass"]) >= 0.9 for r in visible_rows(page))
        page.click("#episodes thead th[data-key='episode']")
        page.click("#episodes thead th[data-key='episode']")
        assert int(visible_rows(page)[0]["Episode"]) == per_run - 1

        # A second Run joins the first; the sort by episode stays.
        page.select_option("#f-run", label=f"run0 ({per_run})")
        # (a Playwright expectation, not wait_for_function: the page's CSP refuses script evaluated from a string)
        expect(page.locator("#count")).to_have_text(re.compile(f"^{per_run} of {2 * per_run} "), timeout=120_000)
        rows = visible_rows(page)
        assert {r["Run"] for r in rows} == {"run0"} and int(rows[0]["Episode"]) == per_run - 1
        page.select_option("#f-run", value="")
        assert page.inner_text("#count").startswith(f"{2 * per_run} of {2 * per_run} episodes loaded")
    finally:
        context.close()
    assert seen["pageerror"] == [] and seen["console"] == [], seen
    assert all(u.startswith("file://") for u in seen["requests"]), seen["requests"]
