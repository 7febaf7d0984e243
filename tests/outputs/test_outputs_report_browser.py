"""index.html in a real browser (Debian chromium via Playwright), opened from disk."""

from __future__ import annotations

from pathlib import Path

from evalfleet.outputs.collect import collect


def open_report(chromium, index: Path):
    """A page on file://index.html that records console errors, page errors and every request."""
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    seen = {"console": [], "pageerror": [], "requests": [], "blocked": []}

    def route(r):
        if r.request.url.startswith("file://"):
            r.continue_()
        else:  # anything else would be a network fetch: refuse it and remember it
            seen["blocked"].append(r.request.url)
            r.abort()

    context.route("**/*", route)
    page = context.new_page()
    page.on("console", lambda m: seen["console"].append(f"{m.type}: {m.text}") if m.type in ("error", "warning")
            else None)
    page.on("pageerror", lambda e: seen["pageerror"].append(str(e)))
    page.on("request", lambda r: seen["requests"].append(r.url))
    page.goto(index.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=15_000)
    return context, page, seen


def visible_rows(page) -> list[dict]:
    return page.eval_on_selector_all(
        "#episodes tbody tr[data-row]",
        """rows => rows.map(r => {
             const cells = Array.from(r.children).map(c => c.textContent.trim());
             const heads = Array.from(document.querySelectorAll('#episodes thead th')).map(h => h.textContent.trim());
             const o = {}; heads.forEach((h, i) => o[h] = cells[i]); return o; })""")


def test_report_in_browser(chromium, sample_output: Path, tmp_path: Path):
    collect([str(sample_output)], str(sample_output), report=True)
    index = sample_output / "index.html"
    context, page, seen = open_report(chromium, index)
    try:
        # The summary: statuses, rates with intervals, partial/failed never shown as 0%.
        summary = page.eval_on_selector_all(
            "#summary tbody tr", "rows => rows.map(r => [r.dataset.run, r.dataset.status, r.innerText])")
        by_run = {run: (status, text) for run, status, text in summary}
        assert by_run["pick_expert"][0] == "completed" and "20.0% [15.5–25.4]" in by_run["pick_expert"][1]
        assert by_run["pick_random"][0] == "partial" and "partial" in by_run["pick_random"][1]
        assert "4 of 10 planned episodes not run" in by_run["pick_random"][1]
        status, text = by_run["drawer_random"]
        assert status == "failed" and "never became healthy" in text and "0.0%" not in text and "0%" not in text
        assert page.inner_text("#matrix td[data-task='drawer-open'][data-policy='random']").strip() == "failed"
        assert page.eval_on_selector("#plots-section img", "img => img.naturalWidth") == 4  # the PNG loaded

        # All 256 episodes, 100 per page.
        assert page.inner_text("#count") == "256 of 256 episodes"
        assert len(visible_rows(page)) == 100 and page.inner_text("#page") == "page 1 of 3"

        # Filter: one Run, failures only, a cube.mass range.
        page.select_option("#f-run", label="pick_expert (250)")
        page.uncheck(".f-status[value='s']")
        page.uncheck(".f-status[value='e']")
        page.fill(".varfilter[data-key='cube.mass'] .f-min", "0.3")
        page.fill(".varfilter[data-key='cube.mass'] .f-max", "0.45")
        rows = visible_rows(page)
        # cube.mass = 0.05 * (e % 20) in [0.3, 0.45] -> e % 20 in 6..9; failures only (e % 5 != 0) -> 6..9.
        expected = [e for e in range(250) if 6 <= e % 20 <= 9]
        assert page.inner_text("#count") == f"{len(expected)} of 256 episodes"
        assert [int(r["Episode"]) for r in rows] == expected[:100]
        assert {r["Run"] for r in rows} == {"pick_expert"} and {r["Status"] for r in rows} == {"failure"}
        assert all(0.3 <= float(r["cube.mass"]) <= 0.45 for r in rows)

        # Sort by episode, descending (click twice).
        page.click("#episodes thead th[data-key='episode']")
        page.click("#episodes thead th[data-key='episode']")
        assert [int(r["Episode"]) for r in visible_rows(page)][:3] == sorted(expected, reverse=True)[:3]

        # Categorical filter, then reset.
        page.select_option(".varfilter[data-key='table.texture'] .f-cat", label="metal")
        assert all(r["table.texture"] == "metal" for r in visible_rows(page))
        page.click("#f-reset")
        assert page.inner_text("#count") == "256 of 256 episodes"

        # Errors are listed with their reason; recorded episodes get an inline video.
        page.uncheck(".f-status[value='s']")
        page.uncheck(".f-status[value='f']")
        rows = visible_rows(page)
        assert [(r["Run"], r["Episode"], r["Error"]) for r in rows] == [("pick_random", "3", "simulator crashed")]
        page.click("#f-reset")
        page.check("#f-video")
        assert [r["Episode"] for r in visible_rows(page)] == ["3", "1"]  # reset keeps the sort (descending)
        page.click("tr[data-row] button.play >> nth=0")  # episode 3, first when descending
        src = page.get_attribute("tr.player video", "src")
        assert src == "pick_expert/videos/episode_00003_front.mp4"
        assert page.eval_on_selector("tr.player video", "v => v.autoplay") is False

        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        assert (tmp_path / "report.png").stat().st_size > 10_000
    finally:
        context.close()
    assert seen["pageerror"] == [] and seen["console"] == [], seen
    assert seen["blocked"] == [] and all(u.startswith("file://") for u in seen["requests"]), seen["requests"]


def test_report_stays_responsive_with_many_episodes(chromium, tmp_path: Path):
    from outputs_helpers import record, write_jsonl, write_status

    root = tmp_path / "big"
    for r in range(4):
        run = f"run{r}"
        write_jsonl(root / run / "parts" / "s.jsonl",
                    [record(run, e, "success" if (e + r) % 3 == 0 else "failure") for e in range(5000)])
        write_status(root / run, planned=5000, state="completed")
    collect([str(root)], str(root), report=True)
    context, page, seen = open_report(chromium, root / "index.html")
    try:
        assert page.inner_text("#count") == "20000 of 20000 episodes"
        page.click("#episodes thead th[data-key='duration']")
        page.click("#next")
        assert page.inner_text("#page") == "page 2 of 200"
        assert len(visible_rows(page)) == 100
    finally:
        context.close()
    assert seen["pageerror"] == [] and seen["console"] == [], seen
