"""Per-step trajectories: what happened inside an episode, kept as data (issue #54).

A Run's `recording.trajectories` (experiment/schema.py: `Trajectories`) names which episodes keep their frames
(all, failures only, every n-th of the plan, or a share chosen by seed: the choice never depends on sharding or
retries) and which keys. Frame t is the LeRobot convention: the observation before step t, the action sent at
step t, and what the step gave (`next.*`):

  state             observation.state             the observation's `observation/state`
  environment_state observation.environment_state `observation/environment_state` (Gymnasium's env state)
  action            action                        the action as the policy sent it (checked: finite, its size)
  applied_action    applied_action                the same, clipped to the env's declared bounds
  reward            next.reward                   the env's reward where it gives one (NaN where not)
  success           next.success                  the success flag after the step
  done              next.done                     whether the episode ended there
  progress          next.progress                 the progress score after the step (NaN where none)

Cameras (`cameras: [top]`) are rendered at every step (the observation before it) and encoded as they come,
one mp4 per camera, played at the env's control rate.

An episode's frames stay in memory until it ends (bounded: one episode's steps, state-sized numbers in arrays
allocated for its step limit; camera frames go straight to the encoder) and are then written whole, under a
temporary name renamed into place: `<run>/trajectories/episode_NNNNNN.arrow` (an Arrow IPC file) and
`<run>/trajectories/<camera>/episode_NNNNNN.mp4`. A retried or resumed episode writes the same names again, so
exactly one trajectory is left per episode: the last attempt's, the one its record holds (the file's metadata
names the attempt and seed; collect checks them).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from evalfleet.layout import TRAJECTORIES_DIR
from evalfleet.seeding import stable_hash

FEATURES = {"state": "observation.state", "environment_state": "observation.environment_state",
            "action": "action", "applied_action": "applied_action", "reward": "next.reward",
            "success": "next.success", "done": "next.done", "progress": "next.progress"}
OBSERVATION_KEYS = {"state": "observation/state", "environment_state": "observation/environment_state"}
METADATA_KEY = b"evalfleet.trajectory"
FLAGS = {"success": np.bool_, "done": np.bool_}  # the keys stored as booleans; the others as float32


def trajectory_relpath(episode: int) -> str:
    return f"{TRAJECTORIES_DIR}/episode_{episode:06d}.arrow"


def camera_relpath(camera: str, episode: int) -> str:
    return f"{TRAJECTORIES_DIR}/{camera}/episode_{episode:06d}.mp4"


def camera_feature(camera: str) -> str:
    return f"observation.images.{camera}"


def wanted(settings: Any, episode: int, seed: int) -> bool:
    """Whether the episode may keep its trajectory (`failures` is decided again at its end)."""
    if settings is None:
        return False
    if settings.episodes == "every_n":
        return episode % int(settings.every_n) == 0
    if settings.episodes == "sample":  # by seed: the same episodes in every Experiment that shares the seeds
        return stable_hash("trajectory-sample", seed) % 1_000_000 < settings.fraction * 1_000_000
    return True


class FrameColumn:
    """One key's values, frame by frame, in a preallocated array (a row per frame; grown by doubling past the
    episode's step limit): a step writes into it, nothing is built per step."""

    def __init__(self, name: str, capacity: int, dtype: Any):
        self.name, self.capacity, self.dtype = name, max(1, capacity), dtype
        self.values: np.ndarray | None = None

    def put(self, row: int, value: Any) -> None:
        values = self.values
        if values is None:
            shape = np.shape(value)
            if len(shape) > 1:
                value = np.reshape(value, -1)
                shape = value.shape
            values = self.values = np.empty((self.capacity, *shape), dtype=self.dtype)
        elif row >= len(values):
            values = self.values = np.concatenate([values, np.empty_like(values)])
        try:
            values[row] = value
        except ValueError:
            raise ValueError(f"recording.trajectories: {self.name} changes size within the episode (step {row}: "
                             f"{np.size(value)} values, {values[0].size} before)") from None


