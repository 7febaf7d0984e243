"""Synthetic episode records for the analysis tests, written with the real RecordWriter (a uniquely named
helper module: test folders here are not packages)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Callable

import numpy as np
from evalfleet.rollout.records import EpisodeRecord, RecordWriter


def episode_inputs(task_index: int, episode: int, variations: dict[str, Callable[[np.random.Generator], Any]]):
    """Like the plan: the seed depends only on (task, episode) and variation values only on the seed, so every
    policy of a task sees the same episodes."""
    seed = 10_000 * (task_index + 1) + episode
    rng = np.random.default_rng(seed)
    return seed, {name: draw(rng) for name, draw in variations.items()}


def write_run(
    root: Path,
    run: str,
    *,
    task: str | None,
    policy: str | None,
    task_index: int,
    episodes: int,
    success_prob: Callable[[dict[str, Any]], float],
    variations: dict[str, Callable[[np.random.Generator], Any]] | None = None,
    outcome_seed: int = 0,
    error_every: int = 0,
    progress: bool = False,
    file_name: str = "episode_results.jsonl",
) -> Path:
    """One evalfleet run folder: OUT/<run>/episode_results.jsonl (+ run_status.json)."""
    path = root / run / file_name
    outcome_rng = np.random.default_rng([outcome_seed, task_index])
    with RecordWriter(path, fsync=False) as writer:
        for i in range(episodes):
            seed, values = episode_inputs(task_index, i, variations or {})
            p = success_prob(values)
            ok = bool(outcome_rng.uniform() < p)
            status = "success" if ok else "failure"
            if error_every and i % error_every == error_every - 1:
                status = "error"
            writer.append(EpisodeRecord(
                run=run, task=task or run, policy=policy or "", episode=i, seed=seed, status=status,
                success=None if status == "error" else ok, episode_length=100, duration_s=1.5,
                variations=values, error="server down" if status == "error" else None,
                progress=float(np.clip(p + outcome_rng.normal(0, 0.1), 0, 1)) if progress else None,
            ))
    (root / run / "run_status.json").write_text(json.dumps(
        {"run": run, "task": task, "policy": policy, "planned_episodes": episodes, "state": "completed",
         "reason": None}))
    return path


def write_arena_run(root: Path, run: str, outcomes: list[bool], *, with_job_name: bool = True,
                    num_envs: int = 2, file_name: str = "episode_results_rebuild0.jsonl") -> Path:
    """Arena-style lines: no task/policy tags, no plan index; episodes numbered by (env_id, episode_in_env)."""
    path = root / run / file_name
    with RecordWriter(path, fsync=False) as writer:
        for i, ok in enumerate(outcomes):
            line: dict[str, Any] = {"env_id": i % num_envs, "episode_in_env": i // num_envs, "success": bool(ok),
                                    "episode_length": 50}
            if with_job_name:
                line["job_name"] = run
            writer.append(line)
    return path


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def assert_real_image(path: Path, size: tuple[int, int]) -> None:
    import matplotlib.image

    assert path.is_file() and path.stat().st_size > 5_000
    assert png_size(path) == size
    pixels = matplotlib.image.imread(path)
    assert pixels.shape[:2] == (size[1], size[0])
    assert float(pixels[..., :3].std()) > 0.01  # something is drawn


