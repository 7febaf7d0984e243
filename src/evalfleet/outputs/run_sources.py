"""Where the Runs of a set of sources lie: every Run folder under each Location (`find_runs`, `find_sources`), the
Experiment document they give (`read_experiment`), the order it names its Runs in, and what was skipped. Collect,
finalize, the report and the live report find Runs with it."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from evalfleet.errors import UserError
from evalfleet.layout import (DATASET_DIR, EXPERIMENT_FILE, PARTS_DIR, PLOTS_DIR, RECORDS_FILE, REPORT_DATA_DIR,
                              STATUS_FILE, TRAJECTORIES_DIR, VIDEOS_DIR)
from evalfleet.outputs.storage import Location
from evalfleet.rollout.run_folder import experiment_document, join, run_files

log = logging.getLogger("evalfleet.outputs")

SKIP_DIRS = {VIDEOS_DIR, PLOTS_DIR, PARTS_DIR, REPORT_DATA_DIR, TRAJECTORIES_DIR, DATASET_DIR}
MAX_DEPTH = 3  # how deep below a source root Runs are looked for


@dataclass
class RunSource:
    """One Run folder inside one source."""

    location: Location
    rel: str  # the Run folder relative to the source root ("" when the source is the Run folder itself)
    record_files: list[str] = field(default_factory=list)  # merged file first, then parts/*.jsonl by name
    status_file: str | None = None
    has_videos: bool = False
    has_trajectories: bool = False
    arena_files: list[str] = field(default_factory=list)  # Arena's episode_results_{rebuild,rank}<N>.jsonl, in order
    loose_videos: list[str] = field(default_factory=list)  # Arena's .mp4 files lying in the Run folder itself


def find_runs(loc: Location, *, max_depth: int = MAX_DEPTH) -> list[tuple[str, RunSource]]:
    """(Run name, where its files are) for every Run folder at most `max_depth` levels below `loc`. A name
    may appear more than once (one folder per worker task): their records are merged."""
    found: list[tuple[str, RunSource]] = []

    def visit(rel: str, depth: int) -> None:
        entries = dict(loc.listdir(rel))
        parts = [n for n, is_dir in loc.listdir(join(rel, PARTS_DIR)) if not is_dir] \
            if entries.get(PARTS_DIR) is True else []
        files = run_files([n for n, is_dir in entries.items() if not is_dir], parts)
        if files.is_run:
            name = rel.rsplit("/", 1)[-1] if rel else location_name(loc)
            src = RunSource(location=loc, rel=rel, status_file=join(rel, STATUS_FILE) if files.status else None,
                            has_videos=entries.get(VIDEOS_DIR) is True,
                            has_trajectories=entries.get(TRAJECTORIES_DIR) is True,
                            record_files=[join(rel, n) for n in files.collected()],
                            arena_files=[join(rel, n) for n in files.arena_files()])
            if not files.merged:  # Arena's videos beside its records (a collected folder has them in videos/)
                src.loose_videos = sorted(n for n, is_dir in entries.items() if not is_dir and n.endswith(".mp4"))
            found.append((name, src))
            return
        if depth >= max_depth:
            return
        for name, is_dir in sorted(entries.items()):
            if is_dir and name not in SKIP_DIRS and not name.startswith("."):
                visit(join(rel, name), depth + 1)

    visit("", 0)
    return found


def location_name(loc: Location) -> str:
    """The last component of a source's root: the Run's name when the source is a Run folder itself."""
    return loc.root.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1] or "run"


def find_sources(locations: list[Location]) -> dict[str, list[RunSource]]:
    """Every Run found in the locations, by name: where its files are (one Run may lie in several)."""
    by_name: dict[str, list[RunSource]] = {}
    for loc in locations:
        for name, src in find_runs(loc):
            by_name.setdefault(name, []).append(src)
    return by_name


def files_to_read(src: RunSource, merged_only: bool) -> list[str]:
    """The record files of `src` to read: all of them, or where `merged_only` and a collected
    episode_results.jsonl exists, that file alone."""
    files = src.record_files
    if merged_only and files and files[0].endswith(RECORDS_FILE):
        return files[:1]
    return files


def skipped_files(locations: list[Location]) -> list[dict[str, str]]:
    """What the sources held but collect did not read: [{"path", "why"}] (links out, FIFOs, ...)."""
    return [{"path": loc.display(rel), "why": why} for loc in locations for rel, why in sorted(loc.skipped.items())]


def read_experiment(locations: list[Location]) -> tuple[bytes | None, Location | None, dict[str, Any]]:
    """The first source's experiment.yaml that is a regular file in it and an Experiment (its bytes, where
    it is, its Runs with `shared` merged in); one that is not is skipped (`Location.skipped`), one that differs from the
    first is logged."""
    found: tuple[bytes | None, Location | None, dict[str, Any]] = (None, None, {})
    for loc in locations:
        if not loc.is_file(EXPERIMENT_FILE):
            continue
        data = loc.read_bytes(EXPERIMENT_FILE)
        try:
            document = experiment_document(data, loc.display(EXPERIMENT_FILE))
        except UserError as exc:
            loc.skipped[EXPERIMENT_FILE] = f"not an Experiment ({exc.message})"
            log.warning("%s: skipped, not an Experiment (%s)", loc.display(EXPERIMENT_FILE), exc.message)
            continue
        if found[0] is None:
            found = (data, loc, document)
        elif data != found[0]:
            log.warning("%s differs from %s; keeping the first", loc.display(EXPERIMENT_FILE),
                        found[1].display(EXPERIMENT_FILE))
    return found


def in_experiment_order(found: list[Any], order: list[str]) -> list[Any]:
    """The Experiment's order (the report and experiment_result.json list Runs as the file does); Runs it does
    not name follow by name. `found`: Run names, or Runs (objects with .name)."""
    index = {name: i for i, name in enumerate(order)}

    def name(r: Any) -> str:
        return r if isinstance(r, str) else r.name

    return sorted(found, key=lambda r: (index.get(name(r), len(index)), name(r)))
