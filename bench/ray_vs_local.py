"""Ray against the local backend on one machine (P6, issue #57): the quickstart's four Meta-World Runs at
`--episodes` each (1,000 episodes by default), `evalfleet run --backend local` and `--backend ray` (a local Ray
instance the backend starts, sized to `--workers`), interleaved (ABBA...), `--repeats` pairs.

    python bench/ray_vs_local.py [--episodes 250] [--workers 2] [--repeats 3] [--output outputs/bench_ray_vs_local]

Each run is a `python -m evalfleet.cli run` subprocess (driver start, Ray's start and stop included: what a user
waits for). Per backend: wall seconds; runner starts (timings.json's `start` count: runners that ran shards);
environment builds (count and seconds, timings.json); per pair the ratio of Ray's wall to local's (Ray / local: above
1 is slower). Every run must give the same per-episode outcomes as the first local run; the bench checks it.
Prints JSON with the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import emit, interleaved, machine, ratios, runner_costs, spread, waited_process

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "examples" / "quickstart.yaml"


def outcomes(out: Path) -> dict[str, list]:
    """Run → [(episode, success, episode_length)] from its records, in episode order."""
    found = {}
    for path in sorted(out.glob("*/episode_results.jsonl")):
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        found[path.parent.name] = sorted((r["episode"], bool(r["success"]), r.get("episode_length")) for r in lines)
    return found


def run_once(folder: Path, backend: str, episodes: int, workers: int, index: int) -> dict:
    out = folder / f"{backend}-{index}"
    if out.exists():
        shutil.rmtree(out)
    cmd = [sys.executable, "-m", "evalfleet.cli", "run", str(QUICKSTART),
           f"shared.rollout_limit.num_episodes={episodes}", "--backend", backend, "--workers", str(workers),
           "--output", str(out), "--no-progress"]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    _, seconds, _, proc = waited_process(cmd, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{backend}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    return {"out": out, "seconds": seconds, **runner_costs(out)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=250, help="per Run (4 Runs)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default=str(ROOT / "outputs" / "bench_ray_vs_local"))
    args = parser.parse_args()
    before = machine()
    folder = Path(args.output)
    folder.mkdir(parents=True, exist_ok=True)
    first: dict[str, list] = {}
    counter = {"local": 0, "ray": 0}

    def measure(backend: str):
        def once() -> dict:
            counter[backend] += 1
            done = run_once(folder, backend, args.episodes, args.workers, counter[backend])
            got = outcomes(done["out"])
            if first.setdefault("records", got) != got:
                raise SystemExit(f"{backend}: other per-episode outcomes than the first run; see {done['out']}")
            shutil.rmtree(done["out"])  # 1,000 episodes' records per run: the figures are kept, not the folders
            return {k: v for k, v in done.items() if k != "out"}
        return once

    local, ray = interleaved(measure("local"), measure("ray"), args.repeats)

    def summary(runs: list[dict]) -> dict:
        return {"wall_s": spread([r["seconds"] for r in runs]),
                "runner_starts": spread([r["runner_starts"] for r in runs], 0),
                "env_builds": spread([r["env_builds"] for r in runs], 0),
                "env_build_s": spread([r["env_build_s"] for r in runs])}

    emit({"bench": "ray_vs_local", "experiment": f"examples/quickstart.yaml, 4 Runs x {args.episodes} episodes",
          "workers": args.workers, "repeats": args.repeats, "same_records_every_run": True,
          "local": summary(local), "ray": summary(ray),
          "ray_over_local_wall": spread(ratios([r["seconds"] for r in ray], [r["seconds"] for r in local]))},
         machine_before=before)


if __name__ == "__main__":
    main()