class EpisodeTrajectory:
    """One episode's frames, gathered step by step and written at its end (module doc)."""

    def __init__(self, run_dir: str | Path, episode: int, seed: int, attempt: int, settings: Any, env: Any,
                 bounds: tuple[np.ndarray, np.ndarray] | None):
        self.run_dir, self.episode, self.seed, self.attempt = Path(run_dir), episode, seed, attempt
        self.instruction = str(getattr(env, "instruction", "") or "")
        control_hz = getattr(env, "control_hz", None)
        self.keys = list(settings.keys)
        self.keep_failures_only = settings.episodes == "failures"
        self.bounds = bounds
        self.fps = float(control_hz) if control_hz else float(settings.fps)
        capacity = int(getattr(env, "max_steps", 0) or 0)
        self.columns = {FEATURES[k]: FrameColumn(FEATURES[k], capacity, FLAGS.get(k, np.float32))
                        for k in self.keys}
        self._observed = [(OBSERVATION_KEYS[k], self.columns[FEATURES[k]]) for k in self.keys if k in OBSERVATION_KEYS]
        self._action = self.columns.get("action")
        self._applied = self.columns.get("applied_action")
        self._reward = self.columns.get("next.reward")
        self._success = self.columns.get("next.success")
        self._done = self.columns.get("next.done")
        self._progress = self.columns.get("next.progress")
        self.cameras = list(settings.cameras)
        self.width = int(settings.width or 224)
        self.height = int(settings.height or settings.width or 224)
        self._videos: dict[str, Any] = {}
        self._video_tmp: dict[str, Path] = {}
        self.frames = 0

    def observe(self, env: Any, observation: dict[str, Any]) -> None:
        """The observation the next action answers: the first one, then the one after every step the episode
        goes on from (not the final one: a frame is an observation with the action taken from it)."""
        for key, column in self._observed:
            value = observation.get(key)
            if value is None:
                raise KeyError(f"recording.trajectories: the observation has no {key!r}")
            column.put(self.frames, value)
        for camera in self.cameras:
            self._video(camera).append(self._frame(env, observation, camera))

    def step(self, action: np.ndarray, success: bool, done: bool, info: dict[str, Any]) -> None:
        """The frame of one step: the pending observation, the action sent, and what the step gave."""
        row = self.frames
        if self._action is not None:
            self._action.put(row, action)
        if self._applied is not None:
            self._applied.put(row, action if self.bounds is None else np.clip(action.reshape(-1), *self.bounds))
        if self._reward is not None:
            self._reward.put(row, _number(info.get("reward")))
        if self._success is not None:
            self._success.put(row, success)
        if self._done is not None:
            self._done.put(row, done)
        if self._progress is not None:
            progress = info.get("progress")
            self._progress.put(row, _number(progress.get("overall_score") if isinstance(progress, dict) else progress))
        self.frames += 1

    def close(self, *, status: str) -> dict[str, Any] | None:
        """Write the episode's trajectory and say where it is, for its record: {"frames": the Parquet file,
        "videos": camera -> mp4}, relative to the Run folder (None, and nothing written, where the settings keep
        no such episode or it has no frame)."""
        keep = self.frames > 0 and not (self.keep_failures_only and status == "success")
        videos, self._videos = self._videos, {}
        for writer in videos.values():
            writer.close()
        if not keep:
            self.discard()
            return None
        for camera, tmp in self._video_tmp.items():  # before the frames: a trajectory file names its videos
            os.replace(tmp, self.run_dir / camera_relpath(camera, self.episode))
        self._video_tmp = {}
        rel = trajectory_relpath(self.episode)
        path = self.run_dir / rel
        tmp = path.with_name(f".tmp-{os.getpid()}-{path.name}")
        try:
            self._write(tmp, status)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)  # e.g. a full disk: no half-written file is left behind
            raise
        found: dict[str, Any] = {"frames": rel}
        if self.cameras:
            found["videos"] = {c: camera_relpath(c, self.episode) for c in self.cameras}
        return found

    def _write(self, tmp: Path, status: str) -> None:
        _write_frames(tmp, self.columns, self.frames, {
            "episode": self.episode, "seed": self.seed, "attempt": self.attempt, "status": status,
            "fps": self.fps, "instruction": self.instruction,
            "cameras": {c: camera_relpath(c, self.episode) for c in self.cameras}})

    def discard(self) -> None:
        videos, self._videos = self._videos, {}
        for writer in videos.values():
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - the file is removed next
                pass
        for tmp in self._video_tmp.values():
            tmp.unlink(missing_ok=True)
        self._video_tmp = {}

    def _video(self, camera: str) -> Any:
        writer = self._videos.get(camera)
        if writer is None:
            from evalfleet.rollout.video import Mp4Writer

            final = self.run_dir / camera_relpath(camera, self.episode)
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp = final.with_name(f".tmp-{os.getpid()}-{final.name}")
            self._video_tmp[camera] = tmp
            writer = self._videos[camera] = Mp4Writer(tmp, self.width, self.height, self.fps)
        return writer

    def _frame(self, env: Any, observation: dict[str, Any], camera: str) -> np.ndarray:
        frame = observation.get(f"observation/images/{camera}")
        if frame is None or np.shape(frame)[:2] != (self.height, self.width):
            frame = env.render(camera, self.height, self.width)
        return np.asarray(frame)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(
        value) else math.nan


def _write_frames(path: Path, columns: dict[str, Any], frames: int, metadata: dict[str, Any]) -> None:
    """The frames as an Arrow IPC file: written on the rollout's clock once per episode, and Arrow's own file
    format is about a third of Parquet's cost to write (0.24 ms against 0.72 ms for 60 frames of Meta-World's
    state); the dataset written from them at the end is Parquet. `columns`: FrameColumns, or arrays (tests)."""
    import pyarrow as pa

    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {"frame_index": pa.array(np.arange(frames, dtype=np.int64))}
    for name, column in columns.items():
        values = (column.values if isinstance(column, FrameColumn) else np.asarray(column))[:frames]
        if values.ndim == 2:  # a vector per frame
            arrays[name] = pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1), pa.float32()),
                                                             values.shape[1])
        else:
            arrays[name] = pa.array(values)
    table = pa.table(arrays).replace_schema_metadata({METADATA_KEY: json.dumps(metadata).encode()})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def read_trajectory(path: str | Path) -> tuple[Any, dict[str, Any]]:
    """(the frames as an Arrow table, the metadata the runner wrote)."""
    import pyarrow as pa

    with pa.OSFile(str(path), "rb") as source:
        table = pa.ipc.open_file(source).read_all()
    return table, json.loads((table.schema.metadata or {}).get(METADATA_KEY, b"{}"))


def read_metadata(path: str | Path) -> dict[str, Any]:
    """The metadata the runner wrote, without reading the frames."""
    import pyarrow as pa

    with pa.OSFile(str(path), "rb") as source:
        schema = pa.ipc.open_file(source).schema
    return json.loads((schema.metadata or {}).get(METADATA_KEY, b"{}"))
