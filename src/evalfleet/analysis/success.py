"""Success-rate (and average-progress) plots as a library function: `evalfleet plot` and the pipeline's
finalize step both call `write_success_plots`; the drawing is `plots.grouped_bar_plot`, the intervals
come from `stats`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evalfleet.analysis.grouping import UNTAGGED, assign_arms, filter_runs, ordered_policies, ordered_tasks
from evalfleet.analysis.loading import RecordSet
from evalfleet.analysis.loading import progress_score
from evalfleet.analysis.plots import cells_json, grouped_bar_plot, progress_cells, success_cells, write_json
from evalfleet.errors import UserError

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
        raise UserError(
            f"all {record_set.n_errors} records are infrastructure errors (status: error); no outcome to analyse",
            where=where,
        )
    return assign_arms(records, policies, where=where, flag=flag)


def write_success_plots(record_set: RecordSet, output: Path, *, policies: list[str] | None = None,
                        runs: list[str] | None = None, title: str | None = None, where: str = "") -> SuccessPlots:
    """Grouped success-rate bars with 95% Wilson intervals at `output` (+ its .json), and, when records carry
    a numeric `progress`, average progress beside it (`average_progress.png`)."""
    labelled = labelled_records(record_set, runs, policies, where=where or ", ".join(record_set.sources))
    tasks = ordered_tasks(labelled)
    shown = ordered_policies(labelled, policies)
    cells = success_cells(labelled)
    n = len(labelled)
    title = title or f"Success rate with 95% Wilson interval ({n} episodes" + (
        f", {record_set.n_errors} infrastructure errors excluded)" if record_set.n_errors else ")")
    size = grouped_bar_plot(cells, tasks, shown, output, ylabel="success rate", title=title)
    data = output.with_suffix(".json")
    write_json(data, {"kind": "success_rate", "interval": "wilson95", "episodes": n,
                      "excluded_errors": record_set.n_errors, "set_aside": record_set.set_aside.total,
                      "image": str(output), **cells_json(cells, tasks, shown)})
    plots = SuccessPlots(output, data, size, tasks, shown)
    # Arena's progress is a map ({overall_score, all_complete, criteria_by_name, events}): plot its score.
    progress = progress_cells(
        [(arm, {**rec, "progress": progress_score(rec.get("progress"))}) for arm, rec in labelled]
    )
    if progress:
        stem = output.stem.replace("success_rates", "average_progress")
        plots.progress_image = output.with_name((stem if stem != output.stem else stem + "_progress") + output.suffix)
        grouped_bar_plot(progress, tasks, shown, plots.progress_image, ylabel="average progress",
                         title=f"Average progress with 95% interval ({sum(c.n for c in progress.values())} episodes)")
        plots.progress_data = plots.progress_image.with_suffix(".json")
        write_json(plots.progress_data,
                   {"kind": "average_progress", "interval": "normal95", **cells_json(progress, tasks, shown)})
    return plots
