"""`evalfleet board --html DIR` in a real browser (Debian chromium via Playwright), opened from disk: the tables
painted with the numbers of --json, sorting by a header, a `<script>` policy name shown as text and never run, no
console error, no request beyond the page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from evalfleet_testkit import metaworld_run, run_evalfleet
from test_outputs_report_browser import open_report

import evalfleet

HOSTILE = "<script>window.__pwned = 1</script>"
IMAGE = "<img src=x onerror=\"window.__pwned = 2\">"


def push(policy: str, chunk: int) -> dict:
    run = metaworld_run("push-v3", episodes=8, policy_name=policy)
    run["environment"]["max_steps"] = 64
    if chunk > 1:
        run["policy"]["chunk_size"] = chunk
    return run


@pytest.fixture(scope="module")
def page_dir(tmp_path_factory) -> tuple[Path, dict]:
    """One real Experiment of three policies (two with hostile names) in a store, its board as a page and JSON."""
    root = tmp_path_factory.mktemp("board_page")
    path = root / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "hostile", "seed": 3, "runs": {
        "expert": push("expert", 1), "scripted": push(HOSTILE, 2), "imaged": push(IMAGE, 3)}}))
    evalfleet.run(path, output=root / "out", workers=1, progress=False, log=lambda _: None)
    store = str(root / "store")
    assert run_evalfleet("store", "add", str(root / "out"), "--store", store).returncode == 0
    claims = root / "claims.yaml"
    claims.write_text(yaml.safe_dump([{"policy": HOSTILE, "task": "push-v3", "success": 0.5,
                                       "source": "<script>window.__pwned = 3</script>"}]))
    proc = run_evalfleet("board", "--store", store, "--json", "--html", str(root / "page"), "--claims", str(claims))
    assert proc.returncode == 0, proc.stderr
    return root / "page", json.loads(proc.stdout)


def column(page, table: str, index: int) -> list[str]:
    return page.eval_on_selector_all(f"#{table} tbody tr", f"rows => rows.map(r => r.cells[{index}].textContent)")


def test_board_page_in_browser(chromium, page_dir) -> None:
    folder, board = page_dir
    context, page, seen = open_report(chromium, folder / "index.html")
    try:
        # Painted: one row per board row, the policy names as the literal text they are, nothing of them run.
        assert column(page, "board", 1) == [r["policy"] for r in board["rows"]]
        assert set(column(page, "board", 1)) == {"expert", HOSTILE, IMAGE}
        assert page.evaluate("window.__pwned") is None
        assert page.eval_on_selector_all("main script, table script, table img", "e => e.length") == 0
        assert page.evaluate("document.querySelectorAll('script').length") == 1  # the page's own
        assert column(page, "claims", 1) == [HOSTILE] and "<script>" in column(page, "claims", 8)[0]
        # The same numbers as --json.
        rates = [f"{100 * r['success_rate']:.1f}%" for r in board["rows"]]
        assert column(page, "board", 3) == rates
        assert column(page, "board", 5) == [str(r["decided"]) for r in board["rows"]]
        assert column(page, "ranking", 2) == [p["policy"] for p in board["ranking"]["policies"]]

        # Sorting: Success ascending, then descending; Policy as text.
        by_rate = sorted(board["rows"], key=lambda r: r["success_rate"])
        assert len({r["success_rate"] for r in by_rate}) == 3
        page.click("#board thead th:nth-child(4)")
        assert column(page, "board", 1) == [r["policy"] for r in by_rate]
        assert page.get_attribute("#board thead th:nth-child(4)", "aria-sort") == "ascending"
        page.click("#board thead th:nth-child(4)")
        assert column(page, "board", 1) == [r["policy"] for r in reversed(by_rate)]
        page.click("#board thead th:nth-child(2)")
        assert column(page, "board", 1) == sorted(r["policy"] for r in board["rows"])
        # A sorted row keeps its cells together: its rate is still its own.
        rate_of = {r["policy"]: f"{100 * r['success_rate']:.1f}%" for r in board["rows"]}
        assert column(page, "board", 3) == [rate_of[p] for p in column(page, "board", 1)]

        assert seen["console"] == [] and seen["pageerror"] == [] and seen["blocked"] == []
        assert all(url.startswith("file://") for url in seen["requests"])
    finally:
        context.close()
