"""Wall-clock timing vs vla-eval's live mode (issue #28 must-show 4): the same Push-T episodes, both paced at
10 Hz in real time, both against a policy server whose every answer sleeps a fixed time and then pushes toward the
block. evalfleet: `timing: {mode: wall_clock, control_hz: 10, late_action: hold}` through `evalfleet.evaluate`
(the policy served over openpi's websocket protocol, asked on the runner's policy thread); vla-eval 0.8.0:
`LiveEpisodeRunner` over its own websocket server (bench/_vlaeval_live.py, in a subprocess). Stale ratio: held
steps / steps (vla-eval's `stale_action_ratio`).

    python bench/realtime_live.py [--episodes 3] [--max-steps 50] [--sleep-ms 150] [--repeats 3]

Prints JSON: per repeat and side the episodes' stale ratios, and their median and spread over the repeats. The
figures are the machine's (that is the point of wall-clock mode); `mode: simulated` gives ceil(150 ms * 10 Hz /
1000) = 2 held steps per call, exactly."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from _common import add_repeat_arg, emit, interleaved, machine, spread

HZ = 10.0


class SleepyPolicy:
    """What bench/_vlaeval_live.SleepyServer predicts, as an evalfleet in-process policy."""

    def __init__(self, sleep_s: float):
        self.sleep_s = sleep_s

    def act(self, observation: dict, env_id: int = 0) -> np.ndarray:
        time.sleep(self.sleep_s)
        return (np.asarray(observation["observation/state"], dtype=np.float64)[2:4] / 256.0 - 1.0).astype(np.float32)


def evalfleet_side(exp: Path, sleep_s: float, tmp: Path) -> list[float]:
    import evalfleet

    out = tmp / f"out-{time.monotonic_ns()}"
    evalfleet.evaluate(SleepyPolicy(sleep_s), exp, output=out, workers=1, log=lambda line: None)
    records = [json.loads(x) for x in (out / "pusht" / "episode_results.jsonl").read_text().splitlines()]
    return [r["timing"]["stale_ratio"] for r in sorted(records, key=lambda r: r["episode"])]


def vlaeval_side(seeds: list[int], max_steps: int, sleep_s: float) -> list[float]:
    args = json.dumps({"seeds": seeds, "max_steps": max_steps, "hz": HZ, "sleep_s": sleep_s})
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("_vlaeval_live.py")), args],
                          capture_output=True, text=True, check=True)
    return [round(x, 6) for x in json.loads(proc.stdout.strip().splitlines()[-1])["stale_ratio"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=50)
    parser.add_argument("--sleep-ms", type=float, default=150.0)
    add_repeat_arg(parser)
    args = parser.parse_args()
    before = machine()
    from evalfleet.experiment.loading import load_experiment
    from evalfleet.experiment.plan import make_plan

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        exp = tmp / "live.yaml"
        exp.write_text(yaml.safe_dump({"name": "realtime_live", "seed": 0, "runs": {"pusht": {
            "environment": {"type": "pusht", "obs_type": "state", "max_steps": args.max_steps},
            "policy": {"type": "zero"}, "rollout_limit": {"num_episodes": args.episodes},
            "timing": {"mode": "wall_clock", "control_hz": HZ, "late_action": "hold"}}}}))
        seeds = [e.seed for e in make_plan(load_experiment(exp)).runs["pusht"].episodes()]
        sleep_s = args.sleep_ms / 1000.0
        ours, theirs = interleaved(lambda: evalfleet_side(exp, sleep_s, tmp),
                                   lambda: vlaeval_side(seeds, args.max_steps, sleep_s), args.repeats)
    emit({"episodes": args.episodes, "seeds": seeds, "max_steps": args.max_steps, "control_hz": HZ,
          "server_sleep_ms": args.sleep_ms,
          "simulated_equivalent": {"latency_steps": int(np.ceil(args.sleep_ms * HZ / 1000))},
          "evalfleet_wall_clock": {"stale_ratio_per_repeat": ours,
                                   "mean_stale_ratio": spread([float(np.mean(r)) for r in ours])},
          "vlaeval_live": {"stale_ratio_per_repeat": theirs,
                           "mean_stale_ratio": spread([float(np.mean(r)) for r in theirs])}},
         machine_before=before)


if __name__ == "__main__":
    main()
