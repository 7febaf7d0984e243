"""trackio: the point logged to trackio's local store (TRACKIO_DIR; set HF_HUB_OFFLINE=1 to keep the Hub
away), one trackio run per tracker run, resumed across calls; videos as trackio media. System metrics
logging is off (a finished run has none to give)."""

from __future__ import annotations

from typing import Any

from evalfleet.experiment.tracking import TrackioOptions
from evalfleet.outputs.tracking.payload import Point
from evalfleet.outputs.tracking.sinks import SinkContext


def log_point(options: TrackioOptions, point: Point, context: SinkContext) -> None:
    import trackio

    trackio.init(project=options.project, name=context.tracker_run, resume="allow", config=point.config,
                 auto_log_cpu=False, auto_log_gpu=False)
    try:
        media: dict[str, Any] = {}
        for name, videos in point.videos.items():
            for i, path in enumerate(videos):
                media[f"{name}/video_{i}"] = trackio.Video(str(path), format="mp4")
        trackio.log({**point.metrics, **media}, step=point.step)
    finally:
        trackio.finish()
