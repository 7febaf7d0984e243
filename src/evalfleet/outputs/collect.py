"""Collect: merge every Run's logs from one or more sources into one output folder or bucket prefix.

For each Run found in the sources (a folder holding `episode_results.jsonl`, `parts/*.jsonl` and/or
`run_status.json`), collect writes `<run>/episode_results.jsonl` — one line per episode, sorted by episode,
duplicates resolved by the one rule of `records.RunRecords`, records of other Runs or outside the plan set
aside and counted, torn lines dropped —,
copies `<run>/videos/**`, `plots/**` and `experiment.yaml`, and writes `experiment_result.json` with each Run's
status, counts, success rate with its 95% Wilson interval, timings and provenance.

Collecting a folder into itself (`collect([OUT], OUT)`) works in place: the shard logs stay, the merged file is
replaced atomically, and nothing is copied.

Only what lies in a source is read (storage.Location, analysis.local_files): links leading out of it, FIFOs,
devices and an experiment.yaml that is not an Experiment are skipped and listed in experiment_result.json's
`skipped_files` and the report. Runs without run_status.json are held to the plan experiment.yaml gives.
URLs are shown masked (secrets.mask_url) in every message; a URL carrying credentials is refused.
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Iterator

from evalfleet.arena_format import arena_videos
from evalfleet.errors import UserError
from evalfleet.feedback import is_long, track
from evalfleet.forking import fork_allowed, in_child
from evalfleet.layout import (EXPERIMENT_FILE, PARTS_DIR, PLOTS_DIR, PROTOCOL_FILE, RECORDS_FILE, REPORT_FILE,
                              RESULT_FILE, STATUS_FILE, TRAJECTORIES_DIR, VERIFY_FILE, VIDEOS_DIR)
from evalfleet.outputs.failures import ProtocolCheck, read_protocol
from evalfleet.outputs.output_lock import writing
from evalfleet.outputs.report import render_report
from evalfleet.outputs.report_episodes import episode_script, script_path
from evalfleet.outputs.report_trajectories import TrajectoryPlots
from evalfleet.outputs.run_digest import OutcomeRecords, RunDigest, digest_run
from evalfleet.outputs.run_facts import Stopwatch, collect_facts
from evalfleet.outputs.run_sources import (MAX_DEPTH, RunSource, files_to_read, find_sources, in_experiment_order,
                                           location_name, read_experiment, skipped_files)
from evalfleet.outputs.staging import Staging
from evalfleet.outputs.storage import Location, check_endpoint, is_url, open_location, storage_errors
from evalfleet.outputs.stopping_result import add_stopping
from evalfleet.outputs.summary import build_result, finite_json, provenance
from evalfleet.process_exit import sigterm_interrupts
from evalfleet.secrets import mask_url
from evalfleet.rollout.records import RunRecords, RunScope, SetAside
from evalfleet.rollout.run_folder import (folder_records, join, merge_statuses, planned_episodes, read_status,
                                          status_planned)

log = logging.getLogger("evalfleet.outputs")



@dataclass
class RunData:
    name: str
    sources: list[RunSource]
    records: list[dict[str, Any]]  # latest record per episode, sorted by episode
    lines: list[str]  # the records' original JSON lines, same order
    status: dict[str, Any] | None
    set_aside: SetAside = field(default_factory=SetAside)
    summary: dict[str, Any] | None = None
    planned: int | None = None  # the episodes its records are held to (run_status.json, else experiment.yaml)
    protocol: dict[str, Any] | None = None  # its protocol.json (the task's protocol, described), if any

    def summary_status(self) -> dict[str, Any] | None:
        """run_status.json's content for the summary, with the plan experiment.yaml gives when it has none."""
        if self.planned is None or (self.status or {}).get("planned_episodes") is not None:
            return self.status
        return {**(self.status or {}), "planned_episodes": self.planned}


# --- reading and merging records ---------------------------------------------------------------------

