"""The recorded trajectories as a LeRobotDataset v3.0 (#54, must show 1): a Push-T Experiment (state) and a
Meta-World one (a camera as video) are run by `evalfleet run`; lerobot's own `LeRobotDataset` opens each dataset in
LeRobot's venv, and its frames, actions, episode boundaries and episode metadata are checked against the records and
the runner's trajectory files. Then `evalfleet trajectories --export` writes the failures alone as a dataset that
lerobot opens too."""

from __future__ import annotations

import json
import subprocess
import textwrap

import numpy as np
from lerobot_testkit import lerobot_py, run_cli, venv_env  # noqa: F401 - lerobot_py is a fixture

from evalfleet.rollout.trajectory import read_trajectory

READ = textwrap.dedent("""
    import json, sys
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    ds = LeRobotDataset("local/evalfleet", root=sys.argv[1])
    camera = sys.argv[2] if len(sys.argv) > 2 else None
    out = {"episodes": ds.num_episodes, "frames": ds.num_frames, "fps": ds.fps, "per_episode": []}
    for i in range(ds.num_episodes):
        ep = ds.meta.episodes[i]
        start, end = ep["dataset_from_index"], ep["dataset_to_index"]
        frames = [ds[k] for k in range(start, end)]
        row = {"length": end - start, "run": ep["evalfleet/run"], "episode": ep["evalfleet/episode"],
               "seed": ep["evalfleet/seed"], "success": ep["evalfleet/success"], "status": ep["evalfleet/status"],
               "episode_index": [int(f["episode_index"]) for f in frames],
               "frame_index": [int(f["frame_index"]) for f in frames],
               "actions": [f["action"].tolist() for f in frames],
               "states": [f["observation.state"].tolist() for f in frames],
               "next_success": [bool(f["next.success"]) for f in frames], "task": frames[0]["task"]}
        if camera:
            images = [frames[k]["observation.images." + camera] for k in (0, len(frames) - 1)]
            row["image_shape"] = list(images[0].shape)
            row["image_mean"] = [float(x.float().mean()) for x in images]
        out["per_episode"].append(row)
    print(json.dumps(out))
""")


def read_dataset(python, path, camera: str | None = None) -> dict:
    proc = subprocess.run([str(python), "-c", READ, str(path), *([camera] if camera else [])], capture_output=True,
                          text=True, env=venv_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def write(tmp_path, name: str, text: str):
    path = tmp_path / f"{name}.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def check_against_the_run(out, dataset: dict, run: str) -> None:
    """The dataset's episodes of `run` against its records and the runner's trajectory files."""
    records = {r["episode"]: r for r in map(json.loads, (out / run / "episode_results.jsonl").read_text()
                                            .splitlines())}
    mine = [(index, ep) for index, ep in enumerate(dataset["per_episode"]) if ep["run"] == run]
    assert sorted(ep["episode"] for _, ep in mine) == sorted(records)
    for index, ep in mine:
        rec = records[ep["episode"]]
        assert (ep["seed"], ep["success"], ep["status"]) == (rec["seed"], rec["success"], rec["status"])
        assert ep["length"] == rec["episode_length"]
        assert ep["episode_index"] == [index] * ep["length"] and ep["frame_index"] == list(range(ep["length"]))
        assert ep["next_success"][-1] == rec["success"] and not any(ep["next_success"][:-1])
        table, _ = read_trajectory(out / run / "trajectories" / f"episode_{ep['episode']:06d}.arrow")
        np.testing.assert_allclose(ep["actions"], table.column("action").to_pylist(), rtol=1e-6)
        np.testing.assert_allclose(ep["states"], table.column("observation.state").to_pylist(), rtol=1e-6)
        assert ep["task"]


def test_pusht_and_metaworld_datasets_open_in_lerobot(lerobot_py, tmp_path):  # noqa: F811 - the fixture
    pusht = write(tmp_path, "pusht", """
        name: pusht_trajectories
        runs:
          pusht_random:
            environment: {type: pusht, obs_type: state, actions: normalized, max_steps: 25}
            policy: {type: random}
            rollout_limit: {num_episodes: 3}
            recording: {trajectories: {keys: [state, action, reward, success, done]}}
        """)
    proc = run_cli("run", str(pusht), "--output", str(tmp_path / "p"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    dataset = read_dataset(lerobot_py, tmp_path / "p" / "dataset")
    assert dataset["fps"] == 10  # Push-T declares no control rate: the setting's default
    assert dataset["episodes"] == 3 and dataset["frames"] == sum(e["length"] for e in dataset["per_episode"])
    check_against_the_run(tmp_path / "p", dataset, "pusht_random")

    metaworld = write(tmp_path, "mw", """
        name: metaworld_trajectories
        shared:
          environment: {type: metaworld, task: push-v3, max_steps: 40}
          rollout_limit: {num_episodes: 2}
          recording: {trajectories: {keys: [state, action, success, done], cameras: [corner], width: 32}}
        runs:
          push_expert:
            policy: {type: metaworld_expert}
          push_zero:
            policy: {type: zero}
        """)
    proc = run_cli("run", str(metaworld), "--output", str(tmp_path / "m"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    dataset = read_dataset(lerobot_py, tmp_path / "m" / "dataset", "corner")
    assert dataset["fps"] == 80 and dataset["episodes"] == 4
    assert dataset["frames"] == sum(e["length"] for e in dataset["per_episode"])
    for run in ("push_expert", "push_zero"):
        check_against_the_run(tmp_path / "m", dataset, run)
    for ep in dataset["per_episode"]:
        assert ep["image_shape"] == [3, 32, 32]  # channels first, as LeRobot decodes video
        assert all(m > 0.01 for m in ep["image_mean"])  # a rendered scene, not black frames

    proc = run_cli("trajectories", str(tmp_path / "m"), "--run", "push_zero", "--export", str(tmp_path / "zero"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    exported = read_dataset(lerobot_py, tmp_path / "zero", "corner")
    assert exported["episodes"] == 2 and {e["run"] for e in exported["per_episode"]} == {"push_zero"}
