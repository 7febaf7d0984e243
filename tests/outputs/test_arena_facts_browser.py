"""Issue #26 must-show 3: collect of an Arena-format output with Arena's metadata, manifest and timings files
carries them in experiment_result.json (and timings.json) and shows the timings plot in index.html (a real
browser: tests/outputs' Playwright fixtures)."""

from __future__ import annotations

import json
from pathlib import Path

from arena_facts import TIMERS, write_arena_facts
from arena_output import write_arena_run
from test_outputs_report_browser import open_report

from evalfleet.outputs.collect import collect

RUNS = {"banana_gr00t": ("banana_in_bowl", "gr00t"), "banana_pi0": ("banana_in_bowl", "pi0")}


def arena_output(tmp_path: Path) -> Path:
    root = tmp_path / "arena_out"
    for i, (run, (task, policy)) in enumerate(RUNS.items()):
        write_arena_run(root, run, episodes=6, rate=0.5, task=task, policy=policy, seed=i, videos=False)
    write_arena_facts(root, RUNS)
    return root


def test_collect_carries_arenas_metadata_manifest_and_timings(tmp_path: Path) -> None:
    src = arena_output(tmp_path)
    dest = tmp_path / "collected"
    result = collect([str(src)], str(dest), report=True)
    meta = result["experiment_metadata"]
    assert meta["format"] == "arena" and meta["file"].endswith("arena_experiment_metadata.json")
    assert meta["document"]["revision"]["git_dirty"] is True and meta["document"]["status"] == "finished"
    assert meta["document"]["runs"]["banana_pi0"]["camera"]["resolution_source"] == "embodiment_default"
    manifest = result["experiment_manifest"]["document"]
    assert [(r["name"], r["task"], r["policy"]) for r in manifest["runs"]] == [
        (run, task, policy) for run, (task, policy) in RUNS.items()]
    assert manifest["label_source"] == "configured"
    timings = result["timings"]
    assert timings["format"] == "arena" and set(timings["runs"]) == set(RUNS)
    step = timings["runs"]["banana_pi0"]["phases"]["env_step"]
    arena_step = next(t for t in json.loads((src / "banana_pi0" / "arena_experiment_timings.json").read_text())
                      if t["name"] == "env_step")
    assert (step["count"], step["total_ms"], step["p50_ms"], step["p90_ms"]) == (
        arena_step["count"], round(arena_step["total_ms"], 4), arena_step["p50_ms"], arena_step["p90_ms"])
    assert timings["totals"]["env_step"]["count"] == 2 * TIMERS["env_step"][0]
    # the files travel with the collected output, and a collect of that reads them again
    assert json.loads((dest / "timings.json").read_text())["runs"].keys() == timings["runs"].keys()
    assert (dest / "arena_experiment_metadata.json").is_file() and (dest / "experiment_manifest.json").is_file()
    again = collect([str(dest)], str(tmp_path / "again"))
    assert again["timings"]["runs"] == timings["runs"]
    assert again["experiment_metadata"]["document"] == meta["document"]


def test_report_shows_arenas_timings_plot(chromium, tmp_path: Path) -> None:
    src = arena_output(tmp_path)
    collect([str(src)], str(src), report=True)
    context, page, seen = open_report(chromium, src / "index.html")
    try:
        plot = page.locator("#timings-plot")
        assert plot.is_visible()
        box = plot.bounding_box()
        assert box and box["width"] > 300 and box["height"] > 40
        phases = page.eval_on_selector_all("#timings-plot .timing-segment",
                                           "els => els.map(e => e.dataset.phase)")
        assert sorted(set(phases)) == sorted(TIMERS) and len(phases) == len(TIMERS) * len(RUNS)
        widths = page.eval_on_selector_all("#timings-plot .timing-segment",
                                           "els => els.map(e => e.getBoundingClientRect().width)")
        assert all(w > 0 for w in widths)
        spread = page.eval_on_selector_all("#timings-spread .timing-spread", "els => els.map(e => e.dataset.phase)")
        assert set(spread) == {*TIMERS, "collect"}  # every timer's p50-p90 bar, and collect's own time
        assert page.locator("#metadata-status").inner_text() == "finished"
        assert page.locator("#metadata-commit").inner_text() == "0123456789ab"
        assert "(dirty)" in page.locator("#metadata").inner_text()
        page.screenshot(path=str(tmp_path / "timings.png"), full_page=True)
        assert not seen["pageerror"] and not seen["blocked"]
    finally:
        context.close()
