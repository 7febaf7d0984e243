"""Throughput of the local backend against a plain two-process loop over the same episodes.

    python bench/throughput.py [--episodes-per-task 250] [--workers 2] [--repeats 3]

Prints JSON: evalfleet's episodes/s (the whole `evalfleet run`: planning, worker start-up under the
watchdog, records, collect and report) next to a bare multiprocessing loop that steps the same seeded
Meta-World episodes with the same experts and writes nothing, and their ratio (target ≥ 0.95, issue #29), measured
in `--repeats` interleaved pairs (plain, evalfleet; evalfleet, plain; ...) after one untimed round of each on a
single episode per task: median and spread of each figure and of the pairwise ratio, with the machine's cores and
load average. Both sides keep compiled bytecode as an installed copy does (`_common.cache_bytecode`).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from _common import add_repeat_arg, cache_bytecode, emit, interleaved, machine, ratios, spread

TASKS = ("reach-v3", "push-v3", "pick-place-v3", "drawer-open-v3")


def plain_worker(items: list[tuple[str, int]]) -> tuple[int, int]:
    import warnings

    warnings.filterwarnings("ignore")
    import metaworld.policies as mw_policies

    from evalfleet.policies.builtin import expert_class_name
    from evalfleet.sim.metaworld_env import make_task_env

    envs, experts = {}, {}
    successes = steps = 0
    for task, seed in items:
        if task not in envs:
            envs[task] = make_task_env(task)
            experts[task] = getattr(mw_policies, expert_class_name(task))()
        env, expert = envs[task], experts[task]
        env.seed(seed)
        obs, _ = env.reset()
        for _ in range(500):
            obs, _, _, _, info = env.step(expert.get_action(obs))
            steps += 1
            if info["success"]:
                successes += 1
                break
    return successes, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes-per-task", type=int, default=250)
    parser.add_argument("--workers", type=int, default=2)
    add_repeat_arg(parser)
    args = parser.parse_args()
    before = machine()

    from evalfleet.experiment.loading import load_experiment
    from evalfleet.experiment.plan import make_plan

    with tempfile.TemporaryDirectory() as tmp:
        bytecode = cache_bytecode(Path(tmp) / "pycache")

        def experiment(name: str, episodes: int) -> Path:
            path = Path(tmp) / f"{name}.yaml"
            runs = {t.replace("-", "_"): {"environment": {"type": "metaworld", "task": t},
                                          "policy": {"type": "metaworld_expert"},
                                          "rollout_limit": {"num_episodes": episodes}} for t in TASKS}
            path.write_text(yaml.safe_dump({"name": "throughput", "runs": runs}))
            return path

        def episode_list(path: Path) -> list[tuple[str, int]]:
            plan = make_plan(load_experiment(path), workers=args.workers)
            return [(rp.run.environment.options()["task"], e.seed) for rp in plan.runs.values() for e in rp.episodes()]

        exp_path, warm_path = experiment("bench", args.episodes_per_task), experiment("warm_up", 1)
        items = episode_list(exp_path)
        total = len(items)

        def plain(items: list[tuple[str, int]] = items) -> tuple[float, int]:
            t0 = time.perf_counter()
            with mp.get_context("spawn").Pool(args.workers) as pool:
                parts = pool.map(plain_worker, [items[i::args.workers] for i in range(args.workers)])
            return time.perf_counter() - t0, sum(p[0] for p in parts)

        def evalfleet(exp_path: Path = exp_path) -> tuple[float, int]:
            out = Path(tempfile.mkdtemp(dir=tmp)) / "out"
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "evalfleet.cli", "run", str(exp_path), "--output", str(out),
                                   "--workers", str(args.workers), "--no-progress"], capture_output=True, text=True)
            seconds = time.perf_counter() - t0
            if proc.returncode != 0:
                sys.exit(f"evalfleet run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
            result = json.loads((out / "experiment_result.json").read_text())
            return seconds, sum(r["counts"]["success"] for r in result["runs"].values())

        plain(episode_list(warm_path)), evalfleet(warm_path)  # untimed: bytecode cached, files in the page cache
        plain_runs, ef_runs = interleaved(plain, evalfleet, args.repeats)

    plain_s, ef_s = [t for t, _ in plain_runs], [t for t, _ in ef_runs]
    report = {
        "episodes": total,
        "workers": args.workers,
        "repeats": args.repeats,
        "evalfleet_s": spread(ef_s, 2),
        "evalfleet_episodes_per_s": spread([total / t for t in ef_s], 2),
        "plain_loop_s": spread(plain_s, 2),
        "plain_loop_episodes_per_s": spread([total / t for t in plain_s], 2),
        "ratio": spread(ratios(plain_s, ef_s), 3),  # plain time / evalfleet time, pair by pair
        "target_ratio": 0.95,
        "successes": {"evalfleet": sorted({s for _, s in ef_runs}), "plain_loop": sorted({s for _, s in plain_runs})},
        **bytecode,
    }
    emit(report, machine_before=before)


if __name__ == "__main__":
    main()
