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

An episode's frames stay in memory until it ends (bounded: one episode's steps, state-sized numbers; camera
frames go straight to the encoder) and are then written whole, under a temporary name renamed into place:
`<run>/trajectories/episode_NNNNNN.parquet` and `<run>/trajectories/<camera>/episode_NNNNNN.mp4`. A retried or
resumed episode writes the same names again, so exactly one trajectory is left per episode: the last attempt's,
the one its record holds (the file's metadata names the attempt and seed; collect checks them).
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


def trajectory_relpath(episode: int) -> str:
    return f"{TRAJECTORIES_DIR}/episode_{episode:06d}.parquet"


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
        self.columns: dict[str, list[Any]] = {FEATURES[k]: [] for k in self.keys}
        self._pending: dict[str, Any] = {}  # the observation's part of the frame being built
        self.cameras = list(settings.cameras)
        self.width = int(settings.width or 224)
        self.height = int(settings.height or settings.width or 224)
        self._videos: dict[str, Any] = {}
        self._video_tmp: dict[str, Path] = {}
        self.frames = 0

    def observe(self, env: Any, observation: dict[str, Any]) -> None:
        """The observation the next action answers: the first one, then the one after every step the episode
        goes on from (not the final one: a frame is an observation with the action taken from it)."""
        for key in self.keys:
            if key in OBSERVATION_KEYS:
                value = observation.get(OBSERVATION_KEYS[key])
                if value is None:
                    raise KeyError(f"recording.trajectories: the observation has no {OBSERVATION_KEYS[key]!r} "
                                   f"for key {key!r}")
                self._pending[FEATURES[key]] = np.asarray(value, dtype=np.float32).reshape(-1)
        for camera in self.cameras:
            self._video(camera).append(self._frame(env, observation, camera))

    def step(self, action: np.ndarray, success: bool, done: bool, info: dict[str, Any]) -> None:
        """The frame of one step: the pending observation, the action sent, and what the step gave."""
        row = dict(self._pending)
        if "action" in self.keys:
            row["action"] = np.asarray(action, dtype=np.float32).reshape(-1)
        if "applied_action" in self.keys:
            applied = action if self.bounds is None else np.clip(action.reshape(-1), *self.bounds)
            row["applied_action"] = np.asarray(applied, dtype=np.float32).reshape(-1)
        if "reward" in self.keys:
            row["next.reward"] = _number(info.get("reward"))
        if "success" in self.keys:
            row["next.success"] = bool(success)
        if "done" in self.keys:
            row["next.done"] = bool(done)
        if "progress" in self.keys:
            progress = info.get("progress")
            row["next.progress"] = _number(progress.get("overall_score") if isinstance(progress, dict) else progress)
        for name, values in self.columns.items():
            values.append(row[name])
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


def _write_frames(path: Path, columns: dict[str, list[Any]], frames: int, metadata: dict[str, Any]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {"frame_index": pa.array(np.arange(frames, dtype=np.int64))}
    for name, values in columns.items():
        if values and isinstance(values[0], np.ndarray):
            width = values[0].size
            if any(v.size != width for v in values):
                raise ValueError(f"recording.trajectories: {name} changes size within episode {metadata['episode']}")
            flat = pa.array(np.stack(values).reshape(-1), pa.float32())
            arrays[name] = pa.FixedSizeListArray.from_arrays(flat, width)
        elif name in ("next.success", "next.done"):
            arrays[name] = pa.array(values, pa.bool_())
        else:
            arrays[name] = pa.array(values, pa.float32())
    table = pa.table(arrays).replace_schema_metadata({METADATA_KEY: json.dumps(metadata).encode()})
    pq.write_table(table, path)


def read_trajectory(path: str | Path) -> tuple[Any, dict[str, Any]]:
    """(the frames as an Arrow table, the metadata the runner wrote)."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    return table, json.loads((table.schema.metadata or {}).get(METADATA_KEY, b"{}"))
