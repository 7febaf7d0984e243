"""TensorBoard event files written with tensorboardX under `logdir/<tracker run>` (default logdir:
OUT/tracking/tensorboard): every metric a scalar at the point's step, the config as text. Local files
only; TensorBoard's own `EventAccumulator` reads them back. Videos stay files (TensorBoard has no mp4 view)."""

from __future__ import annotations

import json
from pathlib import Path

from evalfleet.experiment.tracking import TensorboardOptions
from evalfleet.outputs.tracking.payload import Point
from evalfleet.outputs.tracking.sinks import SinkContext


def log_point(options: TensorboardOptions, point: Point, context: SinkContext) -> None:
    from tensorboardX import SummaryWriter

    logdir = Path(options.logdir) if options.logdir else context.folder / "tensorboard"
    writer = SummaryWriter(logdir=str(logdir / context.tracker_run))
    try:
        for key, value in point.metrics.items():
            writer.add_scalar(key, value, global_step=point.step)
        writer.add_text("evalfleet/config", "```\n" + json.dumps(point.config, indent=1) + "\n```",
                        global_step=point.step)
    finally:
        writer.close()
