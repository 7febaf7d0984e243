"""Episodes as a LeRobotDataset v3.0 folder: the format lerobot 0.6 loads (`LeRobotDataset(repo_id, root=...)`)
and trains on, written by evalfleet itself with pyarrow and PyAV (lerobot is not imported).

The folder:

    meta/info.json                                 fps, features (dtype, shape, names; a video's `info`), totals,
                                                   the path templates below, chunks_size and the file size limits
    meta/stats.json                                per feature: min, max, mean, std, count, q01 q10 q50 q90 q99
    meta/tasks.parquet                             the language instructions: `task` (pandas index) -> task_index
    meta/episodes/chunk-000/file-000.parquet       one row per episode, in episode order (see below)
    data/chunk-CCC/file-FFF.parquet                one row per frame, one row group per episode
    videos/<video key>/chunk-CCC/file-FFF.mp4      each camera's episodes one after another

A data row holds the episode's per-frame columns (a scalar per frame is a plain column and has shape [1] in
info.json, a vector a fixed-size list) and lerobot's five frame columns: `timestamp` (frame_index / fps, float32),
`frame_index` (from 0 in each episode), `episode_index`, `index` (from 0 over the dataset) and `task_index`. A data
file is closed and the next one started once its rows would pass `data_files_size_in_mb` (100 MB, lerobot's default;
measured uncompressed, so the file on disk is smaller); a chunk folder holds at most 1000 files. The episode rows
roll over to meta/episodes/chunk-000/file-001.parquet the same way (2 to 5 KB an episode: after 20,000 or more).

Videos: the runner's mp4 of each episode is copied into the camera's current file packet by packet (no
re-encoding), its timestamps shifted to follow the episodes before it; the episode row says where it lies
(`videos/<key>/chunk_index`, `file_index`, `from_timestamp`, `to_timestamp`), and lerobot decodes frame k of the
episode at from_timestamp + k / fps. A new file is started at `video_files_size_in_mb` (200 MB), or when an
episode's stream cannot follow the previous one (another codec, size, pixel format, time base or codec header).
Each mp4 must hold exactly the episode's frames at the dataset's fps: frame k at k / fps (checked; anything else
is refused, since lerobot would fail to find the frame when it trains). Each mp4 is decoded once, for that check
and the camera's statistics: about 0.1 s for 200 frames of 224 px on one core.

An episode row holds what lerobot reads (`episode_index`, `tasks`, `length`, `data/chunk_index`, `data/file_index`,
`dataset_from_index`, `dataset_to_index`, the video columns above, `meta/episodes/chunk_index` and `file_index`),
the episode's own statistics (`stats/<feature>/<stat>`, as lerobot writes them), and evalfleet's fields of the
episode (`DatasetEpisode.metadata`: run, policy, seed, variations, success, failure code...) as columns named
`evalfleet/<field>`. A field whose values are booleans, integers, numbers or strings in every episode keeps that
type (integers and numbers together are numbers; an episode without the field has null); a dict or a list is JSON
text, and so is every value of a field whose episodes disagree on its type. One line finds episodes:

    pd.read_parquet("meta/episodes").query("`evalfleet/success` == False")
    duckdb.sql("SELECT episode_index FROM 'meta/episodes/*/*.parquet' WHERE \"evalfleet/failure_code\" = 'timeout'")
    LeRobotDataset("local/x", root=path, episode_filter=lambda ep: ep["evalfleet/seed"] < 10)

Statistics (meta/stats.json, what a policy normalizes with): min, max, mean and std are exact over every frame
(a camera: over the sampled frames below). Quantiles: an episode's own are exact; the dataset's are exact while
a feature has at most RESERVOIR_ROWS frames (50,000; fewer for a feature of more than 80 values, whose sample is
kept under 32 MB), and beyond that are read from a uniform random sample of that many frames (seeded: the same
episodes give the same file), which puts each quantile within about 0.25 percentile points (one standard error,
at q50; less at q01 and q99). (lerobot itself averages the episodes'
quantiles, weighted by length, which is not a quantile of the data.) A camera's statistics are per channel in
[0, 1], shape [3, 1, 1], from the frames lerobot would sample (all of a short episode, about L^0.75 of a long
one), every pixel of a frame up to 300 px and every n-th row and column of a larger one; exact over those pixels.

Streaming: episodes come one at a time from any iterable; only the episode at hand is in memory (its columns and
its video's packets), plus the running statistics, a bounded sample per feature and the tasks.

Atomic: the dataset is written to `<dest>.partial` and renamed to `dest` when whole, so a dataset at `dest` is
always complete; a crash leaves only the `.partial` folder, which the next write replaces. An existing `dest` is
refused unless `overwrite=True`.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

CODEBASE_VERSION = "v3.0"
CHUNK_SIZE = 1000  # files per chunk folder
DATA_FILES_SIZE_IN_MB = 100
VIDEO_FILES_SIZE_IN_MB = 200
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
METADATA_PREFIX = "evalfleet/"
# lerobot fills these itself when it records; here they are written for every frame
FRAME_COLUMNS = {"timestamp": "float32", "frame_index": "int64", "episode_index": "int64", "index": "int64",
                 "task_index": "int64"}
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
RESERVOIR_ROWS = 50_000
RESERVOIR_BYTES = 32 * 2**20  # a wide feature keeps fewer rows
SAMPLE_SEED = 20240603
# lerobot's image sampling: at least min(100, L) frames, about L^0.75 of a long episode, at most 10,000
MIN_SAMPLED_FRAMES, MAX_SAMPLED_FRAMES, SAMPLING_POWER = 100, 10_000, 0.75
DOWNSAMPLE_FROM_PX, DOWNSAMPLE_TO_PX = 300, 150
EPISODE_ROWS_PER_WRITE = 256
PROGRESS_EVERY = 1000


@dataclass
class DatasetEpisode:
    """One episode: per-frame `columns` (all of length L), its language instruction, evalfleet's fields, and the
    path of each camera's mp4 (exactly L frames at the dataset's fps)."""

    columns: dict[str, np.ndarray]
    task: str
    metadata: dict[str, Any]
    videos: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DatasetSummary:
    episodes: int
    frames: int
    tasks: int
    path: Path


def write_dataset(dest: str | Path, episodes: Iterable[DatasetEpisode], *, fps: float, robot_type: str | None = None,
                  log: Callable[[str], None] | None = None, overwrite: bool = False,
                  data_files_size_in_mb: float = DATA_FILES_SIZE_IN_MB,
                  video_files_size_in_mb: float = VIDEO_FILES_SIZE_IN_MB) -> DatasetSummary:
    """Write `episodes` as a LeRobotDataset v3.0 folder at `dest` (see the module's docstring). Raises ValueError
    for an episode that does not fit the first one (naming the episode and the feature), FileExistsError for an
    existing `dest` without `overwrite`."""
    dest = Path(dest)
    fps = whole_fps(fps)
    if data_files_size_in_mb <= 0 or video_files_size_in_mb <= 0:
        raise ValueError("data_files_size_in_mb and video_files_size_in_mb must be positive")
    if (dest.exists() or dest.is_symlink()) and not overwrite:
        raise FileExistsError(f"{dest} exists: choose another folder, or pass overwrite=True to replace it")
    partial = dest.with_name(dest.name + ".partial")
    remove_tree(partial)  # a crashed write's leftovers: never a dataset
    partial.mkdir(parents=True)
    writer = _DatasetWriter(partial, fps, robot_type, log or (lambda _message: None), data_files_size_in_mb,
                            video_files_size_in_mb)
    try:
        for episode in episodes:
            writer.add(episode)
        writer.finish()
    except BaseException:
        writer.abort()
        remove_tree(partial)
        raise
    publish(partial, dest, overwrite)
    return DatasetSummary(writer.episodes, writer.frames, len(writer.tasks), dest)


def whole_fps(fps: float) -> int:
    """info.json's fps is an integer in lerobot; refuse the rates it cannot state rather than round them."""
    if isinstance(fps, bool) or not isinstance(fps, (int, float, np.integer, np.floating)) or not math.isfinite(fps):
        raise ValueError(f"fps must be a positive whole number of frames per second, not {fps!r}")
    if fps <= 0 or float(fps) != int(fps):
        raise ValueError(f"fps must be a positive whole number of frames per second (LeRobotDataset stores an "
                         f"integer), not {fps!r}")
    return int(fps)


def publish(partial: Path, dest: Path, overwrite: bool) -> None:
    """Rename the finished folder into place. A replaced dataset is moved aside first (a rename cannot replace
    a folder that has files), so `dest` is at every moment either the old dataset, absent, or the new one."""
    old = dest.with_name(dest.name + ".replaced")
    if dest.exists() or dest.is_symlink():
        if not overwrite:
            remove_tree(partial)
            raise FileExistsError(f"{dest} appeared while the dataset was written; the new one is discarded")
        remove_tree(old)
        os.replace(dest, old)
    os.replace(partial, dest)
    remove_tree(old)


def remove_tree(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def next_file(chunk_index: int, file_index: int) -> tuple[int, int]:
    """The file after (chunk, file): a chunk folder holds CHUNK_SIZE files."""
    return (chunk_index + 1, 0) if file_index == CHUNK_SIZE - 1 else (chunk_index, file_index + 1)


# --- features ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ColumnSpec:
    """A per-frame numeric feature: a scalar per frame (`width` None, shape [1]) or a vector of `width`."""

    key: str
    dtype: np.dtype
    width: int | None

    @property
    def shape(self) -> list[int]:
        return [self.width if self.width is not None else 1]

    def info(self) -> dict[str, Any]:
        return {"dtype": self.dtype.name, "shape": self.shape, "names": None}


def column_spec(key: str, values: Any, where: str) -> ColumnSpec:
    array = np.asarray(values)
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{where}: column {key!r} has dtype {array.dtype}; a LeRobotDataset column holds "
                         f"booleans, integers or floats")
    if array.ndim == 1 or (array.ndim == 2 and array.shape[1] == 1):
        return ColumnSpec(key, array.dtype, None)  # lerobot reads shape [1] as a plain scalar column
    if array.ndim == 2:
        return ColumnSpec(key, array.dtype, int(array.shape[1]))
    raise ValueError(f"{where}: column {key!r} has shape {array.shape}; give (L,) for a scalar per frame or "
                     f"(L, d) for a vector")


def check_feature_name(key: str, where: str) -> None:
    if not isinstance(key, str) or not key:
        raise ValueError(f"{where}: feature names are non-empty strings, not {key!r}")
    if "/" in key:
        raise ValueError(f"{where}: feature {key!r} has a '/', which lerobot refuses in feature names")
    if key in FRAME_COLUMNS:
        raise ValueError(f"{where}: column {key!r} is written by the dataset writer itself (one of "
                         f"{', '.join(FRAME_COLUMNS)}); leave it out")


def hf_feature(dtype: str, width: int | None) -> dict[str, Any]:
    """The `datasets` feature lerobot declares for a column (kept in the Parquet schema's metadata)."""
    value = {"dtype": dtype, "_type": "Value"}
    return value if width is None else {"feature": value, "length": width, "_type": "List"}


# --- statistics --------------------------------------------------------------------------------------------------


def quantiles_of(values: np.ndarray) -> dict[str, np.ndarray]:
    """Exact quantiles per dimension of (n, d) values (numpy's linear interpolation)."""
    found = np.quantile(values, list(QUANTILES.values()), axis=0)
    return {name: found[i] for i, name in enumerate(QUANTILES)}


def exact_stats(values: np.ndarray) -> dict[str, Any]:
    """An episode's statistics of (L, d) float64 values."""
    return {"min": values.min(axis=0), "max": values.max(axis=0), "mean": values.mean(axis=0),
            "std": values.std(axis=0), "count": np.array([len(values)]), **quantiles_of(values)}


class Reservoir:
    """A uniform random sample of at most `capacity` rows of everything offered (Algorithm R), for quantiles
    of more frames than memory should hold."""

    def __init__(self, width: int, rng: np.random.Generator):
        self.capacity = max(1000, min(RESERVOIR_ROWS, RESERVOIR_BYTES // (8 * width)))
        self.rows = np.empty((self.capacity, width))
        self.seen = 0
        self.rng = rng

    def offer(self, values: np.ndarray) -> None:
        take = min(len(values), max(0, self.capacity - self.seen))
        self.rows[self.seen:self.seen + take] = values[:take]
        rest = values[take:]
        if len(rest):
            # row i (0-based over everything seen) replaces a random slot with probability capacity / (i + 1)
            positions = np.arange(self.seen + take, self.seen + len(values))
            slots = self.rng.integers(0, positions + 1)
            kept = slots < self.capacity
            slots, rows = slots[kept], rest[kept]
            # when two rows draw one slot, the later one is what Algorithm R leaves there
            _, last = np.unique(slots[::-1], return_index=True)
            last = len(slots) - 1 - last
            self.rows[slots[last]] = rows[last]
        self.seen += len(values)

    def sample(self) -> np.ndarray:
        return self.rows[:min(self.seen, self.capacity)]


class NumericStats:
    """A numeric feature's statistics over the whole dataset, merged episode by episode: exact count, min, max,
    mean and std (Chan's parallel update), quantiles from a Reservoir."""

    def __init__(self, width: int, rng: np.random.Generator):
        self.count = 0
        self.mean = np.zeros(width)
        self.m2 = np.zeros(width)
        self.min = np.full(width, np.inf)
        self.max = np.full(width, -np.inf)
        self.reservoir = Reservoir(width, rng)

    def episode(self, values: np.ndarray) -> dict[str, Any]:
        """Merge one episode's (L, d) values; return the episode's own statistics."""
        values = values.astype(np.float64, copy=False)
        own = exact_stats(values)
        n, total = len(values), self.count + len(values)
        delta = own["mean"] - self.mean
        self.m2 += own["std"] ** 2 * n + delta ** 2 * self.count * n / total
        self.mean += delta * n / total
        self.count = total
        self.min = np.minimum(self.min, own["min"])
        self.max = np.maximum(self.max, own["max"])
        self.reservoir.offer(values)
        return own

    def result(self) -> dict[str, Any]:
        return {"min": self.min, "max": self.max, "mean": self.mean, "std": np.sqrt(self.m2 / self.count),
                "count": np.array([self.count]), **quantiles_of(self.reservoir.sample())}


def histogram_stats(histogram: np.ndarray, frames: int) -> dict[str, Any]:
    """A camera's statistics, per channel in [0, 1] with lerobot's shape (3, 1, 1), from the (3, 256) counts of
    its sampled pixels: exact, quantiles with numpy's linear interpolation."""
    levels = np.arange(256, dtype=np.float64)
    stats: dict[str, list[float]] = {name: [] for name in ("min", "max", "mean", "std", *QUANTILES)}
    for counts in histogram:
        total = counts.sum()
        present = np.flatnonzero(counts)
        mean = (counts * levels).sum() / total
        stats["min"].append(levels[present[0]])
        stats["max"].append(levels[present[-1]])
        stats["mean"].append(mean)
        stats["std"].append(math.sqrt(max(0.0, (counts * (levels - mean) ** 2).sum() / total)))
        cumulative = np.cumsum(counts)
        for name, q in QUANTILES.items():
            position = q * (total - 1)
            below = math.floor(position)
            # the value at sorted rank r is the first level whose cumulative count passes r
            low = levels[np.searchsorted(cumulative, below, side="right")]
            high = levels[np.searchsorted(cumulative, min(below + 1, total - 1), side="right")]
            stats[name].append(low + (position - below) * (high - low))
    shaped = {name: (np.array(values) / 255.0).reshape(-1, 1, 1) for name, values in stats.items()}
    return {**shaped, "count": np.array([frames])}


def sampled_frames(length: int) -> set[int]:
    """The frames of an episode whose pixels enter its camera statistics (lerobot's sample_indices)."""
    wanted = max(min(MIN_SAMPLED_FRAMES, length), min(int(length ** SAMPLING_POWER), MAX_SAMPLED_FRAMES))
    return set(np.round(np.linspace(0, length - 1, wanted)).astype(int).tolist())


def downsampled(image: np.ndarray) -> np.ndarray:
    """lerobot's auto_downsample_height_width for (H, W, 3) frames: every n-th pixel of a large frame."""
    height, width = image.shape[:2]
    if max(height, width) < DOWNSAMPLE_FROM_PX:
        return image
    step = int(max(height, width) / DOWNSAMPLE_TO_PX)
    return image[::step, ::step]


def stats_json(stats: dict[str, Any]) -> dict[str, Any]:
    return {name: np.asarray(value).tolist() for name, value in stats.items()}


# --- videos ------------------------------------------------------------------------------------------------------


@dataclass
class EpisodeVideo:
    """One episode's mp4, read: its packets (timestamps from 0), what its stream must agree on to follow another
    in one file, its sampled pixels' histogram."""

    packets: list[Any]
    stream_params: tuple
    time_base: Fraction
    ticks_per_frame: int
    info: dict[str, Any]
    shape: list[int]
    histogram: np.ndarray
    sampled: int
    size: int


def read_episode_video(path: Path, length: int, fps: int, where: str) -> EpisodeVideo:
    """Demux an episode's mp4, check it holds frame k at k / fps for k < `length`, and decode it once for the
    camera statistics."""
    import av

    if not path.is_file():
        raise ValueError(f"{where}: no video file at {path}")
    try:
        container = av.open(str(path))
    except av.error.FFmpegError as exc:
        raise ValueError(f"{where}: cannot read the video {path} ({exc})") from None
    with container:
        if not container.streams.video:
            raise ValueError(f"{where}: {path} has no video stream")
        stream = container.streams.video[0]
        time_base = Fraction(stream.time_base)
        ticks = Fraction(1, fps) / time_base
        if ticks.denominator != 1:
            raise ValueError(f"{where}: {path}'s time base {time_base} cannot place frames at {fps} fps")
        wanted = sampled_frames(length)
        histogram = np.zeros((3, 256), dtype=np.int64)
        packets, decoded = [], 0
        context = stream.codec_context

        def count_pixels(frames: Iterable[Any]) -> None:
            nonlocal decoded
            for frame in frames:
                if decoded in wanted:
                    pixels = downsampled(frame.to_ndarray(format="rgb24")).reshape(-1, 3)
                    for channel in range(3):
                        histogram[channel] += np.bincount(pixels[:, channel], minlength=256)
                decoded += 1

        try:
            # demux ends with an empty packet, which flushes the decoder's delayed frames
            for packet in container.demux(stream):
                count_pixels(context.decode(packet))
                if packet.dts is not None and packet.size:
                    packets.append(packet)
        except av.error.FFmpegError as exc:
            raise ValueError(f"{where}: cannot decode the video {path} ({exc})") from None
        if any(packet.pts is None for packet in packets):
            raise ValueError(f"{where}: {path} has frames without a timestamp")
        timestamps = sorted(packet.pts for packet in packets)
        if len(timestamps) != length or decoded != length:
            raise ValueError(f"{where}: {path} has {max(len(timestamps), decoded)} frames, the episode {length}")
        start = timestamps[0]
        expected = [start + k * int(ticks) for k in range(length)]
        if timestamps != expected:
            raise ValueError(f"{where}: {path}'s frames are not at k / {fps} s (a constant {fps} fps from its first "
                             f"frame), which lerobot needs to find frame k")
        for packet in packets:
            packet.pts -= start
            packet.dts -= start
        extradata = bytes(context.extradata or b"")
        params = (stream.codec_context.name, stream.width, stream.height, stream.pix_fmt, time_base, extradata)
        info = {"video.height": stream.height, "video.width": stream.width,
                "video.codec": stream.codec.canonical_name, "video.pix_fmt": stream.pix_fmt, "video.fps": fps,
                "video.channels": len(av.VideoFormat(stream.pix_fmt).components), "has_audio": False,
                "is_depth_map": False}
        return EpisodeVideo(packets, params, time_base, int(ticks), info, [stream.height, stream.width, 3],
                            histogram, len(wanted), path.stat().st_size)


class VideoFiles:
    """One camera's mp4 files: episodes appended one after another, packets copied, into chunked files."""

    def __init__(self, root: Path, key: str, fps: int, limit_bytes: float):
        self.root, self.key, self.fps, self.limit_bytes = root, key, fps, limit_bytes
        self.chunk_index, self.file_index = 0, 0
        self.container: Any = None
        self.stream: Any = None
        self.params: tuple | None = None
        self.offset = 0  # ticks of the episodes already in the open file
        self.last_dts: int | None = None
        self.bytes = 0

    def path(self) -> Path:
        return self.root / VIDEO_PATH.format(video_key=self.key, chunk_index=self.chunk_index,
                                             file_index=self.file_index)

    def append(self, video: EpisodeVideo, template_path: Path) -> dict[str, Any]:
        """Copy the episode's packets into the open file (or a new one) and say where they lie."""
        import av

        first_dts = min(packet.dts for packet in video.packets)
        follows = (self.container is not None and video.stream_params == self.params
                   and self.bytes + video.size < self.limit_bytes
                   and self.offset + first_dts > (self.last_dts if self.last_dts is not None else -math.inf))
        if self.container is not None and not follows:
            self.close()
            self.chunk_index, self.file_index = next_file(self.chunk_index, self.file_index)
        if self.container is None:
            path = self.path()
            path.parent.mkdir(parents=True, exist_ok=True)
            self.container = av.open(str(path), mode="w", options={"movflags": "faststart"})
            # the stream's codec parameters come from the episode's own file (the packets are its packets)
            with av.open(str(template_path)) as template:
                source = template.streams.video[0]
                self.stream = self.container.add_stream_from_template(source)
                self.stream.time_base = source.time_base
            self.params, self.offset, self.last_dts, self.bytes = video.stream_params, 0, None, 0
        for packet in video.packets:
            packet.pts += self.offset
            packet.dts += self.offset
            self.last_dts = packet.dts if self.last_dts is None else max(self.last_dts, packet.dts)
            packet.stream = self.stream
            self.container.mux(packet)
        start = self.offset
        self.offset += video.ticks_per_frame * len(video.packets)
        self.bytes += video.size
        prefix = f"videos/{self.key}/"
        return {prefix + "chunk_index": self.chunk_index, prefix + "file_index": self.file_index,
                prefix + "from_timestamp": float(start * video.time_base),
                prefix + "to_timestamp": float(self.offset * video.time_base)}

    def close(self) -> None:
        container, self.container = self.container, None
        if container is None:
            return
        container.close()
        self.check_time_base()

    def check_time_base(self) -> None:
        """The muxer may choose its own time base: the episodes' from_timestamp hold only if it still counts
        whole frames (it does for mp4, which keeps the source's)."""
        import av

        with av.open(str(self.path())) as written:
            ticks = Fraction(1, self.fps) / Fraction(written.streams.video[0].time_base)
        if ticks.denominator != 1:
            raise RuntimeError(f"{self.path()}: the muxer's time base cannot place frames at {self.fps} fps")


# --- episode metadata --------------------------------------------------------------------------------------------


def plain(value: Any) -> Any:
    """A metadata value as JSON sees it: numpy scalars and arrays as Python values, tuples as lists."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)  # a Path, an enum...: its text


def kind_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    return "json"


class MetadataColumns:
    """evalfleet's per-episode fields as typed columns: the type of each is known only once every episode has
    been seen, so the episodes' fields are kept as JSON text until then and typed here."""

    def __init__(self):
        self.kinds: dict[str, set[str]] = {}

    def observe(self, metadata: dict[str, Any]) -> str:
        fields = {str(key): plain(value) for key, value in metadata.items()}
        for key, value in fields.items():
            self.kinds.setdefault(key, set()).add(kind_of(value))
        return json.dumps(fields, allow_nan=True)

    def arrow_type(self, key: str) -> tuple[Any, Callable[[Any], Any]]:
        import pyarrow as pa

        kinds = self.kinds[key] - {"null"}
        if not kinds:
            return pa.null(), lambda value: None
        if kinds == {"bool"}:
            return pa.bool_(), lambda value: value
        if kinds == {"int"}:
            return pa.int64(), lambda value: value
        if kinds <= {"int", "float"}:
            return pa.float64(), lambda value: None if value is None else float(value)
        if kinds == {"str"}:
            return pa.string(), lambda value: value
        # dicts and lists, or a field whose type differs between episodes: JSON text of every value
        return pa.string(), lambda value: None if value is None else json.dumps(value)

    def columns(self, texts: list[str]) -> dict[str, Any]:
        import pyarrow as pa

        fields = [json.loads(text) for text in texts]
        found = {}
        for key in self.kinds:
            arrow_type, convert = self.arrow_type(key)
            found[METADATA_PREFIX + key] = pa.array([convert(f.get(key)) for f in fields], type=arrow_type)
        return found


# --- the writer --------------------------------------------------------------------------------------------------


class _DatasetWriter:
    """Writes one dataset folder, episode by episode."""

    def __init__(self, root: Path, fps: int, robot_type: str | None, log: Callable[[str], None],
                 data_files_size_in_mb: float, video_files_size_in_mb: float):
        self.root, self.fps, self.robot_type, self.log = root, fps, robot_type, log
        self.size_limits_mb = (data_files_size_in_mb, video_files_size_in_mb)  # as info.json states them
        self.data_bytes, self.video_bytes = data_files_size_in_mb * 2**20, video_files_size_in_mb * 2**20
        self.columns: list[ColumnSpec] | None = None
        self.video_keys: list[str] = []
        self.video_info: dict[str, dict[str, Any]] = {}
        self.video_shape: dict[str, list[int]] = {}
        self.tasks: dict[str, int] = {}
        self.frames = 0
        self.episodes = 0
        self.rng = np.random.default_rng(SAMPLE_SEED)
        self.numeric: dict[str, NumericStats] = {}
        self.images: dict[str, np.ndarray] = {}
        self.image_frames: dict[str, int] = {}
        self.videos: dict[str, VideoFiles] = {}
        self.metadata = MetadataColumns()
        self.data_writer: Any = None
        self.data_schema: Any = None
        self.data_file = (0, 0)
        self.data_file_bytes = 0
        self.episode_rows: list[dict[str, Any]] = []
        self.episode_schema: Any = None
        self.episode_writer: Any = None
        self.episode_core = root / "meta" / ".episodes-core.parquet"  # removed before the folder is published

    # the first episode fixes the features
    def define(self, episode: DatasetEpisode, where: str) -> None:
        import pyarrow as pa

        for key in [*episode.columns, *episode.videos]:
            check_feature_name(key, where)
        if not episode.columns:
            raise ValueError(f"{where}: an episode needs at least one per-frame column (e.g. 'action')")
        shared = set(episode.columns) & set(episode.videos)
        if shared:
            raise ValueError(f"{where}: {sorted(shared)} named both as a column and a video")
        self.columns = [column_spec(key, values, where) for key, values in episode.columns.items()]
        self.video_keys = list(episode.videos)
        fields, hf_features = [], {}
        for spec in self.columns:
            value_type = pa.from_numpy_dtype(spec.dtype)
            fields.append(pa.field(spec.key, value_type if spec.width is None else pa.list_(value_type, spec.width)))
            hf_features[spec.key] = hf_feature(spec.dtype.name, spec.width)
        for key, dtype in FRAME_COLUMNS.items():
            fields.append(pa.field(key, pa.from_numpy_dtype(np.dtype(dtype))))
            hf_features[key] = hf_feature(dtype, None)
        # `datasets` reads the features from here when lerobot does not give them
        metadata = {"huggingface": json.dumps({"info": {"features": hf_features}})}
        self.data_schema = pa.schema(fields, metadata=metadata)
        for spec in self.columns:
            self.numeric[spec.key] = NumericStats(spec.width or 1, self.rng)
        for key in FRAME_COLUMNS:
            self.numeric[key] = NumericStats(1, self.rng)
        for key in self.video_keys:
            self.images[key] = np.zeros((3, 256), dtype=np.int64)
            self.image_frames[key] = 0
            self.videos[key] = VideoFiles(self.root, key, self.fps, self.video_bytes)

    def check(self, episode: DatasetEpisode, where: str) -> int:
        """The episode's length, once its columns and videos are those of the first episode."""
        if not isinstance(episode, DatasetEpisode):
            raise TypeError(f"{where}: expected a DatasetEpisode, got {type(episode).__name__}")
        if not isinstance(episode.task, str):
            raise TypeError(f"{where}: the task is the language instruction, a string, not {episode.task!r}")
        if self.columns is None:
            self.define(episode, where)
        expected = {spec.key for spec in self.columns}
        if set(episode.columns) != expected:
            missing, extra = sorted(expected - set(episode.columns)), sorted(set(episode.columns) - expected)
            raise ValueError(f"{where}: its columns differ from the first episode's (missing {missing}, "
                             f"extra {extra})")
        if set(episode.videos) != set(self.video_keys):
            raise ValueError(f"{where}: its videos {sorted(episode.videos)} differ from the first episode's "
                             f"{sorted(self.video_keys)}")
        lengths = set()
        for spec in self.columns:
            array = np.asarray(episode.columns[spec.key])
            found = column_spec(spec.key, array, where)
            if found.dtype != spec.dtype or found.width != spec.width:
                raise ValueError(f"{where}: column {spec.key!r} is {found.dtype.name} {self.shape_text(found)} per "
                                 f"frame, the first episode's {spec.dtype.name} {self.shape_text(spec)}")
            lengths.add(len(array))
        if len(lengths) != 1:
            raise ValueError(f"{where}: its columns have different lengths {sorted(lengths)}")
        length = lengths.pop()
        if length < 1:
            raise ValueError(f"{where}: it has no frames")
        return length

    @staticmethod
    def shape_text(spec: ColumnSpec) -> str:
        return "(a scalar)" if spec.width is None else f"(a vector of {spec.width})"

    def add(self, episode: DatasetEpisode) -> None:
        index = self.episodes
        where = f"episode {index}"
        length = self.check(episode, where)
        task_index = self.tasks.setdefault(episode.task, len(self.tasks))
        videos = {key: read_episode_video(Path(episode.videos[key]), length, self.fps, f"{where}, video {key!r}")
                  for key in self.video_keys}
        for key, video in videos.items():
            if key not in self.video_info:
                self.video_info[key], self.video_shape[key] = video.info, video.shape
            elif video.shape != self.video_shape[key]:
                raise ValueError(f"{where}, video {key!r}: frames of {video.shape[1]}x{video.shape[0]} px, the "
                                 f"first episode's {self.video_shape[key][1]}x{self.video_shape[key][0]}")
        frame_values = {"timestamp": (np.arange(length) / self.fps).astype(np.float32),
                        "frame_index": np.arange(length, dtype=np.int64),
                        "episode_index": np.full(length, index, dtype=np.int64),
                        "index": np.arange(self.frames, self.frames + length, dtype=np.int64),
                        "task_index": np.full(length, task_index, dtype=np.int64)}
        row: dict[str, Any] = {"episode_index": index, "tasks": [episode.task], "length": length}
        row.update(self.write_frames(episode, frame_values, length))
        row["dataset_from_index"], row["dataset_to_index"] = self.frames, self.frames + length
        for key, video in videos.items():
            row.update(self.videos[key].append(video, Path(episode.videos[key])))
        episode_stats = {}
        for spec in self.columns:
            values = np.asarray(episode.columns[spec.key]).reshape(length, -1)
            episode_stats[spec.key] = self.numeric[spec.key].episode(values)
        for key, video in videos.items():
            self.images[key] += video.histogram
            self.image_frames[key] += video.sampled
            episode_stats[key] = histogram_stats(video.histogram, video.sampled)
        for key, values in frame_values.items():
            episode_stats[key] = self.numeric[key].episode(values.reshape(length, 1))
        for key, stats in episode_stats.items():
            for name, value in stats.items():
                row[f"stats/{key}/{name}"] = np.asarray(value).tolist()
        row["metadata"] = self.metadata.observe(episode.metadata or {})
        self.episode_rows.append(row)
        if len(self.episode_rows) >= EPISODE_ROWS_PER_WRITE:
            self.flush_episode_rows()
        self.frames += length
        self.episodes += 1
        if self.episodes % PROGRESS_EVERY == 0:
            self.log(f"LeRobot dataset: {self.episodes} episodes, {self.frames} frames written")

    def write_frames(self, episode: DatasetEpisode, frame_values: dict[str, np.ndarray], length: int) -> dict:
        """Append the episode's rows to the current data file (one row group), starting the next file first when
        this one would pass its size limit."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        arrays = []
        for spec in self.columns:
            values = np.ascontiguousarray(np.asarray(episode.columns[spec.key]))
            if spec.width is None:
                arrays.append(pa.array(values.reshape(-1)))
            else:
                arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), spec.width))
        arrays.extend(pa.array(values) for values in frame_values.values())
        table = pa.Table.from_arrays(arrays, schema=self.data_schema)
        if self.data_writer is not None and self.data_file_bytes + table.nbytes > self.data_bytes:
            self.data_writer.close()
            self.data_writer = None
            self.data_file = next_file(*self.data_file)
        if self.data_writer is None:
            path = self.root / DATA_PATH.format(chunk_index=self.data_file[0], file_index=self.data_file[1])
            path.parent.mkdir(parents=True, exist_ok=True)
            self.data_writer = pq.ParquetWriter(str(path), self.data_schema, compression="snappy")
            self.data_file_bytes = 0
        self.data_writer.write_table(table)
        self.data_file_bytes += table.nbytes
        return {"data/chunk_index": self.data_file[0], "data/file_index": self.data_file[1]}

    def flush_episode_rows(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not self.episode_rows:
            return
        if self.episode_schema is None:
            self.episode_schema = episode_schema(self.episode_rows[0])
            self.episode_core.parent.mkdir(parents=True, exist_ok=True)
            self.episode_writer = pq.ParquetWriter(str(self.episode_core), self.episode_schema)
        self.episode_writer.write_table(pa.Table.from_pylist(self.episode_rows, schema=self.episode_schema))
        self.episode_rows = []

    def finish(self) -> None:
        if self.episodes == 0:
            raise ValueError("no episodes: a LeRobotDataset needs at least one")
        self.flush_episode_rows()
        self.episode_writer.close()
        self.episode_writer = None
        self.data_writer.close()
        self.data_writer = None
        for files in self.videos.values():
            files.close()
        self.write_episodes()
        self.episode_core.unlink()
        self.write_tasks()
        self.write_stats()
        self.write_info()
        self.log(f"LeRobot dataset: {self.episodes} episodes, {self.frames} frames, {len(self.tasks)} tasks")

    def abort(self) -> None:
        for writer in (self.data_writer, self.episode_writer):
            if writer is not None:
                try:
                    writer.close()
                except Exception:  # noqa: BLE001 - the folder is removed next; the original error is what matters
                    pass
        for files in self.videos.values():
            try:
                files.close()
            except Exception:  # noqa: BLE001 - as above
                pass

    def write_episodes(self) -> None:
        """The episode rows, typed evalfleet columns added now that every episode's fields are known; a new file
        when one would pass the data size limit."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        chunk_index, file_index = 0, 0
        writer, written = None, 0
        try:
            for batch in pq.ParquetFile(str(self.episode_core)).iter_batches(batch_size=EPISODE_ROWS_PER_WRITE):
                table = pa.Table.from_batches([batch])
                texts = table.column("metadata").to_pylist()
                table = table.drop_columns(["metadata"])
                if writer is not None and written + table.nbytes > self.data_bytes:
                    writer.close()
                    writer, (chunk_index, file_index) = None, next_file(chunk_index, file_index)
                table = table.append_column("meta/episodes/chunk_index", pa.array([chunk_index] * len(table),
                                                                                  pa.int64()))
                table = table.append_column("meta/episodes/file_index", pa.array([file_index] * len(table),
                                                                                 pa.int64()))
                for name, column in self.metadata.columns(texts).items():
                    table = table.append_column(name, column)
                if writer is None:
                    path = self.root / EPISODES_PATH.format(chunk_index=chunk_index, file_index=file_index)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    writer, written = pq.ParquetWriter(str(path), table.schema, compression="snappy"), 0
                writer.write_table(table)
                written += table.nbytes
        finally:
            if writer is not None:
                writer.close()

    def write_tasks(self) -> None:
        """meta/tasks.parquet as pandas writes it: lerobot reads it with pandas and takes a task's text from the
        frame's index, so the schema names `task` as the pandas index."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        pandas_metadata = {
            "index_columns": ["task"],
            "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object",
                                "metadata": {"encoding": "UTF-8"}}],
            "columns": [{"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
                         "numpy_type": "int64", "metadata": None},
                        {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object",
                         "metadata": None}],
            "attributes": {}, "creator": {"library": "evalfleet"}, "pandas_version": "2.2.0"}
        schema = pa.schema([("task_index", pa.int64()), ("task", pa.string())],
                           metadata={"pandas": json.dumps(pandas_metadata)})
        table = pa.table({"task_index": list(self.tasks.values()), "task": list(self.tasks)}, schema=schema)
        pq.write_table(table, str(self.root / "meta" / "tasks.parquet"))

    def write_stats(self) -> None:
        stats = {spec.key: stats_json(self.numeric[spec.key].result()) for spec in self.columns}
        for key in self.video_keys:
            stats[key] = stats_json(histogram_stats(self.images[key], self.image_frames[key]))
        for key in FRAME_COLUMNS:
            stats[key] = stats_json(self.numeric[key].result())
        write_json(self.root / "meta" / "stats.json", stats)

    def write_info(self) -> None:
        features = {spec.key: spec.info() for spec in self.columns}
        for key in self.video_keys:
            features[key] = {"dtype": "video", "shape": self.video_shape[key],
                             "names": ["height", "width", "channels"], "info": self.video_info[key]}
        for key, dtype in FRAME_COLUMNS.items():
            features[key] = {"dtype": dtype, "shape": [1], "names": None}
        data_mb, video_mb = self.size_limits_mb
        info = {"codebase_version": CODEBASE_VERSION, "fps": self.fps, "features": features,
                "total_episodes": self.episodes, "total_frames": self.frames, "total_tasks": len(self.tasks),
                "chunks_size": CHUNK_SIZE, "data_files_size_in_mb": data_mb, "video_files_size_in_mb": video_mb,
                "data_path": DATA_PATH, "video_path": VIDEO_PATH if self.video_keys else None,
                "robot_type": self.robot_type, "splits": {"train": f"0:{self.episodes}"}}
        write_json(self.root / "meta" / "info.json", info)


def episode_schema(row: dict[str, Any]) -> Any:
    """The episode rows' Arrow schema, from the first row (every row has the same keys and shapes)."""
    import pyarrow as pa

    known = {"episode_index": pa.int64(), "tasks": pa.list_(pa.string()), "length": pa.int64(),
             "data/chunk_index": pa.int64(), "data/file_index": pa.int64(), "dataset_from_index": pa.int64(),
             "dataset_to_index": pa.int64(), "metadata": pa.string()}
    fields = []
    for key, value in row.items():
        if key in known:
            fields.append(pa.field(key, known[key]))
        elif key.startswith("videos/"):
            fields.append(pa.field(key, pa.float64() if key.endswith("_timestamp") else pa.int64()))
        elif key.endswith("/count"):
            fields.append(pa.field(key, pa.list_(pa.int64())))
        else:  # a statistic: a list of numbers, nested (3, 1, 1) for a camera
            value_type = pa.float64()
            for _ in range(np.ndim(value) - 1):
                value_type = pa.list_(value_type)
            fields.append(pa.field(key, pa.list_(value_type)))
    return pa.schema(fields)


def write_json(path: Path, document: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=4) + "\n", encoding="utf-8")
