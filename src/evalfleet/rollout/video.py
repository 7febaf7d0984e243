"""Episode videos: one mp4 per recorded episode and camera, under `<run>/videos/<camera>/`.

A Run's `recording: {video: true, cameras: [...], every_n_episodes: k, fps, width, height, every_step,
mesh_tolerance_px}`
records the episodes whose plan index is a multiple of k (episode 0, k, 2k, ...), so which episodes have
a video does not depend on sharding or retries.

Which frames: a video plays in real time at `fps` (default 20), so it needs only the states at
0, 1/fps, 2/fps, ... seconds of simulated time. When the environment declares its control rate
(`control_hz`: Meta-World 80 Hz), frame k shows the first state at or after k/fps (`FrameClock`), and
only those states are rendered: an episode of L steps has floor(L * fps / control_hz) + 1 frames
(the first observation included). Rendering is most of recording's cost, so this is what keeps it
cheap. `every_step: true` (or an `fps` at or above the control rate, or an environment that does not
declare one) renders the first observation and the state after every step, `L + 1` frames, played at
the control rate where it is known (at `fps` otherwise).

Frames come from the environment's `render_video(camera, height, width, mesh_tolerance_px)` where it has
one (the MuJoCo adapters: meshes simplified so no vertex moves more than `mesh_tolerance_px`, default 1
pixel, see sim/mesh_detail.py; 0 draws them whole), else its `render(camera, height, width)` (a renderer
is made on first use, so only an episode that records creates one, and the env keeps it for the next), or from the
observation's own `observation/images/<camera>` when the Run renders that camera at the recording size
anyway. Encoded in this process with PyAV (FFmpeg's libraries, libx264 included, ship in its wheels):
no ffmpeg process per video, one encoder thread (a worker already has a core of its own), x264's
`veryfast` preset (a fraction of the default preset's CPU for these small frames) with its macroblock tree off
(the one part of x264 that is not deterministic: see X264_PARAMS). H.264 wants sizes
that are multiples of 16, so other sizes are scaled to the next multiple of 16 (choose width/height as
multiples of 16 to keep them exact).
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from evalfleet.layout import VIDEOS_DIR
from evalfleet.sim.base import with_defaults

DEFAULT_SIZE = 224
MACRO_BLOCK = 16
X264_PRESET = "veryfast"
# x264's macroblock tree is not deterministic even on one thread: the same frames encoded 300 times gave 3 to 9
# different bitstreams (decoded pixels off by up to 42 levels), with it off none in 800. A recorded trajectory
# must be the same however its Experiment ran (issue #54), so it is off; CRF keeps the quality.
X264_PARAMS = "mbtree=0"


def video_relpath(camera: str, episode: int) -> str:
    return f"{VIDEOS_DIR}/{camera}/episode_{episode:06d}.mp4"


def should_record(recording: Any, episode: int) -> bool:
    return bool(recording is not None and recording.video and recording.cameras) and (
        episode % int(recording.every_n_episodes) == 0
    )


class FrameClock:
    """Which states of an episode a video at `fps` shows, for an environment stepping at `control_hz`
    (None: unknown). Step 0 is the first observation; step s the state after the s-th step."""

    def __init__(self, fps: float, control_hz: float | None = None, every_step: bool = False):
        hz = Fraction(control_hz).limit_denominator(1000) if control_hz else None
        rate = Fraction(fps).limit_denominator(1000)
        self.every_step = every_step or hz is None or rate >= hz
        # frames per control step (< 1 when frames are sampled)
        self._ratio = Fraction(1) if self.every_step else rate / hz
        self.playback_fps = float(hz) if (self.every_step and hz is not None) else float(rate)

    def wants(self, step: int) -> bool:
        """True when the state after `step` steps is one of the video's frames."""
        if self.every_step or step == 0:
            return True
        return int(step * self._ratio) > int((step - 1) * self._ratio)

    def frames(self, episode_length: int) -> int:
        """How many frames the video of an episode of `episode_length` steps has."""
        return int(episode_length * self._ratio) + 1


