"""The last step of every run: collect the output folder in place, draw the plots and write the report,
reading the records once; and `write_report`, the report of a folder that is already collected."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalfleet.errors import UserError
from evalfleet.feedback import is_long
from evalfleet.outputs.collect import (PLOTS_DIR, Collected, collect_runs, experiment_run_order, in_experiment_order,
                                      load_runs, work_size, write_collected_report)
from evalfleet.outputs.report import REPORT_FILE, render_report
from evalfleet.outputs.storage import Location, atomic_write_bytes
from evalfleet.outputs.summary import RESULT_FILE, build_result, provenance, summarise_run

log = logging.getLogger("evalfleet.outputs")


@dataclass
class Finalized:
    collected: Collected
    report: Path
    plots: list[Path] = field(default_factory=list)
    plot_problem: str | None = None  # why the plots were skipped (they never cost the results)

    @property
    def result(self) -> dict[str, Any]:
        return self.collected.result


def preload() -> None:
    """Import what `finalize` will need (the analysis modules, matplotlib), so that calling it early, while
    a core is idle, takes those seconds off the end of a run. Never raises: `finalize` reports problems."""
    try:
        from evalfleet.analysis import loading, success  # noqa: F401
        from evalfleet.analysis.plots import load_matplotlib

        load_matplotlib()
    except Exception:  # noqa: BLE001 - the real import, in finalize, raises with its context
        log.debug("preloading the plotting modules failed", exc_info=True)


def finalize(out: str | os.PathLike[str]) -> Finalized:
    """Collect `out` in place (merged logs, experiment_result.json), write plots/success_rates.png (and
    average progress) from the Runs collect read, then index.html showing them."""
    from evalfleet.analysis.loading import record_set_from_runs
    from evalfleet.analysis.success import SUCCESS_PLOT, write_success_plots

    out = Path(out)
    collected = collect_runs([str(out)], str(out))
    plots: list[Path] = []
    problem = None
    if is_long(**work_size(collected.runs)):
        log.info("drawing %s", out / PLOTS_DIR / SUCCESS_PLOT)
    try:
        drawn = write_success_plots(record_set_from_runs(collected.runs), out / PLOTS_DIR / SUCCESS_PLOT,
                                    where=str(out))
        plots = drawn.images
    except UserError as exc:  # e.g. nothing decided yet: a plot must never lose the results
        problem = exc.line()
        log.info("plots skipped: %s", problem)
    report = Path(write_collected_report(collected))
    return Finalized(collected, report, plots, problem)


def write_report(directory: str | os.PathLike[str], *, title: str | None = None) -> str:
    """Write DIR/index.html from DIR's collected Runs; returns its path. Reads experiment_result.json when
    present (else summarises the Runs it finds, without writing anything else)."""
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise UserError("no such folder (give the output folder of `evalfleet run` or `evalfleet collect`)",
                        where=directory)
    loc = Location(url=directory, root=directory)
    runs = load_runs([loc], merged_only=True)
    if not runs:
        raise UserError("no Runs found here (expected <run>/episode_results.jsonl)", where=directory)
    experiment = os.path.join(directory, "experiment.yaml")
    exp_bytes = Path(experiment).read_bytes() if os.path.isfile(experiment) else None
    runs = in_experiment_order(runs, experiment_run_order(exp_bytes))  # as collect lists them
    result_path = os.path.join(directory, RESULT_FILE)
    result = None
    if os.path.exists(result_path):
        try:
            with open(result_path, encoding="utf-8") as f:
                result = json.load(f)
        except (ValueError, UnicodeDecodeError) as exc:
            raise UserError(f"not valid JSON ({exc}); run `evalfleet collect` again", where=result_path) from None
        if not isinstance(result, dict) or not isinstance(result.get("runs"), dict):
            raise UserError("not an evalfleet experiment result", where=result_path)
    if result is None:
        result = build_result([summarise_run(r.name, r.records, r.status, set_aside=r.set_aside) for r in runs],
                              provenance(exp_bytes))
    plots_dir = os.path.join(directory, PLOTS_DIR)
    plots = []
    if os.path.isdir(plots_dir):
        for dirpath, dirnames, filenames in os.walk(plots_dir):
            dirnames.sort()
            for name in sorted(filenames):
                if name.lower().endswith((".png", ".svg", ".jpg", ".jpeg")):
                    plots.append(os.path.relpath(os.path.join(dirpath, name), directory).replace(os.sep, "/"))
    title = title or f"evalfleet report: {os.path.basename(os.path.abspath(directory))}"
    path = os.path.join(directory, REPORT_FILE)
    if is_long(**work_size(runs)):
        log.info("writing %s", path)
    atomic_write_bytes(path, render_report(result, runs, plots=plots, title=title).encode("utf-8"))
    return path