def read_run(name: str, sources: list[RunSource], *, merged_only: bool = False,
             after_file: Any = None, planned: int | None = None) -> RunData:
    """Merge a Run's records from all its sources, plan-aware (records.RunRecords): the planned episode
    count comes from run_status.json, else from `planned` (the Experiment's plan, from experiment.yaml).
    `merged_only`: where a collected episode_results.jsonl exists, read it alone (the report of a collected
    folder), not the shard logs it was made from. `after_file()` is called after each record file (progress)."""
    status = merge_statuses([read_status(src.location, src.status_file) for src in sources if src.status_file])
    from_status = status_planned(status)
    planned = from_status if from_status is not None else planned
    merged = RunRecords(RunScope(name, planned))
    protocols = ProtocolCheck(name)  # one Run's records under two protocol identities are refused
    for src in sources:
        videos = _arena_videos(src) if src.arena_files else None
        for rec, line, where in folder_records(src.location, files_to_read(src, merged_only), src.arena_files,
                                               run=name, status=status, videos=videos, after_file=after_file):
            if merged.add(rec, line, where) is None:
                protocols.add(rec, where)
    return RunData(name=name, sources=sources, records=merged.records, lines=[str(line) for line in merged.lines],
                   status=status, set_aside=merged.set_aside, planned=planned,
                   protocol=read_protocol([(src.location, join(src.rel, PROTOCOL_FILE)) for src in sources]))


def _arena_videos(src: RunSource) -> dict[tuple[int, int, int], dict[str, str]]:
    """Arena's videos of a Run folder (beside its records or in videos/), by rebuild, env and episode-in-env."""
    names = [f"{VIDEOS_DIR}/{n}" for n in src.loose_videos]
    if src.has_videos:
        prefix = join(src.rel, VIDEOS_DIR)
        names += [rel[len(src.rel):].lstrip("/") if src.rel else rel for rel in src.location.walk_files(prefix)]
    return arena_videos(names)




def stream_runs(names: list[str], found: dict[str, list[RunSource]], staging: Staging, *,
                merged_only: bool = False, plan: dict[str, int | None] | None = None,
                merged: bool = True, tables: bool = False) -> list[RunDigest]:
    """Read the Runs one at a time, in `names`' order (`found`: their sources; a name without any is a Run that
    never started), stage each one's merged episode_results.jsonl (`merged`) and its episode table for the report
    (`tables`: `report_episodes.episode_script`, and its recorded episodes' plot data: `report_trajectories`), and
    keep only its digest (`run_digest`): memory grows with the largest Run, not with the Experiment. `plan`: each
    Run's planned episodes from experiment.yaml, for Run folders without run_status.json. Where the records are
    local, several MB and this process may fork, the second half of the Runs (by bytes) is read at the same time in
    a forked child (`forking.in_child`): the same files, digests, log lines and errors; a child that fails leaves
    its Runs to be read here, in order."""
    files = sum(len(files_to_read(src, merged_only)) for name in names for src in found.get(name, []))
    if is_long(files=files):
        log.info("reading %d record files of %d Runs", files, len(names))

    def read(index: int, after_file: Any) -> RunDigest:
        name = names[index]
        planned = (plan or {}).get(name)
        run = read_run(name, found[name], merged_only=merged_only, after_file=after_file,
                       planned=planned) if found.get(name) else _never_started(name, planned)
        if merged:
            with staging.open(join(name, RECORDS_FILE)) as f:
                for line in run.lines:
                    f.write(line.encode("utf-8") + b"\n")
        if tables and run.records:
            # The plots' data are read here, from the sources, while this Run's records are held (the trajectories
            # are copied into the output only after every Run has been read).
            folders = [(src.location, src.rel) for src in run.sources if src.has_trajectories]
            plots = TrajectoryPlots(index, name, folders, staging.write_bytes).write_all(run.records)
            staging.write_bytes(script_path(index), episode_script(index, name, run.records, plots))
        return digest_run(run, staging.dest)  # the next Run's records replace this one's

    split = _second_half(names, found, staging, merged_only)

    # The sources' Locations the child reads: what each skips (a link out of its folder) is listed in the result.
    locations = list({id(src.location): src.location for name in names[split:] for src in found.get(name, [])}
                     .values())

    def second_half() -> tuple[list[RunDigest], list[str], list[tuple[str, int, str]], list[dict[str, str]]]:
        staged, lines = len(staging.staged()), _LogLines()
        with lines.captured():
            digests = [replace(read(index, None), sources=[], dest=None) for index in range(split, len(names))]
        return digests, staging.staged()[staged:], lines.lines, [loc.skipped for loc in locations]

    child = in_child(second_half) if split < len(names) else None  # before the progress bar, which may be a thread
    ticks = track(range(files), "reading record files", total=files)
    digests: list[RunDigest] = []
    try:
        for index in range(split if child is not None else len(names)):
            digests.append(read(index, lambda: next(ticks, None)))
        if child is not None:
            done, share = child.result()
            child = None
            if done and share is not None:
                theirs, staged, lines, skipped = share
                staging.adopt(staged)
                for loc, entries in zip(locations, skipped):
                    loc.skipped.update(entries)
                for line in lines:
                    logging.getLogger(line[0]).log(line[1], "%s", line[2])
                digests += [replace(d, sources=found.get(d.name, []), dest=staging.dest) for d in theirs]
            else:
                for index in range(split, len(names)):
                    digests.append(read(index, lambda: next(ticks, None)))
    finally:
        if child is not None:
            child.discard()
    for _ in ticks:  # finish the bar
        pass
    episodes = sum(d.episodes for d in digests)
    if is_long(files=files, episodes=episodes):
        log.info("merged %d episodes of %d Runs", episodes, len(digests))
    return digests


