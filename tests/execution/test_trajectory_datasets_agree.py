"""The recorded trajectories' dataset does not depend on how the Experiment ran (#54, must show 2): one small
Meta-World Experiment (two Runs, one with action noise as a variation; state, action, reward, success, done,
progress and a 32 px camera) through `evalfleet run` as real processes on 1 worker, on 2 workers, on the Ray backend
(a private local instance), and SIGKILLed while both runners are inside an episode whose camera video is being
written, then `--resume`d. Each OUT/dataset/ equals the 1-worker one: the data Parquet frames (every column, in the
same `index` / `episode_index` order), the meta/episodes rows, meta/tasks, meta/info.json, meta/stats.json (numbers
to float tolerance) and the decoded video frames (bit-exact: one-thread libx264 without its macroblock tree is
deterministic; only the container's timestamps are left out, as they are the packet copy's)."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from evalfleet_testkit import (evalfleet_cmd, plugin_env, process_gone, results_by_episode, run_evalfleet,
                               runners_at_gate, wait_for)

pytestmark = pytest.mark.slow

CAMERA = "observation.images.corner"
# The expert behind a gate (evalfleet_test_plugins.GatedExpert) in every run, so that all four run one Experiment:
# a gate already released lets it through; the killed run's holds each runner inside its second episode.
EXPERIMENT = {
    "name": "trajectories_agree", "seed": 0,
    "shared": {
        "environment": {"type": "metaworld", "max_steps": 40},
        "policy": {"type": "test_gated_expert", "after_episodes": 1, "at_call": 30},
        "policy_name": "expert",
        "rollout_limit": {"num_episodes": 3},
        "recording": {"trajectories": {"keys": ["state", "action", "reward", "success", "done", "progress"],
                                       "cameras": ["corner"], "width": 32},
                      # and the episode videos of `recording.video`, which reach OUT the same way on Ray
                      "video": True, "cameras": ["corner"], "every_n_episodes": 2, "width": 32, "height": 32},
    },
    "runs": {
        "reach": {"environment": {"task": "reach-v3"}},
        "push_noisy": {"environment": {"task": "push-v3"}, "variations": {
            "robot.action_noise": {"enabled": True, "distribution": "uniform", "low": 0.0, "high": 0.6}}},
    },
}


@pytest.fixture(scope="module")
def experiment(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("agree") / "experiment.yaml"
    path.write_text(yaml.safe_dump(EXPERIMENT, sort_keys=False))
    return path


def gate(folder: Path, *, released: bool) -> Path:
    folder.mkdir()
    if released:
        (folder / "release").touch()
    return folder


def run(experiment: Path, out: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    proc = run_evalfleet("run", str(experiment), f"shared.policy.gate={gate(out.with_name('gate'), released=True)}",
                         "--output", str(out), "--no-progress", *args, env=plugin_env(**env))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def reference(experiment: Path) -> Path:
    out = experiment.parent / "one" / "out"
    out.parent.mkdir()
    run(experiment, out, "--workers", "1")
    records = results_by_episode(out)
    assert len(records) == 6 and {r[1] for r in records.values()} == {"success", "failure"}  # both endings
    return out


# --- reading a dataset ------------------------------------------------------------------------------------------


def parquet(folder: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted(folder.glob("chunk-*/file-*.parquet"))
    assert files, f"no Parquet file under {folder}"
    return pa.concat_tables(pq.read_table(f) for f in files)


def decoded_frames(dataset: Path) -> np.ndarray:
    """Every frame of the camera's video files, decoded to RGB, in file order."""
    import av

    frames = []
    for path in sorted((dataset / "videos" / CAMERA).glob("chunk-*/file-*.mp4")):
        with av.open(str(path)) as container:
            frames += [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    return np.stack(frames)


def assert_tables_equal(got, want, what: str, *, approx: tuple[str, ...] = ()) -> None:
    """Same columns, types and rows; a column whose name starts with one of `approx` to float tolerance, every
    other exactly (NaN where the other has NaN)."""
    assert got.schema.equals(want.schema, check_metadata=True), f"{what}: schemas differ\n{got.schema}\n{want.schema}"
    assert got.num_rows == want.num_rows, what
    for name in want.column_names:
        a, b = got.column(name).to_pylist(), want.column(name).to_pylist()
        if name.startswith(approx):
            np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol=1e-9,
                                       atol=1e-12, err_msg=f"{what}: {name}")
        elif any(isinstance(v, (float, list)) for v in b):
            np.testing.assert_array_equal(np.asarray(a, dtype=object if name.startswith("tasks") else None),
                                          np.asarray(b, dtype=object if name.startswith("tasks") else None),
                                          err_msg=f"{what}: {name}")
        else:
            assert a == b, f"{what}: {name}: {a} != {b}"


