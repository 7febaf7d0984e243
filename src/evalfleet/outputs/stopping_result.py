"""Sequential stopping in experiment_result.json (issue #25): the `comparisons` list and each stopping Run's
`stopping` entry, computed from the folder's experiment.yaml (whose Runs carry their resolved rules) and the
records that count, so `evalfleet collect` of a folder gives what the run gave."""

from __future__ import annotations

import copy
from typing import Any

from pydantic import ValidationError

from evalfleet.analysis.stopping import comparison_entry, decided_outcomes, rules_of, run_entry, state
from evalfleet.experiment.schema import Experiment

def add_stopping(result: dict[str, Any], named: dict[str, Any],
                 records: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """`result` with `comparisons` and `runs.<run>.stopping` added when any Run of the Experiment stops
    sequentially; unchanged otherwise (also when the document is not a valid resolved Experiment)."""
    experiment = _experiment(named)
    if experiment is None or not any(r.stopping is not None for r in experiment.runs.values()):
        return result
    try:
        rules, pairs = rules_of(experiment)
    except Exception:  # noqa: BLE001 - a folder's rules that no longer hold (an edited file) add nothing
        return result
    outcomes = {name: decided_outcomes(records.get(name, []), run.max_attempts)
                for name, run in experiment.runs.items() if run.stopping is not None}
    current = state(rules, pairs, outcomes)
    out = copy.copy(result)
    caps = {name: run.stopping.max_episodes for name, run in experiment.runs.items() if run.stopping is not None}
    out["runs"] = {name: ({**entry, "stopping": {**run_entry(current.runs[name]), "max_episodes": caps[name]}}
                          if name in current.runs else entry)
                   for name, entry in result.get("runs", {}).items()}
    out["comparisons"] = [comparison_entry(p) for p in current.pairs]
    savings = stopping_savings(out["runs"])
    if savings is not None:
        out["stopping_savings"] = savings
    return out


def stopping_savings(runs: dict[str, Any]) -> dict[str, Any] | None:
    """What sequential stopping saved against the fixed-N plan (every stopping Run at its cap), in what users pay
    (issue #57): episodes (counted), runner-seconds (the episodes' own durations; the fixed-N plan's estimated as
    each stopping Run's mean episode duration times its cap) and wall seconds (the span of the episodes'
    timestamps; the fixed-N plan's estimated as that span scaled by the runner-seconds, i.e. as many workers as
    busy). None when no Run stopped sequentially or the durations are unknown."""
    used = planned = 0
    seconds = seconds_fixed = 0.0
    starts, ends = [], []
    for entry in runs.values():
        timings = entry.get("timings") if isinstance(entry.get("timings"), dict) else {}
        total, mean = timings.get("total_duration_s"), timings.get("mean_duration_s")
        stopping = entry.get("stopping") if isinstance(entry.get("stopping"), dict) else None
        recorded = entry.get("episodes_recorded") or 0
        if not all(isinstance(x, (int, float)) for x in (total, mean, recorded)):
            return None
        cap = stopping.get("max_episodes") if stopping else None
        cap = cap if isinstance(cap, int) and cap >= recorded else recorded
        used, planned = used + recorded, planned + cap
        seconds += total
        seconds_fixed += mean * cap if stopping else total
        if isinstance(timings.get("first_timestamp"), (int, float)) and isinstance(timings.get("last_timestamp"),
                                                                                   (int, float)):
            starts.append(timings["first_timestamp"])
            ends.append(timings["last_timestamp"])
    if not any(isinstance(e.get("stopping"), dict) for e in runs.values()) or not planned or seconds <= 0:
        return None
    wall = max(ends) - min(starts) if starts else None
    return {
        "episodes": {"used": used, "fixed_n": planned, "saved": planned - used, "ratio": round(used / planned, 3)},
        "runner_seconds": {"used": round(seconds, 1), "fixed_n_estimate": round(seconds_fixed, 1),
                           "ratio": round(seconds / seconds_fixed, 3) if seconds_fixed else None},
        "wall_seconds": None if wall is None else {
            "used": round(wall, 1), "fixed_n_estimate": round(wall * seconds_fixed / seconds, 1),
            "ratio": round(seconds / seconds_fixed, 3) if seconds_fixed else None},
        "method": "counted episodes; runner-seconds are the episodes' durations, the fixed-N plan's estimated from "
                  "each stopping Run's mean episode duration times its cap; wall seconds are the span of the "
                  "episodes' timestamps, the fixed-N plan's scaled by the runner-seconds (as many workers busy)",
    }


def _experiment(named: dict[str, Any]) -> Experiment | None:
    """The Runs of experiment.yaml (`run_folder.experiment_document`: `shared` already merged in) as typed Runs."""
    if not all(isinstance(run, dict) for run in named.values()):
        return None
    try:
        return Experiment.model_validate({"runs": named})
    except (ValidationError, ValueError, TypeError):
        return None
