"""Benchmark: collect + report 100,000 synthetic episodes over 40 Runs.

Writes the Runs as runners leave them (two shard logs per Run, run_status.json), then times
`collect(sources=[OUT], output=OUT)` (in place) and `write_report(OUT)`, and prints JSON:
{episodes, runs, collect_s, report_s, total_s, index_html_bytes, bytes_per_episode}.

    python bench/collect.py [--episodes 100000] [--runs 40] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time

from evalfleet.outputs.collect import collect
from evalfleet.outputs.finalize import write_report


def make_runs(root: str, episodes: int, runs: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    per_run = episodes // runs
    tasks = ["pick-place", "drawer-open", "door-open", "button-press", "reach"]
    policies = ["expert", "random", "pi0", "gr00t", "diffusion", "act", "bc", "octo"]
    t0 = 1_760_000_000.0
    for r in range(runs):
        task, policy = tasks[r % len(tasks)], policies[(r // len(tasks)) % len(policies)]
        name = f"{task}_{policy}"
        run_dir = os.path.join(root, name)
        os.makedirs(os.path.join(run_dir, "parts"))
        p_success = rng.uniform(0.1, 0.9)
        shards = [open(os.path.join(run_dir, "parts", f"shard-{s:03d}.jsonl"), "w") for s in range(2)]
        for e in range(per_run):
            roll = rng.random()
            status = "error" if roll < 0.005 else ("success" if rng.random() < p_success else "failure")
            rec = {
                "run": name, "task": task, "policy": policy, "episode": e, "seed": rng.getrandbits(32),
                "status": status, "success": None if status == "error" else status == "success",
                "episode_length": rng.randint(40, 500), "duration_s": rng.uniform(0.5, 12.0),
                "variations": {"object.mass": rng.uniform(0.05, 1.0), "light.intensity": rng.uniform(0.2, 2.0),
                               "object.position": [rng.uniform(-0.2, 0.2), rng.uniform(-0.2, 0.2), 0.02]},
                "attempt": 1, "timestamp": t0 + r * 1000 + e * 0.5, "job_name": name, "env_id": e,
                "episode_in_env": 0, "policy_latency_ms": rng.uniform(2, 40),
            }
            if status == "error":
                rec["error"] = "policy server timeout"
            shards[e % 2].write(json.dumps(rec) + "\n")
        for f in shards:
            f.close()
        with open(os.path.join(run_dir, "run_status.json"), "w") as f:
            json.dump({"run": name, "task": task, "policy": policy, "planned_episodes": per_run,
                       "state": "completed", "reason": None}, f)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--keep", default=None, help="write the output here and keep it")
    args = parser.parse_args()
    root = args.keep or tempfile.mkdtemp(prefix="evalfleet-bench-collect-")
    if args.keep:
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(root)
    try:
        make_runs(root, args.episodes, args.runs)
        t0 = time.perf_counter()
        result = collect([root], root)
        t1 = time.perf_counter()
        path = write_report(root)
        t2 = time.perf_counter()
        size = os.path.getsize(path)
        episodes = result["summary"]["episodes"]["recorded"]
        print(json.dumps({
            "episodes": episodes, "runs": result["summary"]["runs"],
            "collect_s": round(t1 - t0, 3), "report_s": round(t2 - t1, 3), "total_s": round(t2 - t0, 3),
            "index_html_bytes": size, "bytes_per_episode": round(size / max(1, episodes), 1),
        }))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
