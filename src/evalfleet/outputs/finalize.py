"""The last step of every run: collect the output folder in place, draw the plots and write the report,
reading the records once; and `write_report`, the report of a folder that is already collected."""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalfleet import bounded_json
from evalfleet.errors import UserError
from evalfleet.feedback import is_long
from evalfleet.rollout.run_folder import planned_episodes
from evalfleet.layout import PLOTS_DIR, REPORT_FILE, RESULT_FILE
from evalfleet.outputs.collect import (Collected, collect_runs, read_verification, stream_runs, work_size,
                                      write_collected_report)
from evalfleet.outputs.run_sources import find_sources, in_experiment_order, read_experiment, skipped_files
from evalfleet.outputs.report import render_report
from evalfleet.outputs.run_digest import OutcomeRecords
from evalfleet.outputs.staging import Staging
from evalfleet.outputs.storage import Location
from evalfleet.secrets import mask_url
from evalfleet.outputs.summary import build_result, package_versions, provenance

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
    """Import what `finalize` will need (the analysis modules, matplotlib) and read the installed packages'
    versions it records, so that calling it early, while the workers run, takes those tenths of a second off the end
    of a run. Never raises: `finalize` reports problems."""
    try:
        from evalfleet.analysis import loading, success  # noqa: F401 - imported only to warm the import cache
        from evalfleet.analysis.plots import load_matplotlib

        package_versions()
        load_matplotlib()
    except Exception:  # the real import, in finalize, raises with its context
        log.debug("preloading the plotting modules failed", exc_info=True)


class Preload:
    """`preload` on a thread of its own, started at most once (`start` returns at once, so the backend that starts
    it is not held up by it), and waited for (`wait`) before `finalize` imports the same modules: two threads
    importing matplotlib's modules at once could deadlock on their import locks."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=preload, name="evalfleet-preload", daemon=True)
                self._thread.start()

    def wait(self) -> None:
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join()


def finalize(out: str | os.PathLike[str]) -> Finalized:
    """Collect `out` in place (merged logs, experiment_result.json), write plots/success_rates.png (and
    average progress) from the Runs collect read, then index.html showing them."""
    from evalfleet.analysis.success import SUCCESS_PLOT, write_collected_plots

    out = Path(out)
    collected = collect_runs([str(out)], str(out), tables=True)
    plots: list[Path] = []
    problem = None
    if is_long(**work_size(collected.runs)):
        log.info("drawing %s", out / PLOTS_DIR / SUCCESS_PLOT)
    try:
        drawn = write_collected_plots(collected.runs, out / PLOTS_DIR / SUCCESS_PLOT, where=str(out))
        plots = drawn.images
    except UserError as exc:  # e.g. nothing decided yet: a plot must never lose the results
        problem = exc.line()
        log.info("plots skipped: %s", problem)
    report = Path(write_collected_report(collected))
    return Finalized(collected, report, plots, problem)


def write_report(directory: str | os.PathLike[str], *, title: str | None = None) -> str:
    """Write DIR/index.html from DIR's collected Runs; returns its path. Reads experiment_result.json when
    present (else summarises the Runs it finds, without writing anything else). Only what lies in DIR is
    read (links leading out of it, FIFOs, ... are skipped and listed on the page)."""
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise UserError("no such folder (give the output folder of `evalfleet run` or `evalfleet collect`)",
                        where=mask_url(directory))
    loc = Location(url=directory, root=directory)
    exp_bytes, _, named = read_experiment([loc])
    found = find_sources([loc])
    if not found:
        raise UserError("no Runs found here (expected <run>/episode_results.jsonl)", where=directory)
    with Staging(loc) as staging:  # the episode tables, moved in once every Run has been read
        runs = stream_runs(in_experiment_order(list(found), list(named)), found, staging, merged_only=True,
                           plan=planned_episodes(named), merged=False, tables=True)
        result = _read_result(loc)
        staging.commit()
    if result is None:
        result = build_result([r.summary for r in runs], provenance(exp_bytes), records=OutcomeRecords(runs),
                              failure_facts={r.name: r.failure_facts for r in runs},
                              verification=read_verification(loc))
    images = (".png", ".svg", ".jpg", ".jpeg")
    plots = [rel for rel in loc.walk_files(PLOTS_DIR) if rel.lower().endswith(images)] if loc.isdir(PLOTS_DIR) else []
    listed = result.get("skipped_files") if isinstance(result.get("skipped_files"), list) else []
    listed = [s for s in listed if isinstance(s, dict)]
    known = {s.get("path") for s in listed}
    result = {**result, "skipped_files": listed + [s for s in skipped_files([loc]) if s["path"] not in known]}
    title = title or f"evalfleet report: {os.path.basename(os.path.abspath(directory))}"
    path = os.path.join(directory, REPORT_FILE)
    if is_long(**work_size(runs)):
        log.info("writing %s", path)
    loc.write_bytes(REPORT_FILE, render_report(result, runs, plots=plots, title=title).encode("utf-8"))
    return path


def _read_result(loc: Location) -> dict[str, Any] | None:
    """The folder's experiment_result.json, None when there is none; UserError naming it when it is not one."""
    if not loc.is_file(RESULT_FILE):
        return None
    try:
        result = bounded_json.loads(loc.read_bytes(RESULT_FILE))
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"not valid JSON ({exc}); run `evalfleet collect` again",
                        where=loc.display(RESULT_FILE)) from None
    if not isinstance(result, dict) or not isinstance(result.get("runs"), dict):
        raise UserError("not an evalfleet experiment result", where=loc.display(RESULT_FILE))
    return result