def padded(size: int) -> int:
    """The encoded size of a frame side: the next multiple of the macro block."""
    return -(-int(size) // MACRO_BLOCK) * MACRO_BLOCK


class Mp4Writer:
    """One H.264 mp4 file, written frame by frame (uint8 H×W×3 RGB) at a constant frame rate."""

    def __init__(self, path: str | Path, width: int, height: int, fps: float):
        import av

        self._av = av
        # Through a Python file: a write that fails (a full disk) is an OSError raised here, where FFmpeg's own
        # file writer, failing inside libavformat, can leave the container in a state whose close crashes the
        # process (seen as SIGSEGV on a full disk while recording).
        self._file = open(path, "wb")  # closed in close(), after the container
        try:
            self._container = av.open(self._file, mode="w", format="mp4")
        except BaseException:
            self._file.close()
            raise
        try:
            rate = Fraction(fps).limit_denominator(1000)
            self._stream = self._container.add_stream("libx264", rate=rate)
            self._stream.width, self._stream.height = padded(width), padded(height)
            self._stream.pix_fmt = "yuv420p"
            self._stream.codec_context.thread_count = 1
            self._stream.options = {"preset": X264_PRESET, "x264-params": X264_PARAMS}
        except BaseException:
            self._container.close()
            self._file.close()
            raise
        self.frames = 0

    def append(self, frame: np.ndarray) -> None:
        picture = self._av.VideoFrame.from_ndarray(np.ascontiguousarray(frame, dtype=np.uint8), format="rgb24")
        picture.pts = self.frames  # in frames: the stream's time base is 1/fps
        self._container.mux(self._stream.encode(picture))
        self.frames += 1

    def close(self) -> None:
        try:
            self._container.mux(self._stream.encode(None))  # flush the encoder's delayed frames
        finally:
            try:
                self._container.close()
            finally:
                self._file.close()


class EpisodeVideo:
    """Streams one episode's frames of several cameras into mp4 files (written as they come)."""

    def __init__(self, run_dir: str | Path, episode: int, recording: Any, control_hz: float | None = None):
        self.cameras = list(recording.cameras)
        self.width = int(recording.width or DEFAULT_SIZE)
        self.height = int(recording.height or recording.width or DEFAULT_SIZE)
        self.paths = {cam: video_relpath(cam, episode) for cam in self.cameras}
        self.clock = FrameClock(recording.fps, control_hz, bool(getattr(recording, "every_step", False)))
        self.mesh_tolerance_px = float(getattr(recording, "mesh_tolerance_px", 0.0) or 0.0)
        self._writers: dict[str, Mp4Writer] = {}
        try:
            for cam, rel in self.paths.items():
                path = Path(run_dir) / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                self._writers[cam] = Mp4Writer(path, self.width, self.height, self.clock.playback_fps)
        except BaseException:
            self.close()
            raise
        self.steps = -1  # the first add() is the first observation (step 0)
        self.frames = 0

    def add(self, env: Any, observation: dict[str, Any] | None = None) -> None:
        """One more state of the episode (the first observation, then one call per step); rendered and
        appended only when the video shows it. A frame the observation already holds at the recording
        size (`observation/images/<camera>`, rendered for a camera policy) is reused."""
        self.steps += 1
        if not self.clock.wants(self.steps):
            return
        for cam, writer in self._writers.items():
            frame = (observation or {}).get(f"observation/images/{cam}")
            if frame is None or np.shape(frame)[:2] != (self.height, self.width):
                frame = self._render(env, cam)
            writer.append(frame)
        self.frames += 1

    def _render(self, env: Any, camera: str) -> np.ndarray:
        """A frame drawn for the video: meshes simplified to the recording's tolerance where the
        environment offers it (`render_video`), else its plain `render`."""
        if self.mesh_tolerance_px > 0:
            return with_defaults(env).render_video(camera, self.height, self.width, self.mesh_tolerance_px)
        return env.render(camera, self.height, self.width)

    def close(self) -> dict[str, str]:
        writers, self._writers = self._writers, {}
        error = None
        for writer in writers.values():
            try:
                writer.close()
            except Exception as exc:  # noqa: BLE001 - close every file, then report the first failure
                error = error or exc
        if error is not None:
            raise error
        return dict(self.paths)