def assert_same_numbers(got, want, where: str) -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), where
        for key in want:
            assert_same_numbers(got[key], want[key], f"{where}.{key}")
    else:
        np.testing.assert_allclose(np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64),
                                   rtol=1e-9, atol=1e-12, err_msg=where)


def assert_same_dataset(out: Path, reference: Path) -> None:
    got, want = out / "dataset", reference / "dataset"
    assert results_by_episode(out) == results_by_episode(reference)
    videos = sorted(p.relative_to(reference).as_posix() for p in reference.glob("*/videos/corner/episode_*.mp4"))
    assert videos and sorted(p.relative_to(out).as_posix() for p in out.glob("*/videos/corner/episode_*.mp4")) \
        == videos  # episodes 0 and 2 of each Run
    assert (got / "meta" / "info.json").is_file(), f"no dataset in {out}"
    assert sorted(p.relative_to(got).as_posix() for p in got.rglob("*")) == \
        sorted(p.relative_to(want).as_posix() for p in want.rglob("*"))  # the same files
    info = json.loads((want / "meta" / "info.json").read_text())
    assert json.loads((got / "meta" / "info.json").read_text()) == info
    assert (info["total_episodes"], info["fps"]) == (6, 80) and CAMERA in info["features"]

    data = parquet(want / "data")
    assert data.column("index").to_pylist() == list(range(info["total_frames"]))
    assert_tables_equal(parquet(got / "data"), data, "data")

    episodes = parquet(want / "meta" / "episodes")
    # Run by Run in the Experiment's order, each Run's episodes in plan order, whoever ran them
    assert [(r, e) for r, e in zip(episodes.column("evalfleet/run").to_pylist(),
                                    episodes.column("evalfleet/episode").to_pylist())] == \
        [(r, e) for r in ("reach", "push_noisy") for e in range(3)]
    assert_tables_equal(parquet(got / "meta" / "episodes"), episodes, "meta/episodes", approx=("stats/",))

    import pyarrow.parquet as pq

    assert_tables_equal(pq.read_table(got / "meta" / "tasks.parquet"), pq.read_table(want / "meta" / "tasks.parquet"),
                        "meta/tasks")
    assert_same_numbers(json.loads((got / "meta" / "stats.json").read_text()),
                        json.loads((want / "meta" / "stats.json").read_text()), "stats")

    frames = decoded_frames(want)
    assert frames.shape == (info["total_frames"], 32, 32, 3) and frames.std() > 1  # a rendered scene
    np.testing.assert_array_equal(decoded_frames(got), frames)


# --- the runs ---------------------------------------------------------------------------------------------------


def test_two_workers_write_the_same_dataset(experiment, reference):
    out = experiment.parent / "two" / "out"
    out.parent.mkdir()
    run(experiment, out, "--workers", "2", "--shard-size", "2")
    assert_same_dataset(out, reference)


def test_ray_writes_the_same_dataset(experiment, reference):
    """A private Ray instance: the shard tasks run in temporary folders, so the trajectories reach OUT through the
    driver (backends/ray/sink.py) as the records do."""
    pytest.importorskip("ray")
    out = experiment.parent / "ray" / "out"
    out.parent.mkdir()
    run(experiment, out, "--backend", "ray", "--workers", "2", "--shard-size", "2", RAY_AUTH_MODE="disabled",
        RAY_USAGE_STATS_ENABLED="0")
    assert_same_dataset(out, reference)


def test_sigkill_mid_episode_then_resume_writes_the_same_dataset(experiment, reference):
    """Each runner records one episode, then waits at the gate inside its next, its camera's mp4 half written under
    a temporary name; `evalfleet run` is SIGKILLed there, the orphaned runners stop, `--resume` completes."""
    out = experiment.parent / "killed" / "out"
    out.parent.mkdir()
    held = gate(out.with_name("gate"), released=False)
    proc = subprocess.Popen(evalfleet_cmd("run", str(experiment), f"shared.policy.gate={held}", "--output", str(out),
                                          "--workers", "2", "--shard-size", "2", "--no-progress"),
                            env=plugin_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        waiting = wait_for(lambda: runners_at_gate(held, 2), what="both runners at the gate")
        recorded = [json.loads(line) for p in out.glob("*/parts/*.jsonl") for line in p.read_text().splitlines()]
        assert 2 <= len(recorded) < 6 and all((out / r["run"] / "trajectories" / f"episode_{r['episode']:06d}.arrow")
                                          .is_file() for r in recorded)
        half_written = list(out.glob("*/trajectories/corner/.tmp-*.mp4"))
        assert len(half_written) == 2  # the episodes in flight, their videos being written
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        (held / "release").touch()  # the orphaned runners' policy call returns; they see their supervisor gone
    assert proc.returncode == -signal.SIGKILL
    assert all(process_gone(pid, timeout=60) for pid in waiting)
    done = run_evalfleet("run", "--resume", "--output", str(out), "--workers", "2", "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same_dataset(out, reference)
