#!/usr/bin/env python3
"""Stand-in for Isaac Lab Arena's `/isaac-sim/python.sh isaaclab_arena/evaluation/experiment_runner.py`: takes
Arena's documented runner arguments, refuses a non-empty --experiment_output_directory as Arena's runner does, and
writes Arena's record format (tests/outputs/arena_output.py: EpisodeResultsRecorder lines with variations and
progress, camera videos named <prefix>-rebuild<R>-env<N>-<camera>-episode-<E>.mp4) into
<output>/<run>/episode_results_rebuild0.jsonl, one flushed line per episode, as Arena's recorder does.

STAND_IN_MODE picks the behaviour: ok (default) | crash_once (the first launch exits 1 after CRASH_AFTER
episodes) | hang (stops making output after the first episode). COLD_START_S: silent seconds before anything
(Isaac Sim's cold start). STAND_IN_STATE: a folder where launches are counted and what was read is noted."""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "outputs"))
from arena_output import arena_line


def main() -> int:
    script, *rest = sys.argv[1:]
    assert script == "isaaclab_arena/evaluation/experiment_runner.py", script
    parser = argparse.ArgumentParser()
    parser.add_argument("--experiment_config", required=True)
    parser.add_argument("--experiment_output_directory", required=True)
    parser.add_argument("--viz", required=True)
    parser.add_argument("--enable_cameras", action="store_true")
    parser.add_argument("--record_camera_video", action="store_true")
    parser.add_argument("--record_viewport_video", action="store_true")
    args = parser.parse_args(rest)
    out = Path(args.experiment_output_directory)
    if out.exists() and any(out.iterdir()):  # experiment_runner.py's _assert_exact_..._is_available
        print(f"Experiment output directory '{out}' is not empty.", file=sys.stderr)
        return 1
    state = Path(os.environ["STAND_IN_STATE"])
    state.mkdir(parents=True, exist_ok=True)
    launches = len(list(state.glob("launch-*"))) + 1
    config = yaml.safe_load(Path(args.experiment_config).read_text())
    (state / f"launch-{launches}").write_text(json.dumps({"argv": sys.argv[1:], "config": config}))
    time.sleep(float(os.environ.get("COLD_START_S", "0")))  # silent: no log line, no file
    mode = os.environ.get("STAND_IN_MODE", "ok")
    [(run, cfg)] = config["runs"].items()
    episodes = cfg["rollout_limit"]["num_episodes"]
    num_envs = (cfg.get("environment_builder") or {}).get("num_envs", 2)
    folder = out / run
    folder.mkdir(parents=True)
    print(f"[INFO] run {run}: {episodes} episodes", flush=True)
    rng = random.Random(7)
    with open(folder / "episode_results_rebuild0.jsonl", "a", encoding="utf-8") as f:
        for i in range(episodes):
            time.sleep(0.2)
            line = arena_line(run, i, num_envs=num_envs, success=rng.random() < 0.5, rebuild=0, rng=rng)
            f.write(json.dumps(line) + "\n")
            f.flush()
            if args.record_camera_video:
                name = f"{run}-rebuild0-env{line['env_id']}-wrist_camera-episode-{line['episode_in_env']}.mp4"
                (folder / name).write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(64))
            print(f"[INFO] episode {i} done", flush=True)
            if mode == "crash_once" and launches == 1 and i + 1 == int(os.environ.get("CRASH_AFTER", "2")):
                print("Segmentation fault (stand-in)", file=sys.stderr, flush=True)
                os._exit(139)
            if mode == "hang":
                while True:
                    time.sleep(60)
    print("[INFO] experiment done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
