"""The LeRobotDataset v3.0 writer (outputs/lerobot_dataset.py): a small dataset of three episodes (different lengths,
two tasks, a camera whose every frame shows its own index) opened by lerobot 0.6.1 itself in its venv, every frame
compared with what was written; its statistics against numpy; and, in plain Python, every bad input refused naming
the episode and the feature, an existing folder refused, and a failed write leaving no dataset behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from evalfleet.outputs import lerobot_dataset
from evalfleet.outputs.lerobot_dataset import DatasetEpisode, write_dataset
from evalfleet.rollout.video import Mp4Writer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lerobot_policies"))
from lerobot_testkit import lerobot_py, venv_env  # noqa: F401 - the suite's fixture: skips without the venv

FPS = 10
LENGTHS = (4, 7, 11)
TASKS = ("push the block", "open the drawer", "push the block")
CAMERA = "observation.images.top"
HEIGHT, WIDTH = 32, 48
CODEC_TOLERANCE = 4  # flat grey frames come back from H.264 within a few levels


def pixel_value(episode: int, frame: int) -> int:
    """What frame `frame` of `episode` shows: the frame index in steps of 20, the episode in steps of 7."""
    return 20 * frame + 7 * episode


def write_video(path: Path, episode: int, length: int) -> str:
    writer = Mp4Writer(path, WIDTH, HEIGHT, FPS)
    for frame in range(length):
        writer.append(np.full((HEIGHT, WIDTH, 3), pixel_value(episode, frame), np.uint8))
    writer.close()
    return str(path)


def make_episode(episode: int, length: int, folder: Path | None = None) -> DatasetEpisode:
    state = (np.arange(length * 3, dtype=np.float32).reshape(length, 3) + 1000 * episode) / 7
    action = np.stack([np.full(length, episode, np.float32), np.linspace(-1, 1, length, dtype=np.float32)], axis=1)
    last = np.arange(length) == length - 1
    metadata = {"run": "push", "policy": "act", "seed": 100 + episode, "variations": {"light": 0.1 * episode},
                "success": episode == 1, "failure_code": None if episode == 1 else "timeout",
                "progress": None if episode == 0 else 0.5 * episode, "status": "success" if episode == 1 else "failure"}
    videos = {CAMERA: write_video(folder / f"episode_{episode}.mp4", episode, length)} if folder else {}
    return DatasetEpisode(columns={"observation.state": state, "action": action,
                                   "next.reward": last.astype(np.float32), "next.success": last & (episode == 1),
                                   "next.done": last},
                          task=TASKS[episode], metadata=metadata, videos=videos)


@pytest.fixture(scope="module")
def episodes(tmp_path_factory) -> list[DatasetEpisode]:
    folder = tmp_path_factory.mktemp("videos")
    return [make_episode(index, length, folder) for index, length in enumerate(LENGTHS)]


# --- lerobot opens it -------------------------------------------------------------------------------------------

READ_WITH_LEROBOT = r"""
import json, logging, sys
logging.disable(logging.WARNING)
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from lerobot.utils.import_utils import get_safe_default_video_backend

root, frames_to_decode = sys.argv[1], json.loads(sys.argv[2])
backends = ["pyav"] + (["torchcodec"] if get_safe_default_video_backend() == "torchcodec" else [])
found = {"backends": backends}
dataset = LeRobotDataset("local/test", root=root, video_backend="pyav")
found["num_episodes"], found["num_frames"] = dataset.num_episodes, dataset.num_frames
found["frames"] = []
for index in range(dataset.num_frames):
    item = dataset.hf_dataset[index]
    found["frames"].append({key: item[key].tolist() for key in
                            ("episode_index", "frame_index", "index", "timestamp", "observation.state", "action",
                             "next.reward", "next.success", "next.done")}
                           | {"task": dataset.meta.tasks.iloc[item["task_index"].item()].name})
found["decoded"] = {}
for backend in backends:
    decoding = LeRobotDataset("local/test", root=root, video_backend=backend)
    found["decoded"][backend] = {str(i): decoding[i]["observation.images.top"].mul(255).mean().item()
                                 for i in frames_to_decode}
    item = decoding[frames_to_decode[-1]]
    found["item_task"] = item["task"]
episodes = dataset.meta.episodes
found["episode_columns"] = episodes.select_columns(
    [name for name in episodes.column_names
     if name.startswith("evalfleet/") or name in ("episode_index", "length", "tasks")]).to_dict()
