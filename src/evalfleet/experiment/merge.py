"""The one merge rule of an Experiment document: `shared` merged deeply into every Run, the Run's own values
winning key by key (a Run that sets `stopping.max_episodes` keeps `shared`'s `stopping.wave`). The loader and
every reader of an output folder's experiment.yaml (collect, the live report, analysis) merge with it."""

from __future__ import annotations

import copy
from typing import Any


def deep_merge(low: Any, high: Any) -> Any:
    """`high` over `low`: mappings merge key by key, anything else is replaced; a copy, neither input changed."""
    if isinstance(low, dict) and isinstance(high, dict):
        out = dict(low)
        for k, v in high.items():
            out[k] = deep_merge(low[k], v) if k in low else copy.deepcopy(v)
        return out
    return copy.deepcopy(high)


def runs_with_shared(runs: dict[str, Any], shared: dict[str, Any] | None) -> dict[str, Any]:
    """Every Run with `shared` merged in (a Run that is not a mapping is kept as it is, for its reader to refuse)."""
    return {name: deep_merge(shared or {}, run) if isinstance(run, dict) else run for name, run in runs.items()}
