"""Success-rate (and average-progress) plots as a library function: `evalfleet plot` and the pipeline's
finalize step both call `write_success_plots`; the drawing is `plots.grouped_bar_plot`, the intervals
come from `stats`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalfleet.analysis.arm_counts import ArmCounts, count_labelled
from evalfleet.analysis.grouping import UNTAGGED, assign_arms, filter_runs, label
from evalfleet.analysis.loading import RecordSet
from evalfleet.analysis.plots import cells_json, grouped_bar_plot, progress_cells, success_cells, write_json
from evalfleet.errors import UserError
from evalfleet.layout import RECORDS_FILE
from evalfleet.rollout.records import SetAside

SUCCESS_PLOT = "success_rates.png"


@dataclass
class SuccessPlots:
    image: Path
    data: Path
    size_px: tuple[int, int]
    tasks: list[str]
    policies: list[str]
    progress_image: Path | None = None
    progress_data: Path | None = None

    @property
    def untagged(self) -> bool:
        """Some records carry no policy tag (Arena's <task>_<policy> Run names need --policies)."""
        return UNTAGGED in self.policies

    @property
    def images(self) -> list[Path]:
        return [p for p in (self.image, self.progress_image) if p is not None]


def labelled_records(record_set: RecordSet, runs: list[str] | None, policies: list[str] | None, *, where: str,
                     flag: str = "--policies") -> list:
    """(arm, record) for every record with a policy outcome, restricted to `runs`, grouped by policy."""
    records = filter_runs(record_set.rated, runs, where=where)
    if not records:
        raise _all_errors(record_set.n_errors, where)
    return assign_arms(records, policies, where=where, flag=flag)


def _all_errors(n_errors: int, where: str) -> UserError:
    return UserError(f"all {n_errors} records are infrastructure errors (status: error); no outcome to analyse",
                     where=where)


def write_success_plots(record_set: RecordSet, output: Path, *, policies: list[str] | None = None,
                        runs: list[str] | None = None, title: str | None = None, where: str = "") -> SuccessPlots:
    """Grouped success-rate bars with 95% Wilson intervals at `output` (+ its .json), and, when records carry
    a numeric `progress`, average progress beside it (`average_progress.png`)."""
    labelled = labelled_records(record_set, runs, policies, where=where or ", ".join(record_set.sources))
    counts = count_labelled(labelled)
    counts.errors = record_set.n_errors  # every error of the set, as the title has always said
    return plot_counts(counts, output, policies=policies, set_aside=record_set.set_aside.total, title=title)


def write_collected_plots(runs: list[Any], output: Path, *, where: str) -> SuccessPlots:
    """`write_success_plots` of collect's Runs (`outputs.run_digest.RunDigest`: .name, .set_aside and
    .plot_counts, keyed by each record's (run, task, policy)), from their counts: no record is read again."""
    counts, set_aside = ArmCounts(), SetAside()
    for run in runs:
        counts.merge(run.plot_counts, relabel=lambda key: label(dict(zip(("run", "task", "policy"), key)), None))
        set_aside.add(run.set_aside)
    if not counts.rated + counts.errors:
        raise UserError("no episode records to analyse",
                        where=", ".join(f"{run.name}/{RECORDS_FILE}" for run in runs) or "the output folder")
    if not counts.rated:
        raise _all_errors(counts.errors, where)
    return plot_counts(counts, output, policies=None, set_aside=set_aside.total)


def plot_counts(counts: ArmCounts, output: Path, *, policies: list[str] | None, set_aside: int,
                title: str | None = None) -> SuccessPlots:
    """Draw the plots (and write their JSON) from per-Arm counts; `policies` orders the bars (else sorted)."""
    tasks = sorted({arm.task for arm in counts.tallies})
    shown = list(dict.fromkeys(policies)) if policies else sorted({arm.policy for arm in counts.tallies})
    cells = success_cells(counts)
    n = counts.rated
    title = title or f"Success rate with 95% Wilson interval ({n} episodes" + (
        f", {counts.errors} infrastructure errors excluded)" if counts.errors else ")")
    progress = progress_cells(counts)
    size = grouped_bar_plot(cells, tasks, shown, output, ylabel="success rate", title=title)
    progress_image = None
    if progress:
        stem = output.stem.replace("success_rates", "average_progress")
        progress_image = output.with_name((stem if stem != output.stem else stem + "_progress") + output.suffix)
        progress_title = f"Average progress with 95% interval ({sum(c.n for c in progress.values())} episodes)"
        grouped_bar_plot(progress, tasks, shown, progress_image, ylabel="average progress", title=progress_title)
    data = output.with_suffix(".json")
    write_json(data, {"kind": "success_rate", "interval": "wilson95", "episodes": n,
                      "excluded_errors": counts.errors, "set_aside": set_aside,
                      "image": str(output), **cells_json(cells, tasks, shown)})
    plots = SuccessPlots(output, data, size, tasks, shown)
    if progress_image is not None:
        plots.progress_image = progress_image
        plots.progress_data = progress_image.with_suffix(".json")
        write_json(plots.progress_data,
                   {"kind": "average_progress", "interval": "normal95", **cells_json(progress, tasks, shown)})
    return plots