SPLIT_BYTES = 4 << 20  # records from which a forked child's half pays for its fork (~10 ms) and its pickled digests


def _second_half(names: list[str], found: dict[str, list[RunSource]], staging: Staging, merged_only: bool) -> int:
    """Where the Runs a forked child reads begin (by bytes, the first index past half of them); len(names) where
    none should: fewer than two Runs, records under SPLIT_BYTES, a bucket (its client's threads and connections do
    not survive a fork), or forking not allowed here."""
    if len(names) < 2 or not staging.dest.is_local or not fork_allowed():
        return len(names)
    sizes = []
    for name in names:
        size = 0
        for src in found.get(name, []):
            if not src.location.is_local:
                return len(names)
            size += sum(src.location.size(rel) or 0 for rel in [*files_to_read(src, merged_only), *src.arena_files])
        sizes.append(size)
    total = sum(sizes)
    if total < SPLIT_BYTES:
        return len(names)
    running = 0
    for index, size in enumerate(sizes):
        running += size
        if running * 2 >= total:
            return min(index + 1, len(names) - 1)
    return len(names)


class _LogLines(logging.Handler):
    """evalfleet's log lines in a forked child (whose stderr goes nowhere), for the parent to log again."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[str, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.name, record.levelno, record.getMessage()))

    @contextlib.contextmanager
    def captured(self) -> Iterator[None]:
        logger = logging.getLogger("evalfleet")
        logger.addHandler(self)
        try:
            yield
        finally:
            logger.removeHandler(self)


def work_size(runs: list[Any]) -> dict[str, int]:
    """How many record files and episodes the Runs came from (is the work long enough to report on?)."""
    return {"files": sum(len(src.record_files) for run in runs for src in run.sources),
            "episodes": sum(run.episodes if isinstance(run, RunDigest) else len(run.records) for run in runs)}


# --- collect -----------------------------------------------------------------------------------------

@dataclass
class Collected:
    """What collect wrote, with the digests of the Runs it read (so a report or plot need not read them again)."""

    result: dict[str, Any]  # experiment_result.json's content
    runs: list[RunDigest]
    dest: Location
    tables: bool = False  # the report's episode tables are written (report_episodes)


def collect(sources: list[str], output: str, *, endpoint_url: str | None = None,
            report: bool = False) -> dict[str, Any]:
    """Merge `sources` (folders or URLs) into `output` (a folder or URL) and return experiment_result.json's
    content. With `report=True` also writes `index.html` there. Raises UserError on bad input, before writing."""
    return collect_runs(sources, output, endpoint_url=endpoint_url, report=report).result


def collect_runs(sources: list[str], output: str, *, endpoint_url: str | None = None,
                 report: bool = False, tables: bool = False) -> Collected:
    """`collect`, returning the Runs it read as well; `tables`: write the report's episode tables even without
    the report (`write_collected_report` will write it). A local output whose lock another process holds (a run
    writing it: outputs/output_lock.py) is refused, exit 2; it is held while collect writes there."""
    if not sources:
        raise UserError("give at least one source folder or URL", where="command line")
    if endpoint_url:
        check_endpoint(endpoint_url, where="command line", key="--s3-endpoint")
    urls = ", ".join(mask_url(t) for t in [*sources, output] if is_url(t)) or mask_url(output)
    # A local output another run is writing is refused; SIGTERM ends the collect like Ctrl-C: staging removed.
    with storage_errors(urls):
        with (contextlib.nullcontext() if is_url(output) else writing(output)), sigterm_interrupts():
            return _collect(sources, output, endpoint_url=endpoint_url, report=report, tables=tables or report)


def _collect(sources: list[str], output: str, *, endpoint_url: str | None, report: bool,
             tables: bool) -> Collected:
    watch = Stopwatch()
    dest = open_location(output, endpoint_url=endpoint_url, role="output")
    locations = []
    for src in sources:
        loc = open_location(src, endpoint_url=endpoint_url, role="source")
        if not loc.exists():
            raise UserError("source does not exist", where=loc.display())
        if not loc.isdir():
            raise UserError("source must be a folder (or bucket prefix) holding Run folders", where=loc.display())
        locations.append(loc)
    if dest.exists() and not dest.isdir():
        raise UserError("output exists and is not a folder", where=dest.display())

    experiment_bytes, experiment_loc, named = read_experiment(locations)
    found = find_sources(locations)
    if not found:
        raise UserError(f"no Runs found (looked for <run>/{RECORDS_FILE}, <run>/{PARTS_DIR}/*.jsonl or "
                        f"<run>/{STATUS_FILE} up to {MAX_DEPTH} levels down)",
                        where=", ".join(loc.display() for loc in locations))
    names = in_experiment_order([*found, *(str(n) for n in named if n not in found)], [str(n) for n in named])
    if is_long(files=sum(len(src.record_files) for srcs in found.values() for src in srcs)):
        log.info("collecting %d Runs from %d source(s) into %s", len(names), len(locations), dest.display())
    with Staging(dest) as staging:  # nothing reaches the output before every Run has been read
        runs = stream_runs(names, found, staging, plan=planned_episodes(named), tables=tables)
        outcomes = OutcomeRecords(runs)  # each Run's outcomes by episode, made from its digest when asked for
        result = build_result([r.summary for r in runs],
                              provenance(experiment_bytes, sources=[_safe_url(s) for s in sources]),
                              skipped=skipped_files(locations), records=outcomes,
                              protocols={r.name: r.protocol for r in runs if r.protocol},
                              failure_facts={r.name: r.failure_facts for r in runs},
                              verification=read_verification(dest))
        result = add_stopping(result, named, outcomes)  # sequential decisions
        staging.commit()
    for run in runs:
        _write_run(run, dest)
    if experiment_loc is not None and not experiment_loc.same_place(dest):
        dest.write_bytes(EXPERIMENT_FILE, experiment_bytes, mode=experiment_loc.copy_mode(EXPERIMENT_FILE))
    for loc in locations:
        if not loc.same_place(dest) and loc.isdir(PLOTS_DIR):
            for rel in loc.walk_files(PLOTS_DIR):
                _copy_if_changed(loc, rel, dest, rel)
    result.update(collect_facts(locations, runs, dest, collect_s=watch.seconds()))  # metadata, manifest, timings
    # with what copying the videos and plots found, and the facts' files that were not JSON (or too deep)
    result["skipped_files"] = skipped_files(locations)
    dest.write_bytes(RESULT_FILE, (json.dumps(finite_json(result), indent=2, sort_keys=False, allow_nan=False)
                                   + "\n").encode())
    collected = Collected(result, runs, dest, tables=tables)
    if report:
        write_collected_report(collected)
    return collected


def _never_started(name: str, planned: int | None) -> RunData:
    """A Run the Experiment names that left nothing at all (its task never started, or its output was lost):
    failed, with the reason, so every Run of the Experiment has an execution status."""
    status = {"state": "failed", "run": name, "reason": "never started: no output from this Run's runner task "
              "(it was not scheduled, or failed before writing anything)", "planned_episodes": planned}
    return RunData(name=name, sources=[], records=[], lines=[], status=status)


def write_collected_report(collected: Collected, title: str | None = None) -> str:
    """index.html beside a collect's result, from the Runs it read; its location. The episode tables are the
    ones collect wrote (`collect_runs(tables=True)`), else made here from each Run's merged file, one at a time."""
    dest = collected.dest
    if not collected.tables:
        for index, run in enumerate(collected.runs):
            if run.episodes:
                records = run.records
                plots = TrajectoryPlots(index, run.name, [(dest, run.name)], dest.write_bytes).write_all(records)
                dest.write_bytes(script_path(index), episode_script(index, run.name, records, plots))
        collected.tables = True
    images = (".png", ".svg", ".jpg", ".jpeg")
    plots = sorted(rel for rel in dest.walk_files(PLOTS_DIR) if rel.lower().endswith(images)) \
        if dest.isdir(PLOTS_DIR) else []
    if is_long(**work_size(collected.runs)):
        log.info("writing %s", dest.display(REPORT_FILE))
    page = render_report(collected.result, collected.runs, plots=plots,
                         title=title or f"evalfleet report: {location_name(dest)}")
    dest.write_bytes(REPORT_FILE, page.encode("utf-8"))
    return dest.display(REPORT_FILE)


