"""Benchmark: the cost of recording trajectories (#54), per step and as a share of the step, against the same Run
without recording, side by side in one process.

Two pairs of one Run each (push-v3, the scripted expert, `--episodes` episodes of at most 150 steps, run in this
process by run_shards, as a worker runs them):

  state    a state Run, without recording, and with `recording.trajectories` (the default keys: state, action,
           reward, success, done, progress): the Parquet frames alone. Goal: <= 5 %.
  camera   a Run that renders the `corner` camera at 224 px every step (what a camera policy's Run does anyway),
           without recording, and with the same trajectories plus that camera recorded: the frames the
           observation already holds are encoded (H.264). Goal: <= 25 % over rendering that camera.

A one-episode warm-up of each configuration takes the one-time costs (imports, the GL context, the encoder's first
use) out of the timed runs; each round runs every configuration, the order rotated each round (--repeats rounds).
Prints JSON: seconds per configuration (median and spread), the overhead ratio per pair (with - without) / without,
the added microseconds per step, and the trajectory files' size per step.

    python bench/trajectories.py [--episodes 20] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import add_repeat_arg, emit, machine, ratios, spread

TRAJECTORIES = {"keys": ["state", "action", "reward", "success", "done", "progress"]}
CONFIGS: dict[str, tuple[bool, dict[str, Any] | None]] = {  # name: (renders the camera, recording)
    "state_without": (False, None),
    "state_with": (False, {"trajectories": TRAJECTORIES}),
    "camera_without": (True, None),
    "camera_with": (True, {"trajectories": {**TRAJECTORIES, "cameras": ["corner"], "width": 224}}),
}


def timed_run(root: Path, name: str, episodes: int, camera: bool, recording: dict[str, Any] | None
              ) -> tuple[float, int, int]:
    """(seconds, steps, bytes of trajectory files) of one Run in this process."""
    from evalfleet.experiment.loading import load_experiment
    from evalfleet.experiment.plan import make_plan
    from evalfleet.rollout.records import latest_records
    from evalfleet.rollout.runner import run_shards

    run: dict[str, Any] = {"environment": {"type": "metaworld", "task": "push-v3", "max_steps": 150},
                           "policy": {"type": "metaworld_expert"}, "rollout_limit": {"num_episodes": episodes}}
    if camera:
        run["environment"].update(cameras=["corner"], image_size=224)
    if recording:
        run["recording"] = recording
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "seed": 0, "runs": {name: run}}))
    plan = make_plan(load_experiment(path))
    t0 = time.perf_counter()
    run_shards(plan.runs, plan.shards, root / name)
    elapsed = time.perf_counter() - t0
    steps = sum(r["episode_length"] for r in latest_records(root / name, name).values())
    folder = root / name / name / "trajectories"
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0
    return elapsed, steps, size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=20)
    add_repeat_arg(parser)
    args = parser.parse_args()
    os.environ.setdefault("MUJOCO_GL", "egl")
    start = machine()
    seconds: dict[str, list[float]] = {name: [] for name in CONFIGS}
    steps: dict[str, int] = {}
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="evalfleet-bench-trajectories-") as tmp:
        root = Path(tmp)
        for name, (camera, recording) in CONFIGS.items():
            timed_run(root, f"warmup_{name}", 1, camera, recording)
        names = list(CONFIGS)
        for i in range(args.repeats):
            for name in names[i % len(names):] + names[:i % len(names)]:
                elapsed, steps[name], sizes[name] = timed_run(root, f"{name}_{i}", args.episodes, *CONFIGS[name])
                seconds[name].append(elapsed)
    figures: dict[str, Any] = {"episodes": args.episodes, "steps": steps,
                               "seconds": {name: spread(values, 3) for name, values in seconds.items()}}
    for pair, goal in (("state", 0.05), ("camera", 0.25)):
        with_, without = seconds[f"{pair}_with"], seconds[f"{pair}_without"]
        overhead = [r - 1.0 for r in ratios(with_, without)]
        per_step_us = [1e6 * (a - b) / steps[f"{pair}_with"] for a, b in zip(with_, without)]
        figures[pair] = {"overhead": spread(overhead, 4), "added_us_per_step": spread(per_step_us, 1),
                         "step_us_without": round(1e6 * sorted(without)[len(without) // 2] / steps[f"{pair}_without"],
                                                  1),
                         "bytes_per_step": round(sizes[f"{pair}_with"] / max(1, steps[f"{pair}_with"]), 1),
                         "goal": goal, "meets_goal": spread(overhead, 4)["median"] <= goal}
    emit(figures, machine_before=start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
