"""Recording: k of N episodes become exactly k mp4 files per camera, each decoding to the episode's
frames at the asked size (at `fps`: one per 1/fps s of simulated time, the first observation included;
`every_step`: the first observation + one per step); the record points at them, and recording never
changes an episode's result."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evalfleet_testkit import metaworld_run, run_evalfleet
from evalfleet.experiment.loading import load_experiment
from evalfleet.experiment.plan import make_plan
from evalfleet.rollout.records import latest_records
from evalfleet.rollout.runner import run_shards
from evalfleet.rollout.video import FrameClock

av = pytest.importorskip("av")


def _decode(path: Path) -> np.ndarray:
    with av.open(str(path)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])


def _recorded_run(episodes: int, every: int, width: int, height: int, max_steps: int = 12, fps: int = 10,
                  every_step: bool = False, **env: object) -> dict:
    return metaworld_run(
        "reach-v3", policy_type="random", episodes=episodes,
        environment={"type": "metaworld", "task": "reach-v3", "max_steps": max_steps, **env},
        recording={"video": True, "cameras": ["corner", "gripperPOV"], "every_n_episodes": every,
                   "fps": fps, "width": width, "height": height, "every_step": every_step},
    )


def _metaworld_control_hz() -> float:
    """From the simulator itself: one control step is frame_skip physics steps of the model's timestep."""
    from evalfleet.sim.metaworld_env import make_task_env

    env = make_task_env("reach-v3")
    try:
        return 1.0 / (float(env.model.opt.timestep) * int(env.frame_skip))
    finally:
        env.close()


def _fps(path: Path) -> float:
    with av.open(str(path)) as container:
        return float(container.streams.video[0].average_rate)


@pytest.mark.parametrize("env_renders", [False, True], ids=["state-run", "camera-run-frames-reused"])
def test_records_every_kth_episode_per_camera(write_experiment, tmp_path, env_renders):
    env = {"cameras": ["corner"], "image_size": [64, 96]} if env_renders else {}
    path = write_experiment({"rec": _recorded_run(episodes=7, every=3, width=96, height=64, max_steps=40, fps=20,
                                                  **env)})
    plan = make_plan(load_experiment(path), shard_size=3)  # episodes 0,3,6 land in three different shards
    out = tmp_path / "out"
    run_shards(plan.runs, plan.shards, out)
    records = latest_records(out, "rec")
    assert sorted(records) == list(range(7))
    hz = _metaworld_control_hz()
    for camera in ("corner", "gripperPOV"):
        files = sorted((out / "rec" / "videos" / camera).glob("*.mp4"))
        assert [f.name for f in files] == [f"episode_{i:06d}.mp4" for i in (0, 3, 6)]
        for f in files:
            episode = int(f.stem.split("_")[1])
            frames = _decode(f)
            length = records[episode]["episode_length"]
            # a frame per 1/20 s of simulated time: every (hz / 20)-th state, the first one included
            assert frames.shape == (length * 20 // round(hz) + 1, 64, 96, 3)
            assert frames.shape[0] < length + 1  # fewer frames than states: only those the video shows
            assert _fps(f) == 20
            assert frames.std() > 1.0  # a picture, not a blank frame
    for i, rec in records.items():
        if i % 3 == 0:
            assert rec["video"] == {cam: f"videos/{cam}/episode_{i:06d}.mp4" for cam in ("corner", "gripperPOV")}
            assert all((out / "rec" / p).is_file() for p in rec["video"].values())
        else:
            assert rec.get("video") is None


def test_sizes_off_the_macro_block_are_scaled_up_to_multiples_of_16(write_experiment, tmp_path):
    path = write_experiment({"odd": _recorded_run(episodes=1, every=1, width=100, height=60, max_steps=3,
                                                  every_step=True)})
    plan = make_plan(load_experiment(path))
    run_shards(plan.runs, plan.shards, tmp_path / "o")
    frames = _decode(tmp_path / "o" / "odd" / "videos" / "corner" / "episode_000000.mp4")
    assert frames.shape == (4, 64, 112, 3)


@pytest.mark.slow
def test_evalfleet_run_with_two_workers_records_k_of_n(write_experiment, tmp_path):
    path = write_experiment({"rec": _recorded_run(episodes=6, every=2, width=64, height=64, max_steps=8,
                                                  every_step=True)})
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


def test_every_step_records_each_state_at_the_control_rate(write_experiment, tmp_path):
    """Full-rate recording: the first observation and the state after every step, played in real time."""
    path = write_experiment({"full": _recorded_run(episodes=1, every=1, width=64, height=64, max_steps=10,
                                                   fps=20, every_step=True)})
    plan = make_plan(load_experiment(path))
    run_shards(plan.runs, plan.shards, tmp_path / "o")
    length = latest_records(tmp_path / "o", "full")[0]["episode_length"]
    video = tmp_path / "o" / "full" / "videos" / "corner" / "episode_000000.mp4"
    assert _decode(video).shape[0] == length + 1
    assert _fps(video) == pytest.approx(_metaworld_control_hz())


def test_recording_does_not_change_any_result(write_experiment, tmp_path):
    """The same episodes with and without recording (sampled and full rate) give the same records."""
    def run(name: str, **recording: object) -> dict:
        spec = metaworld_run("push-v3", episodes=3, environment={"type": "metaworld", "task": "push-v3",
                                                                  "max_steps": 40})
        if recording:
            spec["recording"] = {"video": True, "cameras": ["corner"], "every_n_episodes": 1, "width": 64,
                                 "height": 64, **recording}
        path = write_experiment({"same": spec}, filename=f"{name}.yaml")
        plan = make_plan(load_experiment(path))
        run_shards(plan.runs, plan.shards, tmp_path / name)
        records = latest_records(tmp_path / name, "same")
        return {i: (r["status"], r["success"], r["episode_length"], r["seed"], r.get("error"))
                for i, r in records.items()}

    plain = run("plain")
    assert sorted(plain) == [0, 1, 2] and all(status != "error" for status, *_ in plain.values())
    assert run("sampled", fps=20) == plain
    assert run("full", every_step=True) == plain
    assert len(list((tmp_path / "full" / "same" / "videos" / "corner").glob("*.mp4"))) == 3


@pytest.mark.parametrize("fps,hz", [(20, 80.0), (10, 80.0), (20, 30.0), (15, 20.0), (7, 1 / (0.002 * 5))])
def test_frame_clock_picks_one_state_per_frame_time(fps, hz):
    clock = FrameClock(fps, hz)
    for length in range(0, 200):
        wanted = [s for s in range(length + 1) if clock.wants(s)]
        assert len(wanted) == clock.frames(length)
        assert wanted[0] == 0
        # frame k shows the first state at or after k/fps seconds
        for k, step in enumerate(wanted):
            assert step / hz >= k / fps - 1e-9 and (step - 1) / hz < k / fps - 1e-9


@pytest.mark.parametrize("fps,hz,every_step", [(20, None, False), (80, 80.0, False), (100, 80.0, False),
                                               (20, 80.0, True)])
def test_frame_clock_takes_every_state_when_asked_or_when_it_cannot_sample(fps, hz, every_step):
    clock = FrameClock(fps, hz, every_step)
    assert all(clock.wants(s) for s in range(50)) and clock.frames(49) == 50
    assert clock.playback_fps == (hz if hz else fps)