def read_verification(loc: Location) -> dict[str, Any] | None:
    """The folder's verify.json (`evalfleet verify`), None when it has none or it is not one: kept in `trust` by a
    collect that rebuilds experiment_result.json."""
    from evalfleet.bounded_json import loads

    try:
        doc = loads(loc.read_bytes(VERIFY_FILE).decode("utf-8")) if loc.is_file(VERIFY_FILE) else None
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("schema") == "evalfleet.verify/1" else None


def _write_run(run: RunDigest, dest: Location) -> None:
    """What a Run folder holds besides its merged records (staged and moved in before): its videos,
    run_status.json and protocol.json."""
    for src in run.sources:
        for n in src.loose_videos:  # Arena's videos beside its records land in <run>/videos/
            _copy_if_changed(src.location, join(src.rel, n), dest, join(run.name, VIDEOS_DIR, n))
    in_place = bool(run.sources) and all(src.location.same_place(dest) and src.rel == run.name
                                         for src in run.sources)
    if in_place:
        return
    if run.status is not None:
        dest.write_bytes(join(run.name, STATUS_FILE), (json.dumps(run.status, indent=2) + "\n").encode())
    if run.protocol is not None:
        dest.write_bytes(join(run.name, PROTOCOL_FILE), (json.dumps(run.protocol, indent=2) + "\n").encode())
    for src in run.sources:
        if src.location.same_place(dest) and src.rel == run.name:
            continue
        for folder in [VIDEOS_DIR] * src.has_videos + [TRAJECTORIES_DIR] * src.has_trajectories:
            for rel in src.location.walk_files(join(src.rel, folder)):
                if not rel.rsplit("/", 1)[-1].startswith("."):  # a runner's file being written (.tmp-...)
                    _copy_if_changed(src.location, rel, dest, join(run.name, rel[len(src.rel):] if src.rel else rel))


def _copy_if_changed(src: Location, rel_src: str, dest: Location, rel_dst: str) -> None:
    size = src.size(rel_src)
    if size is not None and dest.size(rel_dst) == size:
        return  # already there (re-collect): videos and plots are written once
    dest.copy_from(src, rel_src, rel_dst)


def _safe_url(url: str) -> str:
    # Never record credentials embedded in a URL (scheme://user:secret@host/...): the one rule, secrets.mask_url.
    return mask_url(url)
