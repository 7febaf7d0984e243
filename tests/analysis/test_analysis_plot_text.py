"""The success plot's text sizes and axis labels, read back from the PNG and the figure code's constants."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from evalfleet.analysis import plots
from evalfleet.cli import main


def test_success_plot_has_task_label_and_records_its_smallest_text(evalfleet_output: Path, tmp_path: Path,
                                                                   monkeypatch) -> None:
    seen = {}
    real = plots.smallest_text_px

    def spy(fig):  # keep the figure's texts to check them here
        from matplotlib.text import Text

        seen["texts"] = [(t.get_text(), t.get_fontsize()) for t in fig.findobj(Text)
                         if t.get_visible() and t.get_text().strip()]
        return real(fig)

    monkeypatch.setattr(plots, "smallest_text_px", spy)
    png = tmp_path / "s.png"
    assert main(["plot", str(evalfleet_output), "--output", str(png)]) == 0
    texts = dict(seen["texts"])
    assert "task" in texts  # the x axis is labelled
    assert any(t.endswith("%") for t in texts) and any("n=" in t for t in texts)  # ticks and bar labels drawn
    smallest = min(size for _, size in seen["texts"]) * plots.DPI / 72
    stored = float(Image.open(png).text[plots.MIN_TEXT_PX_KEY])
    assert abs(stored - smallest) < 0.01 and stored >= plots.TEXT_PX - 0.01
