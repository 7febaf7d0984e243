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
    return out


def _experiment(named: dict[str, Any]) -> Experiment | None:
    """The Runs of experiment.yaml (`run_folder.experiment_document`: `shared` already merged in) as typed Runs."""
    if not all(isinstance(run, dict) for run in named.values()):
        return None
    try:
        return Experiment.model_validate({"runs": named})
    except (ValidationError, ValueError, TypeError):
        return None
