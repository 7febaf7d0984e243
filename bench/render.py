"""Offscreen rendering cost, the run-time overhead of video recording, and (optionally) how the
camera-based `metaworld_vision` policy does at nominal and with its camera moved.

    python bench/render.py [--frames 100] [--episodes 20] [--repeats 3] [--vision-episodes 0] [--vision-offset 0.03]

Every figure is measured `--repeats` times and printed as median and spread, with the machine beside it.

Prints JSON:
- `ms_per_frame`: one RGB frame of Meta-World's `corner` camera (pick-place-v3) at 128 and 224 px,
  `fast` (no shadows/reflections/skybox/multisampling) and `default` quality, after a warm-up;
- `recording_state_policy` / `recording_camera_policy`: wall time of one Run (push-v3, scripted
  expert, `--episodes` episodes, one process via run_shards) without recording and with
  `recording: {video: true, cameras: [corner], every_n_episodes: 10}` at 224×224, and the relative
  overhead; the state Run renders nothing otherwise (so recording pays for every frame, ~10x a
  physics step), the camera Run renders corner + gripperPOV at 224 px every step as a camera policy's
  would (recording reuses those frames: only encoding is added);
- `vision_policy` (when --vision-episodes > 0): success of `metaworld_vision` (corner camera, 160 px)
  on pick-place-v3 and push-v3 at nominal and with `camera.position_offset` uniform in ±offset
  metres per axis.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from _common import add_repeat_arg, emit, machine, spread


def ms_per_frame(frames: int, repeats: int = 1) -> dict[str, dict]:
    from evalfleet.sim.metaworld_env import make_task_env
    from evalfleet.sim.rendering import OffscreenRenderer

    env = make_task_env("pick-place-v3")
    env.seed(0)
    env.reset()
    out = {}
    for quality in ("fast", "default"):
        for size in (128, 224):
            renderer = OffscreenRenderer(env.model, size, size, quality)
            for _ in range(5):
                renderer.render(env.data, "corner")
            timings = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                for _ in range(frames):
                    renderer.render(env.data, "corner")
                timings.append(1000 * (time.perf_counter() - t0) / frames)
            out[f"{size}px_{quality}"] = spread(timings, 3)
            renderer.close()
    env.close()
    return out


def _timed_run(root: Path, name: str, episodes: int, recording: dict | None, cameras: bool = False
               ) -> tuple[float, int]:
    from evalfleet.experiment.loading import load_experiment
    from evalfleet.experiment.plan import make_plan
    from evalfleet.rollout.runner import latest_records, run_shards

    run = {
        "environment": {"type": "metaworld", "task": "push-v3", "max_steps": 150},
        "policy": {"type": "metaworld_expert"},
        "rollout_limit": {"num_episodes": episodes},
    }
    if recording:
        run["recording"] = recording
    if cameras:  # what a camera policy's Run renders every step anyway
        run["environment"].update(cameras=["corner", "gripperPOV"], image_size=224)
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "seed": 0, "runs": {name: run}}))
    plan = make_plan(load_experiment(path))
    t0 = time.perf_counter()
    run_shards(plan.runs, plan.shards, root / name)
    elapsed = time.perf_counter() - t0
    steps = sum(r["episode_length"] for r in latest_records(root / name, name).values())
    return elapsed, steps


def recording_overhead(episodes: int, cameras: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _timed_run(root, "warmup", 1, None, cameras)
        plain, steps = _timed_run(root, "plain", episodes, None, cameras)
        rec = {"video": True, "cameras": ["corner"], "every_n_episodes": 10, "fps": 20, "width": 224, "height": 224}
        recorded, _ = _timed_run(root, "recorded", episodes, rec, cameras)
        videos = len(list((root / "recorded" / "recorded" / "videos" / "corner").glob("*.mp4")))
    return {
        "episodes": episodes, "steps": steps, "videos": videos,
        "seconds_without": round(plain, 3), "seconds_with_every_10th": round(recorded, 3),
        "overhead": round(recorded / plain - 1.0, 4),
    }


def vision_success(task: str, episodes: int, offset: float) -> float:
    from evalfleet.policies.base import PolicyContext
    from evalfleet.policies.vision import _make
    from evalfleet.sim.metaworld_env import MetaworldEnvironment
    from evalfleet.sim.metaworld_spec import MetaworldOptions

    opts = {"task": task, "cameras": ["corner"], "depth": True, "segmentation": True, "image_size": 160,
            "max_steps": 150}
    env = MetaworldEnvironment(MetaworldOptions(**opts))
    policy = _make({}, PolicyContext(run="bench", task=task, env_type="metaworld", env_options=opts))
    rng = np.random.default_rng(0)
    wins = 0
    for ep in range(episodes):
        variations = {"camera.position_offset": rng.uniform(-offset, offset, 3).tolist()} if offset else {}
        obs = env.reset(10_000 + ep, variations)
        policy.reset(10_000 + ep)
        while True:
            result = env.step(policy.act(obs))
            obs = result.observation
            if result.done:
                wins += result.success
                break
    env.close()
    return wins / episodes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=100)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--vision-episodes", type=int, default=0)
    ap.add_argument("--vision-offset", type=float, default=0.03)
    add_repeat_arg(ap)
    args = ap.parse_args(argv)
    from evalfleet.sim.rendering import gl_backend

    before = machine()

    def repeated_overhead(cameras: bool) -> dict:
        runs = [recording_overhead(args.episodes, cameras=cameras) for _ in range(args.repeats)]
        return {"episodes": args.episodes, "steps": runs[0]["steps"], "videos": runs[0]["videos"],
                **{k: spread([r[k] for r in runs], 4) for k in ("seconds_without", "seconds_with_every_10th",
                                                                  "overhead")}}

    report: dict = {"backend": gl_backend(), "ms_per_frame": ms_per_frame(args.frames, args.repeats),
                    "recording_state_policy": repeated_overhead(False),
                    "recording_camera_policy": repeated_overhead(True)}
    if args.vision_episodes:
        report["vision_policy"] = {
            task: {
                "episodes": args.vision_episodes,
                "nominal": vision_success(task, args.vision_episodes, 0.0),
                f"camera_offset_pm{args.vision_offset:g}m": vision_success(task, args.vision_episodes,
                                                                           args.vision_offset),
            }
            for task in ("pick-place-v3", "push-v3")
        }
    emit(report, machine_before=before)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
