"""The report's plots in a real browser at 1400 px: plot text is at least 10 px high as displayed, and the
episode table's variation columns share one number format."""

from __future__ import annotations

import re
from pathlib import Path

from PIL import Image
from test_outputs_report_browser import open_report, visible_rows

from evalfleet.analysis.arm_counts import count_labelled
from evalfleet.analysis.grouping import Arm
from evalfleet.analysis.plots import MIN_TEXT_PX_KEY, grouped_bar_plot, success_cells
from evalfleet.cli import main
from evalfleet.outputs.collect import collect

MIN_DISPLAYED_TEXT_PX = 10.0


def wide_plot(path: Path, n_tasks: int = 30) -> None:
    """A plot far wider than the page (30 tasks x 3 policies)."""
    labelled = [(Arm(f"task-{t:02d}", p), {"status": "success" if (t + e) % 3 else "failure"})
                for t in range(n_tasks) for p in ("a", "b", "c") for e in range(10)]
    tasks = sorted({arm.task for arm, _ in labelled})
    grouped_bar_plot(success_cells(count_labelled(labelled)), tasks, ["a", "b", "c"], path, ylabel="success rate",
                     title="wide")


def test_plot_text_at_least_10px_as_displayed_at_1400px(chromium, sample_output: Path, tmp_path: Path) -> None:
    plots = sample_output / "plots"
    (plots / "success_rates.png").unlink()  # the sample's placeholder: draw the real plot
    assert main(["plot", str(sample_output)]) == 0
    wide_plot(plots / "wide_success.png")
    collect([str(sample_output)], str(sample_output), report=True)
    context, page, seen = open_report(chromium, sample_output / "index.html")
    try:
        page.wait_for_function("Array.from(document.querySelectorAll('#plots-section img')).every(i => i.complete)")
        shown = page.eval_on_selector_all(
            "#plots-section img",
            "imgs => imgs.map(i => ({src: i.getAttribute('src'), natural: i.naturalWidth, "
            "shown: i.getBoundingClientRect().width, ratio: window.devicePixelRatio}))")
        assert {s["src"] for s in shown} == {"plots/success_rates.png", "plots/wide_success.png"}
        for s in shown:
            png = sample_output / s["src"]
            drawn_px = float(Image.open(png).text[MIN_TEXT_PX_KEY])  # smallest font the plot code drew, in PNG px
            assert s["natural"] == Image.open(png).size[0] > 700
            displayed = drawn_px * s["shown"] / s["natural"]
            assert displayed >= MIN_DISPLAYED_TEXT_PX, (s, drawn_px, displayed)
        # The success plot appears in the screenshot at its drawn size: the element's pixels equal the PNG's.
        shot = tmp_path / "plot.png"
        page.locator("#plots-section img[src='plots/success_rates.png']").screenshot(path=str(shot))
        assert abs(Image.open(shot).size[0] - Image.open(plots / "success_rates.png").size[0]) <= 4  # + its border

        # Variation values: one number of decimals per column (0.500 beside 0.236, not 0.5).
        rows = visible_rows(page)
        masses = [r["cube.mass"] for r in rows if r["cube.mass"]]
        decimals = {len(m.split(".")[1]) if "." in m else 0 for m in masses}
        assert len(masses) > 20 and len(decimals) == 1, masses[:25]
        assert all(re.fullmatch(r"\d+\.\d+", m) for m in masses)
        assert not seen["pageerror"] and not seen["blocked"]
    finally:
        context.close()
