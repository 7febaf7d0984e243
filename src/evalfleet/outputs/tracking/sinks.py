"""The registry of tracking sinks: a name → the entry point that logs one Point, and the packages it needs.

A sink is a function `log_point(options, point, context) -> None` in a module of its own, imported only when
its sink is used; it raises on any failure (outputs/tracking/delivery turns that into one warning line)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from evalfleet.errors import UserError
from evalfleet.experiment.loading import LoadedExperiment
from evalfleet.registry import Registry

INSTALL_HINT = "pip install 'evalfleet[tracking]'"


@dataclass(frozen=True)
class SinkContext:
    """Where a sink logs: the output folder, its tracking/ folder, the tracker run, the network bound."""

    out: Path
    folder: Path  # OUT/tracking
    tracker_run: str
    timeout_s: float


SINKS: Registry[None] = Registry("tracking sink")
SINKS.add("wandb", "evalfleet.outputs.tracking.wandb_sink:log_point", summary="Weights & Biases",
          info=("wandb",))
SINKS.add("mlflow", "evalfleet.outputs.tracking.mlflow_sink:log_point", summary="MLflow (mlflow-skinny)",
          info=("mlflow", "sqlalchemy", "alembic"))
SINKS.add("tensorboard", "evalfleet.outputs.tracking.tensorboard_sink:log_point",
          summary="TensorBoard event files (tensorboardX)", info=("tensorboardX",))
SINKS.add("trackio", "evalfleet.outputs.tracking.trackio_sink:log_point", summary="trackio's local store",
          info=("trackio",))


def check_tracking(loaded: LoadedExperiment) -> None:
    """Every configured sink's packages are installed: else a UserError naming the key and the fix, before
    anything runs."""
    tracking = loaded.experiment.tracking
    if tracking is None:
        return
    for name in tracking.sinks():
        entry = SINKS.get(name)
        if entry is None:  # the schema knows only registered sinks; a plugin's sink without its entry
            raise UserError(f"unknown tracking sink {name!r}{SINKS.suggest(name)}", where=loaded.path,
                            key=f"tracking.{name}")
        missing = [module for module in entry.info if importlib.util.find_spec(module) is None]
        if missing:
            raise UserError(f"the {name} sink needs {', '.join(missing)}, which is not installed: {INSTALL_HINT}",
                            where=loaded.path, key=f"tracking.{name}")
