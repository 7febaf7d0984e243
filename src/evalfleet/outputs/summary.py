"""Per-Run summaries and provenance for `experiment_result.json`.

A Run is *completed* when every planned episode has a decided record (success or failure), *partial* when
episodes are missing or infrastructure errors are left, and *failed* when its backend said so in
`run_status.json` (with the reason). Success rates are over decided episodes only (errors excluded) with a
95% Wilson interval, and are null, never 0, when nothing was decided.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import importlib.metadata
import math
import platform
import socket
from typing import Any, Iterable

from evalfleet import __version__
from evalfleet.analysis.stats import wilson_interval
from evalfleet.outputs.failures import add_failures
from evalfleet.outputs.floors import floors_result
from evalfleet.outputs.trust import trust_checks
from evalfleet.rollout.records import SetAside, record_episode

RESULT_SCHEMA = "evalfleet.experiment_result/1"
RUN_STATUSES = ("completed", "partial", "failed")
PROVENANCE_PACKAGES = (
    "numpy", "mujoco", "metaworld", "gymnasium", "pydantic", "PyYAML", "fsspec", "s3fs", "matplotlib",
    "scipy", "torch", "jax", "openpi-client", "ray", "playwright",
)


def success_rate(successes: int, decided: int) -> tuple[float | None, list[float] | None]:
    if decided <= 0:
        return None, None
    lo, hi = wilson_interval(successes, decided)
    return successes / decided, [lo, hi]


def criterion_met(value: Any) -> bool | None:
    """Whether one of Arena's progress criteria was met: a bool, or a map with complete/completed/met."""
    if isinstance(value, bool):
        return value
    if isinstance(value, dict):
        for key in ("complete", "completed", "is_complete", "met", "satisfied", "success"):
            if isinstance(value.get(key), bool):
                return value[key]
    return None


