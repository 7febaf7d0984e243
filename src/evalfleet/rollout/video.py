"""Episode videos: one mp4 per recorded episode and camera, under `<run>/videos/<camera>/`.

A Run's `recording: {video: true, cameras: [...], every_n_episodes: k, fps, width, height}` records
the episodes whose plan index is a multiple of k (episode 0, k, 2k, ...), so which episodes have a
video does not depend on sharding or retries. Frames come from the environment's
`render(camera, height, width)` (or the observation's own `observation/images/<camera>` when the Run
renders that camera at the recording size anyway): the first observation and one frame after every
step, so a video has `episode_length + 1` frames. Written with imageio's ffmpeg plugin (imageio-ffmpeg ships the
ffmpeg binary); H.264 wants sizes that are multiples of 16, so other sizes are scaled to the next
multiple of 16 by ffmpeg (choose width/height as multiples of 16 to keep them exact).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

VIDEOS_DIR = "videos"
DEFAULT_SIZE = 224
MACRO_BLOCK = 16


def video_relpath(camera: str, episode: int) -> str:
    return f"{VIDEOS_DIR}/{camera}/episode_{episode:06d}.mp4"


def should_record(recording: Any, episode: int) -> bool:
    return bool(recording is not None and recording.video and recording.cameras) and (
        episode % int(recording.every_n_episodes) == 0
    )


class EpisodeVideo:
    """Streams one episode's frames of several cameras into mp4 files (written as they come)."""

    def __init__(self, run_dir: str | Path, episode: int, recording: Any):
        import imageio.v2 as imageio

        self.cameras = list(recording.cameras)
        self.width = int(recording.width or DEFAULT_SIZE)
        self.height = int(recording.height or recording.width or DEFAULT_SIZE)
        self.paths = {cam: video_relpath(cam, episode) for cam in self.cameras}
        self._writers = {}
        for cam, rel in self.paths.items():
            path = Path(run_dir) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            self._writers[cam] = imageio.get_writer(
                str(path), format="FFMPEG", mode="I", fps=int(recording.fps), codec="libx264",
                quality=7, macro_block_size=MACRO_BLOCK, ffmpeg_log_level="error",
            )
        self.frames = 0

    def add(self, env: Any, observation: dict[str, Any] | None = None) -> None:
        """Append the current frame of every camera. A frame the observation already holds at the
        recording size (`observation/images/<camera>`, rendered for a camera policy) is reused."""
        for cam, writer in self._writers.items():
            frame = (observation or {}).get(f"observation/images/{cam}")
            if frame is None or np.shape(frame)[:2] != (self.height, self.width):
                frame = env.render(cam, self.height, self.width)
            writer.append_data(np.asarray(frame, dtype=np.uint8))
        self.frames += 1

    def close(self) -> dict[str, str]:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
        return dict(self.paths)
