"""Arena-format output folders for tests: lines as Arena's EpisodeResultsRecorder writes them (keys taken from
isaaclab_arena/evaluation/episode_results_recorder.py: job_name, rebuild_idx, global_episode_index,
episode_in_env, env_id, seed, success, episode_length, language_instruction, task_description, an ISO
timestamp), plus the per-episode variation values and Arena's progress map (overall_score, all_complete,
criteria_by_name, events), and camera videos named <prefix>-rebuild<R>-env<N>-<camera>-episode-<E>.mp4."""

from __future__ import annotations

import datetime
import json
import random
from pathlib import Path
from typing import Any

CRITERIA = ("reached", "grasped", "lifted", "placed")


def arena_line(run: str, i: int, *, num_envs: int, success: bool, rebuild: int, rng: random.Random) -> dict[str, Any]:
    reached = len(CRITERIA) if success else rng.randrange(len(CRITERIA))
    return {
        "job_name": run, "rebuild_idx": rebuild, "global_episode_index": i, "episode_in_env": i // num_envs,
        "env_id": i % num_envs, "seed": 1000 + i, "success": success, "episode_length": rng.randrange(50, 400),
        "language_instruction": None, "task_description": "Put the banana in the bowl.",
        "timestamp": datetime.datetime(2026, 1, 1, 0, 0, i).isoformat(),
        "variations": {"light": {"hdr_image": rng.choice(["home_office_robolab", "garage_robolab"])},
                       "droid_abs_joint_pos": {"camera_extrinsics_wrist_camera": [rng.uniform(-0.04, 0.04)
                                                                                   for _ in range(3)]}},
        "progress": {"overall_score": reached / len(CRITERIA), "all_complete": success,
                     "criteria_by_name": {c: {"complete": k < reached} for k, c in enumerate(CRITERIA)},
                     "events": [{"criterion": c, "step": 10 * (k + 1)} for k, c in enumerate(CRITERIA[:reached])]},
    }


def write_arena_run(root: Path, run: str, *, episodes: int, rate: float, task: str, policy: str, seed: int,
                    rebuilds: int = 1, num_envs: int = 2, videos: bool = True) -> Path:
    """<root>/<run>/episode_results_rebuild<R>.jsonl (+ videos, + evalfleet's run_status.json)."""
    rng = random.Random(seed)
    folder = root / run
    folder.mkdir(parents=True)
    per = episodes // rebuilds
    for r in range(rebuilds):
        lines = [arena_line(run, i, num_envs=num_envs, success=rng.random() < rate, rebuild=r, rng=rng)
                 for i in range(per)]
        (folder / f"episode_results_rebuild{r}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        if videos:
            for line in lines[:2]:
                name = f"{run}-rebuild{r}-env{line['env_id']}-wrist_camera-episode-{line['episode_in_env']}.mp4"
                (folder / name).write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(64))
    (folder / "run_status.json").write_text(json.dumps({"run": run, "task": task, "policy": policy,
                                                        "planned_episodes": episodes, "state": "completed"}))
    return folder