def progress_summary(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Mean progress of a Run's decided episodes and, for Arena-shaped progress maps, how many episodes met each
    criterion (in the order the criteria first appear: a funnel) and which fraction did. None when no record
    carries progress."""
    from evalfleet.analysis.loading import progress_score

    scores, complete, funnel, n = [], 0, {}, 0
    for rec in records:
        if rec.get("status") == "error":
            continue
        progress = rec.get("progress")
        score = progress_score(progress)
        if score is None:
            continue
        n += 1
        scores.append(score)
        if isinstance(progress, dict):
            complete += bool(progress.get("all_complete"))
            for name, value in (progress.get("criteria_by_name") or {}).items():
                funnel[str(name)] = funnel.get(str(name), 0) + bool(criterion_met(value))
    if not n:
        return None
    return {"episodes": n, "mean": sum(scores) / n, "all_complete": complete,
            "all_complete_fraction": complete / n, "criteria": funnel,
            "criteria_fraction": {name: met / n for name, met in funnel.items()}}


def summarise_run(name: str, records: list[dict[str, Any]], status: dict[str, Any] | None,
                  *, records_file: str | None = None, set_aside: SetAside | None = None) -> dict[str, Any]:
    """One Run's entry in experiment_result.json. `records` are the ones that count (records.RunRecords: one
    per planned episode); `set_aside` says how many others were found and kept out of every count."""
    status = status or {}
    set_aside = set_aside or SetAside()
    counts = {"success": 0, "failure": 0, "error": 0}
    durations: list[float] = []
    timestamps: list[float] = []
    recorded_episodes: set[int] = set()
    videos = 0
    for rec in records:
        st = rec.get("status")
        if st not in counts:
            st = "error"
        counts[st] += 1
        recorded_episodes.add(record_episode(rec))
        d = rec.get("duration_s")
        if _finite(d):
            durations.append(float(d))
        t = rec.get("timestamp")
        if _finite(t):
            timestamps.append(float(t))
        if rec.get("video"):
            videos += 1

    planned = status.get("planned_episodes")
    planned = int(planned) if isinstance(planned, (int, float)) else None
    decided = counts["success"] + counts["failure"]
    # Counted from the records, not by walking the plan: the plan comes from a run_status.json and may be huge.
    missing = None if planned is None else planned - sum(1 for e in recorded_episodes
                                                         if e is not None and 0 <= e < planned)
    state = status.get("state")
    reason = status.get("reason")
    notes = []
    if state == "failed":
        run_status = "failed"
        reason = reason or "the backend marked this Run failed without a reason"
    else:
        problems = []
        if missing:
            problems.append(f"{missing} of {planned} planned episodes not run")
        if counts["error"]:
            problems.append(f"{plural(counts['error'], 'episode')} ended in an infrastructure error "
                            "(excluded from the rate)")
        if planned is None:
            notes.append("planned episode count unknown (no run_status.json)")
            if not records:
                problems.append("no episode records")
        if problems:
            run_status = "partial"
            if state == "running":
                problems.append("the Run was still running or was interrupted")
            reason = "; ".join(problems)
        else:
            run_status = "completed"
            reason = None
    rate, ci = success_rate(counts["success"], decided)
    first = records[0] if records else {}
    summary = {
        "run": name,
        "task": status.get("task") or first.get("task"),
        "policy": status.get("policy") or first.get("policy"),
        "status": run_status,
        "reason": reason,
        "planned_episodes": planned,
        "episodes_recorded": len(records),
        "counts": {**counts, "missing": missing},
        "decided": decided,
        "success_rate": rate,
        "ci95": ci,
        "timings": {
            "total_duration_s": round(sum(durations), 6) if durations else None,
            "mean_duration_s": round(sum(durations) / len(durations), 6) if durations else None,
            "first_timestamp": min(timestamps) if timestamps else None,
            "last_timestamp": max(timestamps) if timestamps else None,
            "wall_s": round(max(timestamps) - min(timestamps), 6) if timestamps else None,
        },
        "videos": videos,
        "records_file": records_file or f"{name}/episode_results.jsonl",
        "backend_state": state,
    }
    progress = progress_summary(records)
    if progress is not None:
        summary["progress"] = progress
    head = sorted((r["episode"], r["seed"]) for r in records if isinstance(r.get("episode"), int)
                  and isinstance(r.get("seed"), int) and not isinstance(r.get("seed"), bool))[:SEEDS_HEAD]
    if head:  # a sample of the Run's seeds by episode: whether the policies on a task faced the same (outputs/trust.py)
        summary["seeds_head"] = [list(pair) for pair in head]
    at_reset = sum(1 for r in records if r.get("success_at_reset") is True)
    if at_reset:
        summary["success_at_reset"] = at_reset
        notes.append(AT_RESET_NOTE.format(episodes=plural(at_reset, "episode")))
    first_success = first_success_summary(records)
    if first_success is not None:
        summary["first_success_step"] = first_success
    clipping = clipping_summary(records)
    if clipping is not None:
        summary["clipped_actions"] = clipping
        if clipping["flagged"]:
            notes.append(CLIPPED_NOTE.format(fraction=clipping["fraction"]))
    for key in ("restarts", "reran"):  # an Arena Run's task says what a restart of Arena's runner reran
        if status.get(key):
            summary[key] = status[key]
    if set_aside.total:
        notes.append(set_aside.describe())
    summary["set_aside"] = set_aside.to_json()
    if notes:
        summary["notes"] = notes
    return summary


SEEDS_HEAD = 8
AT_RESET_NOTE = ("{episodes} already met the task's success after the first step (success at reset): left out of "
                 "the success rate as errors (success_at_reset); check the task's initial states or its success "
                 "criterion")
CLIPPED_MOSTLY = 0.5  # a Run whose actions lay outside the env's bounds on more steps than this is flagged
CLIPPED_NOTE = ("actions outside the environment's bounds on {fraction:.0%} of steps (clipped by the env): the "
                "likely fault is the action convention: a scale (raw units against a normalised range, or x10), "
                "a missing (un)normalisation, or another action space")


def clipping_summary(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """How often a Run's actions lay outside the env's declared bounds: steps clipped of steps stepped, the
    episodes with any, and `flagged` past CLIPPED_MOSTLY; None when no record counted (no bounds declared)."""
    counted = [r for r in records if isinstance(r.get("clipped_actions"), int)
               and isinstance(r.get("episode_length"), int) and not isinstance(r.get("clipped_actions"), bool)]
    if not counted:
        return None
    clipped = sum(r["clipped_actions"] for r in counted)
    steps = sum(max(0, r["episode_length"]) for r in counted)
    fraction = clipped / steps if steps else 0.0
    return {"steps_clipped": clipped, "steps": steps, "fraction": round(fraction, 6),
            "episodes_clipped": sum(1 for r in counted if r["clipped_actions"] > 0), "episodes": len(counted),
            "flagged": fraction > CLIPPED_MOSTLY}


def first_success_summary(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The step at which the env first reported success, over the episodes where it did (records'
    `first_success_step`): its quartiles, beside how many of those episodes then succeeded (with
    `success.hold_steps` a success must hold; a flickering one does not count). None when no record has one."""
    import statistics

    seen = [r for r in records if isinstance(r.get("first_success_step"), int)
            and not isinstance(r.get("first_success_step"), bool)]
    if not seen:
        return None
    steps = sorted(r["first_success_step"] for r in seen)
    q1, median, q3 = statistics.quantiles(steps, n=4, method="inclusive") if len(steps) > 1 else (steps[0],) * 3
    return {"episodes": len(seen), "succeeded": sum(1 for r in seen if r.get("status") == "success"),
            "median": median, "q1": q1, "q3": q3, "min": steps[0], "max": steps[-1]}


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def task_policy_matrix(runs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Pooled counts per (task, policy) over the Runs that evaluate that pair."""
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for r in runs:
        key = (str(r.get("task")), str(r.get("policy")))
        cell = cells.setdefault(key, {"task": key[0], "policy": key[1], "runs": [], "success": 0, "decided": 0,
                                      "statuses": []})
        cell["runs"].append(r["run"])
        cell["success"] += r["counts"]["success"]
        cell["decided"] += r["decided"]
        cell["statuses"].append(r["status"])
    out = []
    for key in sorted(cells):
        cell = cells[key]
        cell["success_rate"], cell["ci95"] = success_rate(cell["success"], cell["decided"])
        cell["status"] = ("failed" if all(s == "failed" for s in cell["statuses"])
                          else "completed" if all(s == "completed" for s in cell["statuses"]) else "partial")
        del cell["statuses"]
        out.append(cell)
    return {
        "tasks": sorted({k[0] for k in cells}),
        "policies": sorted({k[1] for k in cells}),
        "cells": out,
    }


def package_versions(names: Iterable[str] = PROVENANCE_PACKAGES) -> dict[str, str]:
    return dict(_versions(tuple(names)))


@functools.lru_cache(maxsize=8)  # reading the packages' metadata costs ~40 ms; `Preload` reads it during the run
def _versions(names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return tuple(versions.items())


def provenance(experiment_yaml: bytes | None, *, sources: list[str] | None = None) -> dict[str, Any]:
    return {
        "evalfleet_version": __version__,
        "experiment_sha256": hashlib.sha256(experiment_yaml).hexdigest() if experiment_yaml is not None else None,
        "packages": package_versions(),
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "sources": list(sources or []),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def build_result(runs: list[dict[str, Any]], prov: dict[str, Any], *,
                 skipped: list[dict[str, str]] | None = None,
                 records: dict[str, list[dict[str, Any]]] | None = None,
                 protocols: dict[str, dict[str, Any]] | None = None,
                 failure_facts: dict[str, tuple[dict[str, int], set[str]]] | None = None,
                 verification: dict[str, Any] | None = None) -> dict[str, Any]:
    """experiment_result.json's content. `skipped`: files the sources held that were not read (a link leading
    out of its folder, a FIFO, an experiment.yaml that is not an Experiment), as {"path", "why"}. `records`
    (Run name -> the records that count) adds `ranking` when two or more policies share a task, and the failure
    roll-up (`outputs.failures`: each Run's `failures` and `protocol`, `failures_by_policy`, `failure_codes`,
    kinds and descriptions from `protocols`, Run name -> its protocol.json); `failure_facts` (Run name ->
    `failures.run_failure_facts`) stands in for the records there, `records` then need only episode and status."""
    failures = add_failures(runs, records or {}, protocols, facts=failure_facts)
    by_status = {s: 0 for s in RUN_STATUSES}
    totals = {"success": 0, "failure": 0, "error": 0, "missing": 0, "recorded": 0, "set_aside": 0}
    for r in runs:
        by_status[r["status"]] += 1
        for k in ("success", "failure", "error"):
            totals[k] += r["counts"][k]
        totals["missing"] += r["counts"]["missing"] or 0
        totals["recorded"] += r["episodes_recorded"]
        totals["set_aside"] += (r.get("set_aside") or {}).get("total", 0)
    return {
        "schema": RESULT_SCHEMA,
        "provenance": prov,
        "summary": {"runs": len(runs), "runs_by_status": by_status, "episodes": totals},
        "runs": {r["run"]: r for r in runs},
        "matrix": task_policy_matrix(runs),
        "skipped_files": list(skipped or []),
        **failures,
        **({"ranking": ranking} if (ranking := policy_ranking(runs, records or {})) else {}),
        **({"floors": floors} if (floors := floors_result(runs, records or {})) else {}),
        "trust": trust_checks(runs, floors, verification),
    }


def policy_ranking(runs: list[dict[str, Any]], records: dict[str, list[dict[str, Any]]]) -> dict[str, Any] | None:
    """`analysis.ranking`'s ranking of the Runs' policies, or None unless two or more policies share a task."""
    from evalfleet.analysis.ranking import outcomes_from_records, rank_policies, ranking_note

    if not records:
        return None
    outcomes, notes = outcomes_from_records([(r.get("task"), r.get("policy"), records.get(r["run"], []))
                                             for r in runs])
    policies = list(dict.fromkeys(p for _, p in outcomes))
    if not any(len({p for t2, p in outcomes if t2 == t}) > 1 for t, _ in outcomes):
        return None
    ranking = rank_policies(outcomes, policies)
    if not ranking["policies"]:
        return None
    if notes:
        ranking["notes"] = notes + ranking["notes"]
        ranking["note"] = ranking_note(ranking["notes"])
    return ranking


def _finite(value: Any) -> bool:
    """A number a sum can take (a record's NaN or infinity, which JSON readers refuse, is not one)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def finite_json(value: Any) -> Any:
    """`value` with every NaN and infinity replaced by None: what experiment_result.json holds is JSON that any
    reader takes (Python writes NaN by default, which JSON does not have)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value
