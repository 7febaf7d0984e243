"""Benchmark: collect + plots + report of 100,000 synthetic episodes over 40 Runs, records parsed once.

Writes the Runs as runners leave them (two shard logs per Run, run_status.json) once, then, on a fresh copy
for every measurement, interleaves (ABBA, --repeats pairs):

  separate  what `evalfleet run` did before the pipeline: `collect` in place, then the success plot from
            `load_records` (the records parsed a second time), then `write_report` (a third time)
  finalize  `outputs.finalize.finalize`: collect, plot and report from the records parsed once

and prints JSON: median and spread of each, their ratio pair by pair, and the machine.

    python bench/collect.py [--episodes 100000] [--runs 40] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Timer, add_repeat_arg, emit, interleaved, machine, ratios, spread

from evalfleet.analysis.loading import load_records
from evalfleet.analysis.success import write_success_plots
from evalfleet.outputs.collect import collect
from evalfleet.outputs.finalize import finalize, write_report


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


def separate(root: str) -> dict:
    result = collect([root], root)
    write_success_plots(load_records([root]), Path(root) / "plots" / "success_rates.png")
    write_report(root)
    return result


def together(root: str) -> dict:
    return finalize(root).result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=40)
    add_repeat_arg(parser)
    args = parser.parse_args()
    start = machine()
    work = tempfile.mkdtemp(prefix="evalfleet-bench-collect-")
    template = os.path.join(work, "template")
    try:
        os.makedirs(template)
        make_runs(template, args.episodes, args.runs)
        results: dict[str, dict] = {}

        def measure(name: str, step) -> float:  # step: separate or together
            root = os.path.join(work, name)
            shutil.rmtree(root, ignore_errors=True)
            shutil.copytree(template, root)  # the same untouched folder every time (the copy is not timed)
            with Timer() as t:
                results[name] = step(root)
            results[name + "_html"] = os.path.getsize(os.path.join(root, "index.html"))
            return t.seconds

        before, after = interleaved(lambda: measure("separate", separate), lambda: measure("finalize", together),
                                    args.repeats)
        counts = {k: results[k]["summary"]["episodes"] for k in ("separate", "finalize")}
        assert counts["separate"] == counts["finalize"], counts  # the same result either way
        emit({
            "episodes": counts["finalize"]["recorded"], "runs": results["finalize"]["summary"]["runs"],
            "separate_s": spread(before), "finalize_s": spread(after),
            "finalize_over_separate": spread(ratios(after, before)),
            "index_html_bytes": results["finalize_html"],
            "bytes_per_episode": round(results["finalize_html"] / max(1, counts["finalize"]["recorded"]), 1),
        }, machine_before=start)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
