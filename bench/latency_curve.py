"""Success against simulated policy latency (issue #28 must-show 2): Meta-World's chunked scripted expert
(`metaworld_expert` with `chunk_size`) at 0, 50, 100, 200 and 400 ms, one Run per latency on the same episodes
(`timing: {mode: simulated, latency: {fixed_ms}}`), run by `evalfleet run`; then `evalfleet sensitivity
--factors timing.latency_ms` over the output. Reproducible: the figures depend on the seeds only.

    python bench/latency_curve.py [--episodes 20] [--task push-v3] [--chunk-size 10] [--late-action zero]

Prints JSON: per latency the success rate and its 95% Wilson interval (experiment_result.json, as the report shows
them), the mean stale ratio, and the sensitivity fit's slope per 100 ms with its interval."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from _common import emit, machine

LATENCIES_MS = (0, 50, 100, 200, 400)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--task", default="push-v3")
    parser.add_argument("--chunk-size", type=int, default=10)
    parser.add_argument("--late-action", choices=("hold", "zero"), default="zero")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--output", help="keep the output folder here (default: a temporary folder)")
    args = parser.parse_args()
    before = machine()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.output) if args.output else Path(tmp) / "out"
        runs = {f"latency_{ms:03d}ms": {
            "environment": {"type": "metaworld", "task": args.task},
            "policy": {"type": "metaworld_expert", "chunk_size": args.chunk_size},
            "policy_name": f"expert_chunk{args.chunk_size}",
            "rollout_limit": {"num_episodes": args.episodes},
            "timing": {"mode": "simulated", "latency": {"fixed_ms": ms}, "late_action": args.late_action},
        } for ms in LATENCIES_MS}
        exp = Path(tmp) / "latency.yaml"
        exp.write_text(yaml.safe_dump({"name": "latency_curve", "seed": 0, "runs": runs}, sort_keys=False))
        evalfleet = [sys.executable, "-m", "evalfleet.cli"]
        subprocess.run([*evalfleet, "run", str(exp), "--output", str(out), "--workers", str(args.workers),
                        "--no-progress"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([*evalfleet, "sensitivity", str(out), "--factors", "timing.latency_ms", "--bins", "5",
                        "-o", str(out / "plots" / "latency.png")], check=True, stdout=subprocess.DEVNULL)
        result = json.loads((out / "experiment_result.json").read_text())
        curve = []
        for ms in LATENCIES_MS:
            name = f"latency_{ms:03d}ms"
            run = result["runs"][name]
            records = [json.loads(x) for x in (out / name / "episode_results.jsonl").read_text().splitlines()]
            stale = [r["timing"]["stale_ratio"] for r in records if r.get("timing")]
            curve.append({"latency_ms": ms, "success_rate": run["success_rate"], "ci95": run["ci95"],
                          "episodes": run["decided"], "mean_stale_ratio": round(sum(stale) / len(stale), 3)})
        sensitivity = json.loads((out / "plots" / "latency.json").read_text())
    emit({"task": args.task, "chunk_size": args.chunk_size, "late_action": args.late_action,
          "episodes_per_latency": args.episodes, "curve": curve, "sensitivity": _fit(sensitivity)},
         machine_before=before)


def _fit(panels: object) -> object:
    """The logistic fit's slope (log-odds per ms) and its interval, wherever the sensitivity JSON holds it."""
    found = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "slope" in node and "slope_ci" in node:
                found.append({k: node[k] for k in ("model", "slope", "slope_ci", "slope_p", "n") if k in node})
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(panels)
    return found


if __name__ == "__main__":
    main()
