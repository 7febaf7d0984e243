"""An output's facts beside its records, read by collect from evalfleet's files or Isaac Lab Arena's: the
metadata (experiment_metadata.json | arena_experiment_metadata.json), the manifest (experiment_manifest.json,
either schema) and the timings, merged into one timings.json (evalfleet's `<run>/timings/*.json` shard files,
else Arena's per-Run `arena_experiment_timings.json`, else a root timings file of either format; the run
process's own phases from `.evalfleet/timings-run.json`, and collect's own).

Arena's shapes (isaaclab_arena/evaluation/arena_experiment_metadata.py, experiment_manifest.py,
experiment_timings.py and utils/timer.py): a per-Run timings file is a list of timers `{type, name, app_name,
count, mean_ms, total_ms, min_ms, max_ms, p10_ms, p50_ms, p90_ms}`; the root one `{totals, runs: [{run_name,
...timer}]}`. A file that is not JSON is skipped and listed (`Location.skipped`), never a failure.
"""

from __future__ import annotations

import json
import time
from typing import Any

from evalfleet import bounded_json
from evalfleet.layout import (ARENA_METADATA_FILE, ARENA_TIMINGS_FILE, INTERNAL_DIR, MANIFEST_FILE, METADATA_FILE,
                              RUN_TIMINGS_DIR, RUN_TIMINGS_FILE, TIMINGS_FILE)
from evalfleet.outputs.storage import Location
from evalfleet.rollout.run_folder import join
from evalfleet.rollout.timings import merge_phases

TIMINGS_SCHEMA = "evalfleet.timings/1"


def _read_json(loc: Location, rel: str) -> Any:
    if not loc.is_file(rel):
        return None
    try:
        return bounded_json.loads(loc.read_bytes(rel))
    except (ValueError, UnicodeDecodeError) as exc:
        loc.skipped[rel] = f"not valid JSON ({exc})"
        return None


def read_document(locations: list[Location], names: tuple[str, ...]) -> dict[str, Any] | None:
    """The first source's file of these names that is a JSON object: {"file", "format", "document"}."""
    for loc in locations:
        for name in names:
            doc = _read_json(loc, name)
            if isinstance(doc, dict):
                fmt = "arena" if name.startswith("arena_") or "schema_version" in doc else "evalfleet"
                return {"file": loc.display(name), "name": name, "format": fmt, "document": doc, "_loc": loc}
    return None


def read_metadata(locations: list[Location]) -> dict[str, Any] | None:
    return read_document(locations, (METADATA_FILE, ARENA_METADATA_FILE))


def read_manifest(locations: list[Location]) -> dict[str, Any] | None:
    return read_document(locations, (MANIFEST_FILE,))


def _arena_timers(doc: Any) -> dict[str, Any]:
    """Arena's list of timers as evalfleet's `phases`."""
    if not isinstance(doc, list):
        return {}
    return {str(t["name"]): t for t in doc if isinstance(t, dict) and isinstance(t.get("name"), str)}


def run_timings(sources: list[tuple[Location, str]]) -> tuple[dict[str, Any], str, list[str]] | None:
    """One Run's merged phases from its folders [(location, rel)]: (phases, format, hosts), or None."""
    docs, hosts, fmt = [], [], "evalfleet"
    for loc, rel in sources:
        folder = join(rel, RUN_TIMINGS_DIR)
        if loc.isdir(folder):
            for name in sorted(loc.walk_files(folder)):
                doc = _read_json(loc, name) if name.endswith(".json") else None
                if isinstance(doc, dict):
                    docs.append(doc)
                    hosts.append(str(doc.get("host")))
    if not docs:
        fmt = "arena"
        docs = [{"phases": _arena_timers(_read_json(loc, join(rel, ARENA_TIMINGS_FILE)))} for loc, rel in sources]
        docs = [d for d in docs if d["phases"]]
    if not docs:
        return None
    return merge_phases(docs), fmt, sorted(set(hosts))


def read_timings(locations: list[Location], runs: list[Any], *,
                 collect_s: float | None = None) -> dict[str, Any] | None:
    """timings.json's content for the collected Runs (objects with .name and .sources), or None when no source
    holds any timings."""
    per_run: dict[str, Any] = {}
    formats = set()
    for run in runs:
        found = run_timings([(src.location, src.rel) for src in run.sources])
        if found is not None:
            phases, fmt, hosts = found
            per_run[run.name] = {"phases": phases, "hosts": hosts}
            formats.add(fmt)
    if not per_run:
        per_run, fmt = _root_timings(locations)
        if fmt:
            formats.add(fmt)
    if not per_run:
        return None
    own = [doc for loc in locations if isinstance(doc := _read_json(loc, join(INTERNAL_DIR, RUN_TIMINGS_FILE)), dict)]
    if collect_s is not None:
        ms = collect_s * 1000
        own.append({"phases": {"collect": {"count": 1, "total_ms": ms, "min_ms": ms, "max_ms": ms, "samples": [ms]}}})
    experiment = merge_phases(own)
    return {"schema": TIMINGS_SCHEMA, "unit": "ms", "format": "+".join(sorted(formats)), "runs": per_run,
            "totals": merge_phases({"phases": r["phases"]} for r in per_run.values()), "experiment": experiment}


def _root_timings(locations: list[Location]) -> tuple[dict[str, Any], str | None]:
    """A root timings file: a timings.json collect wrote before, or Arena's {totals, runs: [{run_name, ...}]}."""
    for loc in locations:
        doc = _read_json(loc, TIMINGS_FILE)
        if isinstance(doc, dict) and isinstance(doc.get("runs"), dict):
            return doc["runs"], str(doc.get("format") or "evalfleet")
        doc = _read_json(loc, ARENA_TIMINGS_FILE)
        if isinstance(doc, dict) and isinstance(doc.get("runs"), list):
            by_run: dict[str, list[dict[str, Any]]] = {}
            for t in doc["runs"]:
                if isinstance(t, dict) and isinstance(t.get("run_name"), str):
                    by_run.setdefault(t["run_name"], []).append(t)
            return {name: {"phases": merge_phases([{"phases": _arena_timers(ts)}]), "hosts": []}
                    for name, ts in by_run.items()}, "arena"
    return {}, None


def collect_facts(locations: list[Location], runs: list[Any], dest: Location, *, collect_s: float) -> dict[str, Any]:
    """What experiment_result.json carries of the sources' metadata, manifest and timings; writes timings.json
    into `dest` and copies the metadata and manifest there (under their own names) when `dest` is elsewhere."""
    facts: dict[str, Any] = {}
    for key, found in (("experiment_metadata", read_metadata(locations)),
                       ("experiment_manifest", read_manifest(locations))):
        if found is None:
            continue
        loc = found.pop("_loc")
        if not loc.same_place(dest):
            dest.write_bytes(found["name"], (json.dumps(found["document"], indent=2) + "\n").encode())
        facts[key] = found
    timings = read_timings(locations, runs, collect_s=collect_s)
    if timings is not None:
        dest.write_bytes(TIMINGS_FILE, (json.dumps(timings, indent=1) + "\n").encode())
        facts["timings"] = timings
    return facts


class Stopwatch:
    """Seconds since it was made (collect's own phase)."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def seconds(self) -> float:
        return time.perf_counter() - self.t0
