"""Recording: k of N episodes become exactly k mp4 files per camera, each decoding to the episode's
frames (first observation + one per step) at the asked size; the record points at them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evalfleet_testkit import metaworld_run, run_evalfleet
from evalfleet.experiment.loading import load_experiment
from evalfleet.experiment.plan import make_plan
from evalfleet.rollout.runner import latest_records, run_shards

imageio = pytest.importorskip("imageio.v3")
pytest.importorskip("imageio_ffmpeg")


def _decode(path: Path) -> np.ndarray:
    return np.stack(list(imageio.imiter(path, plugin="FFMPEG")))


def _recorded_run(episodes: int, every: int, width: int, height: int, max_steps: int = 12, **env: object) -> dict:
    return metaworld_run(
        "reach-v3", policy_type="random", episodes=episodes,
        environment={"type": "metaworld", "task": "reach-v3", "max_steps": max_steps, **env},
        recording={"video": True, "cameras": ["corner", "gripperPOV"], "every_n_episodes": every,
                   "fps": 10, "width": width, "height": height},
    )


@pytest.mark.parametrize("env_renders", [False, True], ids=["state-run", "camera-run-frames-reused"])
def test_records_every_kth_episode_per_camera(write_experiment, tmp_path, env_renders):
    env = {"cameras": ["corner"], "image_size": [64, 96]} if env_renders else {}
    path = write_experiment({"rec": _recorded_run(episodes=7, every=3, width=96, height=64, **env)})
    plan = make_plan(load_experiment(path), shard_size=3)  # episodes 0,3,6 land in three different shards
    out = tmp_path / "out"
    run_shards(plan.runs, plan.shards, out)
    records = latest_records(out, "rec")
    assert sorted(records) == list(range(7))
    for camera in ("corner", "gripperPOV"):
        files = sorted((out / "rec" / "videos" / camera).glob("*.mp4"))
        assert [f.name for f in files] == [f"episode_{i:06d}.mp4" for i in (0, 3, 6)]
        for f in files:
            episode = int(f.stem.split("_")[1])
            frames = _decode(f)
            assert frames.shape == (records[episode]["episode_length"] + 1, 64, 96, 3)
            assert frames.std() > 1.0  # a picture, not a blank frame
    for i, rec in records.items():
        if i % 3 == 0:
            assert rec["video"] == {cam: f"videos/{cam}/episode_{i:06d}.mp4" for cam in ("corner", "gripperPOV")}
            assert all((out / "rec" / p).is_file() for p in rec["video"].values())
        else:
            assert rec.get("video") is None


def test_sizes_off_the_macro_block_are_scaled_up_to_multiples_of_16(write_experiment, tmp_path):
    path = write_experiment({"odd": _recorded_run(episodes=1, every=1, width=100, height=60, max_steps=3)})
    plan = make_plan(load_experiment(path))
    run_shards(plan.runs, plan.shards, tmp_path / "o")
    frames = _decode(tmp_path / "o" / "odd" / "videos" / "corner" / "episode_000000.mp4")
    assert frames.shape == (4, 64, 112, 3)


@pytest.mark.slow
def test_evalfleet_run_with_two_workers_records_k_of_n(write_experiment, tmp_path):
    path = write_experiment({"rec": _recorded_run(episodes=6, every=2, width=64, height=64, max_steps=8)})
    out = tmp_path / "out"
    proc = run_evalfleet("run", str(path), "--output", str(out), "--workers", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(x) for x in (out / "rec" / "episode_results.jsonl").read_text().splitlines() if x.strip()]
    assert sorted(r["episode"] for r in lines if r.get("video")) == [0, 2, 4]
    for camera in ("corner", "gripperPOV"):
        files = sorted((out / "rec" / "videos" / camera).glob("*.mp4"))
        assert len(files) == 3
        for f in files:
            assert _decode(f).shape == (9, 64, 64, 3)  # random policy never succeeds in 8 steps
