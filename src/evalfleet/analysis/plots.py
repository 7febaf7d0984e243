"""Grouped success-rate bars (tasks on the x axis, one bar per policy, 95% Wilson whiskers, "N/A" where a
task/policy pair has no records) and the same layout for average progress."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalfleet.analysis.arm_counts import ArmCounts
from evalfleet.analysis.grouping import Arm
from evalfleet.analysis.stats import mean_interval, wilson_interval

DPI = 100
HEIGHT_PX = 520
# Text sizes in pixels of the PNG. The report shows plots at their drawn size (report.css), so these are the
# sizes a reader sees; the smallest is stored in the PNG (MIN_TEXT_PX_KEY) for the report's browser test.
TEXT_PX = 13  # tick labels, bar labels, legend
LABEL_PX = 14  # axis labels
TITLE_PX = 16
MIN_TEXT_PX_KEY = "evalfleet:min_text_px"


def _pt(px: float) -> float:
    return px * 72.0 / DPI


def smallest_text_px(fig) -> float:
    """The smallest font size, in PNG pixels, of any visible non-empty text in the figure."""
    from matplotlib.text import Text

    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    return min(sizes) * DPI / 72.0 if sizes else 0.0


def plot_size_px(n_tasks: int, n_policies: int) -> tuple[int, int]:
    """Pixel size of a grouped bar plot: wide enough for every bar, never narrower than 720 px."""
    width = 160 + n_tasks * (40 + 44 * max(n_policies, 1))
    return (max(720, min(width, 6000)), HEIGHT_PX)


@dataclass
class Cell:
    n: int
    value: float  # success rate or mean progress
    lower: float
    upper: float
    successes: int | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"n": self.n, "value": self.value, "ci": [self.lower, self.upper]}
        if self.successes is not None:
            out["successes"] = self.successes
        return out


def success_cells(counts: ArmCounts) -> dict[Arm, Cell]:
    cells = {}
    for arm, tally in counts.tallies.items():
        lo, hi = wilson_interval(tally.successes, tally.n)
        cells[arm] = Cell(n=tally.n, value=tally.successes / tally.n, lower=lo, upper=hi, successes=tally.successes)
    return cells


def progress_cells(counts: ArmCounts) -> dict[Arm, Cell]:
    cells = {}
    for arm, tally in counts.tallies.items():
        if tally.progress:
            mean, lo, hi = mean_interval(tally.progress)
            cells[arm] = Cell(n=len(tally.progress), value=mean, lower=lo, upper=hi)
    return cells


def load_matplotlib() -> None:
    """Import matplotlib with its Agg backend (a few tenths of a second), as drawing a plot would."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # imported for its cost only


def grouped_bar_plot(
    cells: dict[Arm, Cell],
    tasks: list[str],
    policies: list[str],
    output: Path,
    *,
    ylabel: str,
    title: str,
    percent: bool = True,
) -> tuple[int, int]:
    """Draw and save the plot; returns its pixel size."""
    load_matplotlib()
    import matplotlib.image
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    import numpy as np

    width_px, height_px = plot_size_px(len(tasks), len(policies))
    fig, ax = plt.subplots(figsize=(width_px / DPI, height_px / DPI), dpi=DPI)
    ax.tick_params(labelsize=_pt(TEXT_PX))
    try:
        n_pol = max(len(policies), 1)
        bar_w = 0.8 / n_pol
        colours = plt.get_cmap("tab10")
        top = 1.0
        for j, policy in enumerate(policies):
            xs, ys, err_lo, err_hi = [], [], [], []
            for i, task in enumerate(tasks):
                x = i - 0.4 + bar_w * (j + 0.5)
                cell = cells.get(Arm(task, policy))
                if cell is None:
                    ax.text(x, 0.02, "N/A", ha="center", va="bottom", rotation=90, fontsize=_pt(TEXT_PX), color="0.4")
                    continue
                xs.append(x)
                ys.append(cell.value)
                err_lo.append(max(cell.value - cell.lower, 0.0))
                err_hi.append(max(cell.upper - cell.value, 0.0))
                top = max(top, cell.upper)
                text = f"{cell.value:.0%}" if percent else f"{cell.value:.2f}"
                ax.text(x, cell.upper + 0.01, f"{text}\nn={cell.n}", ha="center", va="bottom", fontsize=_pt(TEXT_PX),
                        linespacing=1.1)
            ax.bar(xs, ys, bar_w * 0.95, label=policy, color=colours(j % 10), yerr=[err_lo, err_hi], capsize=3,
                   error_kw={"elinewidth": 1, "ecolor": "0.15"})
        ax.set_xticks(range(len(tasks)))
        ax.set_xticklabels(tasks, rotation=30 if len(tasks) > 3 else 0, ha="right" if len(tasks) > 3 else "center",
                           fontsize=_pt(TEXT_PX))
        ax.set_xlim(-0.6, len(tasks) - 0.4)
        ax.set_ylim(0, top * 1.25)  # room for the two-line bar labels above the whiskers
        if percent and top <= 1.0:
            ax.set_yticks([i / 5 for i in range(6)])  # no 120% tick in the room kept for labels
        if percent:
            ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
        ax.set_ylabel(ylabel, fontsize=_pt(LABEL_PX))
        ax.set_xlabel("task", fontsize=_pt(LABEL_PX))
        ax.set_title(title, fontsize=_pt(TITLE_PX))
        ax.legend(title="policy", fontsize=_pt(TEXT_PX), title_fontsize=_pt(TEXT_PX), loc="upper right")
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        output.parent.mkdir(parents=True, exist_ok=True)
        fig.canvas.draw()  # tick labels exist once drawn
        if output.suffix.lower() == ".png":
            # The picture just drawn, saved as savefig would save it, without savefig drawing it again.
            matplotlib.image.imsave(output, np.asarray(fig.canvas.buffer_rgba()), format="png", dpi=DPI,
                                    metadata={MIN_TEXT_PX_KEY: f"{smallest_text_px(fig):.2f}"})
        else:
            fig.savefig(output, dpi=DPI)
    finally:
        plt.close(fig)
    return width_px, height_px


def cells_json(cells: dict[Arm, Cell], tasks: list[str], policies: list[str]) -> dict[str, Any]:
    return {
        "tasks": tasks,
        "policies": policies,
        "cells": [
            {"task": t, "policy": p, **(cells[Arm(t, p)].to_json() if Arm(t, p) in cells else {"n": 0, "value": None})}
            for t in tasks
            for p in policies
        ],
    }


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")
