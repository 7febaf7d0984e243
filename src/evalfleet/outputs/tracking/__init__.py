"""Experiment trackers as optional sinks (W&B, MLflow, TensorBoard, trackio): a run's results logged where
researchers look, offline modes included, never failing or blocking the run (delivery.py)."""

from evalfleet.outputs.tracking.delivery import TRACKING_DIR, log_to_trackers
from evalfleet.outputs.tracking.sinks import INSTALL_HINT, SINKS, check_tracking

__all__ = ["INSTALL_HINT", "SINKS", "TRACKING_DIR", "check_tracking", "log_to_trackers"]
