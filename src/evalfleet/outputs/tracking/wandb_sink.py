"""Weights & Biases: one W&B run per tracker run (its id made from the name, resumed across calls, so the
training steps form a curve); offline (`mode: offline` or WANDB_MODE=offline) writes run files under `dir`
(default OUT/tracking/wandb) for `wandb sync`. Every wait is bounded by the sink's timeout; W&B's console
capture is off, and its API key is read by W&B from its own settings, never by evalfleet."""

from __future__ import annotations

import re
from typing import Any

from evalfleet.experiment.tracking import WandbOptions
from evalfleet.outputs.tracking.payload import Point
from evalfleet.outputs.tracking.sinks import SinkContext


def run_id(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", name)[:64]


def log_point(options: WandbOptions, point: Point, context: SinkContext) -> None:
    import wandb

    folder = options.dir or str(context.folder / "wandb")
    bound = max(1.0, context.timeout_s - 5)
    settings = wandb.Settings(console="off", silent=True, init_timeout=bound, login_timeout=bound,
                              finish_timeout=bound, x_disable_stats=True, x_disable_meta=True,
                              x_graphql_timeout_seconds=bound)
    kwargs: dict[str, Any] = {"mode": options.mode} if options.mode else {}
    run = wandb.init(project=options.project, entity=options.entity, group=options.group, tags=options.tags or None,
                     dir=_made(folder), id=run_id(context.tracker_run), name=context.tracker_run, resume="allow",
                     config=point.config, settings=settings, **kwargs)
    try:
        media: dict[str, Any] = {}
        for name, videos in point.videos.items():
            media[f"{name}/video"] = [wandb.Video(str(path), format="mp4") for path in videos]
        run.log({**point.metrics, **media}, step=point.step)
    finally:
        run.finish()


def _made(folder: str) -> str:
    from pathlib import Path

    Path(folder).mkdir(parents=True, exist_ok=True)
    return folder