successful = LeRobotDataset("local/test", root=root, episode_filter=lambda ep: ep["evalfleet/success"])
found["filtered"] = sorted({int(item) for item in successful.hf_dataset["episode_index"]})
found["stats_keys"] = sorted(dataset.meta.stats)
found["features"] = {key: {"dtype": ft["dtype"], "shape": list(ft["shape"])} for key, ft in dataset.features.items()}
print(json.dumps(found))
"""


def read_with_lerobot(python: Path, root: Path, frames: list[int], tmp_path: Path) -> dict:
    env = venv_env() | {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}  # no downloads, no shared cache
    proc = subprocess.run([str(python), "-c", READ_WITH_LEROBOT, str(root), json.dumps(frames)], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("split", [False, True], ids=["one file each", "a file per episode, two per chunk"])
def test_lerobot_loads_every_frame_as_written(lerobot_py, episodes, tmp_path, monkeypatch, split):  # noqa: F811
    limits = {}
    if split:  # every file holds one episode, a chunk folder two files
        limits = {"data_files_size_in_mb": 1e-6, "video_files_size_in_mb": 1e-6}
        monkeypatch.setattr(lerobot_dataset, "CHUNK_SIZE", 2)
        monkeypatch.setattr(lerobot_dataset, "EPISODE_ROWS_PER_WRITE", 1)
    summary = write_dataset(tmp_path / "dataset", iter(episodes), fps=FPS, robot_type="sim", **limits)
    assert (summary.episodes, summary.frames, summary.tasks) == (3, sum(LENGTHS), 2)
    files = {folder: [str(p.relative_to(tmp_path / "dataset" / folder)) for p in
                      sorted((tmp_path / "dataset" / folder).glob("*/*.*"))]
             for folder in ("data", "meta/episodes", f"videos/{CAMERA}")}
    if split:
        assert files == {folder: [f"chunk-000/file-000.{ext}", f"chunk-000/file-001.{ext}", f"chunk-001/file-000.{ext}"]
                         for folder, ext in (("data", "parquet"), ("meta/episodes", "parquet"),
                                             (f"videos/{CAMERA}", "mp4"))}
    else:
        assert [len(names) for names in files.values()] == [1, 1, 1]

    starts = np.cumsum((0, *LENGTHS))
    # the first and last frame of every episode, and one inside
    frames = sorted({int(i) for start, length in zip(starts, LENGTHS) for i in (start, start + length // 2,
                                                                               start + length - 1)})
    found = read_with_lerobot(lerobot_py, tmp_path / "dataset", frames, tmp_path)

    assert (found["num_episodes"], found["num_frames"]) == (3, sum(LENGTHS))
    for episode_index, episode in enumerate(episodes):
        for frame_index in range(LENGTHS[episode_index]):
            index = int(starts[episode_index]) + frame_index
            frame = found["frames"][index]
            assert (frame["episode_index"], frame["frame_index"], frame["index"]) == (episode_index, frame_index, index)
            assert frame["timestamp"] == pytest.approx(frame_index / FPS)
            assert frame["task"] == episode.task
            for key in ("observation.state", "action"):
                np.testing.assert_array_equal(np.float32(frame[key]), episode.columns[key][frame_index], err_msg=key)
            for key in ("next.reward", "next.success", "next.done"):
                assert frame[key] == episode.columns[key][frame_index], (key, index)
    for backend, decoded in found["decoded"].items():
        for index in frames:
            episode_index = int(np.searchsorted(starts, index, side="right")) - 1
            expected = pixel_value(episode_index, index - int(starts[episode_index]))
            assert abs(decoded[str(index)] - expected) <= CODEC_TOLERANCE, (backend, index, decoded[str(index)])
    assert found["item_task"] == TASKS[2]

    columns = found["episode_columns"]
    assert columns["episode_index"] == [0, 1, 2] and columns["length"] == list(LENGTHS)
    assert columns["tasks"] == [[task] for task in TASKS]
    assert columns["evalfleet/seed"] == [100, 101, 102]
    assert columns["evalfleet/success"] == [False, True, False]
    assert columns["evalfleet/failure_code"] == ["timeout", None, "timeout"]
    assert columns["evalfleet/progress"] == [None, 0.5, 1.0]
    assert [json.loads(text) for text in columns["evalfleet/variations"]] == [{"light": 0.1 * i} for i in range(3)]
    assert found["filtered"] == [1]
    assert found["features"][CAMERA] == {"dtype": "video", "shape": [HEIGHT, WIDTH, 3]}
    assert found["features"]["next.success"] == {"dtype": "bool", "shape": [1]}
    assert found["stats_keys"] == sorted([*episodes[0].columns, CAMERA, "timestamp", "frame_index", "episode_index",
                                          "index", "task_index"])


# --- plain Python: the files themselves -------------------------------------------------------------------------


def test_statistics_are_those_of_every_frame(episodes, tmp_path):
    write_dataset(tmp_path / "dataset", episodes, fps=FPS)
    stats = json.loads((tmp_path / "dataset" / "meta" / "stats.json").read_text())
    for key in ("observation.state", "action", "next.reward"):
        values = np.concatenate([e.columns[key].reshape(len(e.columns[key]), -1) for e in episodes]).astype(float)
        assert stats[key]["count"] == [sum(LENGTHS)]
        for name, expected in (("min", values.min(0)), ("max", values.max(0)), ("mean", values.mean(0)),
                               ("std", values.std(0)), ("q01", np.quantile(values, 0.01, axis=0)),
                               ("q50", np.quantile(values, 0.5, axis=0)), ("q99", np.quantile(values, 0.99, axis=0))):
            np.testing.assert_allclose(stats[key][name], expected, rtol=1e-9, atol=1e-9, err_msg=f"{key} {name}")
    camera = stats[CAMERA]
    pixels = np.array([pixel_value(e, f) for e, length in enumerate(LENGTHS) for f in range(length)]) / 255
    assert np.shape(camera["mean"]) == (3, 1, 1) and camera["count"] == [sum(LENGTHS)]
    for name, expected in (("min", pixels.min()), ("max", pixels.max()), ("mean", pixels.mean())):
        np.testing.assert_allclose(np.ravel(camera[name]), expected, atol=CODEC_TOLERANCE / 255, err_msg=name)

    episode_rows = pq.read_table(tmp_path / "dataset" / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    np.testing.assert_allclose(episode_rows.column("stats/action/max").to_pylist()[2], episodes[2].columns["action"]
                               .max(0))


def test_quantiles_past_the_sample_size_stay_close(tmp_path, monkeypatch):
    sample = 5000
    monkeypatch.setattr(lerobot_dataset, "RESERVOIR_ROWS", sample)
    rng = np.random.default_rng(1)
    values = rng.normal(size=(40, 500, 2)).astype(np.float32)
    write_dataset(tmp_path / "dataset", (DatasetEpisode({"action": v}, "t", {}) for v in values), fps=FPS)
    stats = json.loads((tmp_path / "dataset" / "meta" / "stats.json").read_text())["action"]
    everything = values.reshape(-1, 2).astype(float)
    for name, q in lerobot_dataset.QUANTILES.items():
        # the sampled quantile's rank: within 4 standard errors of the true one
        margin = 4 * np.sqrt(q * (1 - q) / sample)
        low, high = np.quantile(everything, [max(0, q - margin), min(1, q + margin)], axis=0)
        assert np.all((low <= stats[name]) & (stats[name] <= high)), (name, stats[name], low, high)
    assert stats["q50"] != np.quantile(everything, 0.5, axis=0).tolist()  # it was a sample, not every frame
    np.testing.assert_allclose(stats["mean"], everything.mean(0), rtol=1e-9)


def test_evalfleet_fields_keep_their_types(tmp_path):
    fields = [{"seed": 1, "progress": 1, "mixed": 1, "variations": {"a": 1}, "only_some": "x"},
              {"seed": 2, "progress": 0.5, "mixed": "one", "variations": {"a": [1, 2]}},
              {"seed": np.int64(3), "progress": None, "mixed": None, "variations": {}, "only_some": None}]
    write_dataset(tmp_path / "dataset", (DatasetEpisode({"action": np.zeros((2, 1), np.float32)}, "t", f)
                                         for f in fields), fps=FPS)
    table = pq.read_table(tmp_path / "dataset" / "meta" / "episodes")
    assert str(table.schema.field("evalfleet/seed").type) == "int64"
    assert table.column("evalfleet/seed").to_pylist() == [1, 2, 3]
    assert table.column("evalfleet/progress").to_pylist() == [1.0, 0.5, None]
    assert table.column("evalfleet/mixed").to_pylist() == ["1", '"one"', None]
    assert table.column("evalfleet/variations").to_pylist() == ['{"a": 1}', '{"a": [1, 2]}', "{}"]
    assert table.column("evalfleet/only_some").to_pylist() == ["x", None, None]
    # a scalar given as (L, 1) is lerobot's shape [1], a plain column
    assert str(pq.read_schema(next((tmp_path / "dataset" / "data").glob("*/*.parquet"))).field("action").type) == \
        "float"


# --- plain Python: bad input ------------------------------------------------------------------------------------


def refusal(tmp_path: Path, episodes: list[DatasetEpisode], **options) -> str:
    with pytest.raises(ValueError) as caught:
        write_dataset(tmp_path / "dataset", episodes, **({"fps": FPS} | options))
    assert not (tmp_path / "dataset").exists() and not (tmp_path / "dataset.partial").exists()
    return str(caught.value)


def with_columns(episode: DatasetEpisode, **columns) -> DatasetEpisode:
    return DatasetEpisode({**episode.columns, **columns}, episode.task, episode.metadata)


def test_an_episode_unlike_the_first_is_refused_naming_it_and_the_feature(tmp_path):
    first, second = make_episode(0, 4), make_episode(1, 5)
    message = refusal(tmp_path, [first, with_columns(second, action=np.zeros((5, 3), np.float32))])
    assert "episode 1" in message and "'action'" in message and "vector of 3" in message and "vector of 2" in message
    message = refusal(tmp_path, [first, with_columns(second, action=second.columns["action"].astype(np.float64))])
    assert "episode 1" in message and "'action'" in message and "float64" in message
    message = refusal(tmp_path, [first, first, DatasetEpisode({"action": first.columns["action"]}, "t", {})])
    assert "episode 2" in message and "missing" in message and "observation.state" in message
    message = refusal(tmp_path, [with_columns(first, action=np.zeros((3, 2), np.float32))])
    assert "episode 0" in message and "different lengths" in message
    assert "'index'" in refusal(tmp_path, [with_columns(first, index=np.arange(4))])
    assert "'/'" in refusal(tmp_path, [with_columns(first, **{"observation/state": np.zeros(4)})])
    assert "no episodes" in refusal(tmp_path, [])
    assert "whole number" in refusal(tmp_path, [first], fps=12.5)


def test_a_video_that_is_not_the_episode_is_refused(tmp_path):
    short = write_video(tmp_path / "short.mp4", 0, 3)
    message = refusal(tmp_path, [DatasetEpisode(make_episode(0, 4).columns, "t", {}, {CAMERA: short})])
    assert "episode 0" in message and CAMERA in message and "3 frames" in message
    message = refusal(tmp_path, [DatasetEpisode(make_episode(0, 4).columns, "t", {}, {CAMERA: str(tmp_path / "x")})])
    assert "no video file" in message
    (tmp_path / "noise.mp4").write_bytes(bytes(range(256)) * 40)
    noise = str(tmp_path / "noise.mp4")
    message = refusal(tmp_path, [DatasetEpisode(make_episode(0, 4).columns, "t", {}, {CAMERA: noise})])
    assert "cannot read the video" in message
    writer = Mp4Writer(tmp_path / "twice_as_fast.mp4", WIDTH, HEIGHT, 2 * FPS)
    for frame in range(4):
        writer.append(np.full((HEIGHT, WIDTH, 3), frame, np.uint8))
    writer.close()
    message = refusal(tmp_path, [DatasetEpisode(make_episode(0, 4).columns, "t", {},
                                                {CAMERA: str(tmp_path / "twice_as_fast.mp4")})])
    assert f"not at k / {FPS} s" in message


def test_an_existing_folder_is_refused_unless_overwritten(tmp_path):
    dest = tmp_path / "dataset"
    dest.mkdir()
    (dest / "mine.txt").write_text("keep")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        write_dataset(dest, [make_episode(0, 4)], fps=FPS)
    assert (dest / "mine.txt").read_text() == "keep"
    write_dataset(dest, [make_episode(0, 4)], fps=FPS, overwrite=True)
    assert not (dest / "mine.txt").exists()
    assert json.loads((dest / "meta" / "info.json").read_text())["total_frames"] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dataset"]


def test_a_failed_write_leaves_no_dataset_and_keeps_the_old_one(tmp_path):
    def failing():
        yield make_episode(0, 4)
        yield make_episode(1, 5)
        raise RuntimeError("the runner died")

    dest = tmp_path / "dataset"
    with pytest.raises(RuntimeError, match="runner died"):
        write_dataset(dest, failing(), fps=FPS)
    assert list(tmp_path.iterdir()) == []

    write_dataset(dest, [make_episode(0, 6)], fps=FPS)
    with pytest.raises(RuntimeError, match="runner died"):
        write_dataset(dest, failing(), fps=FPS, overwrite=True)
    assert json.loads((dest / "meta" / "info.json").read_text())["total_frames"] == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dataset"]


def test_a_crash_leftover_is_never_a_dataset_and_is_replaced(tmp_path):
    """A killed writer leaves `<dest>.partial` (never `dest`); the next write starts that folder afresh."""
    leftover = tmp_path / "dataset.partial"
    (leftover / "data").mkdir(parents=True)
    (leftover / "data" / "stale.parquet").write_text("half")
    write_dataset(tmp_path / "dataset", [make_episode(0, 4)], fps=FPS)
    assert not leftover.exists()
    assert not (tmp_path / "dataset" / "data" / "stale.parquet").exists()
