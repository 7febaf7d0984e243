"""Benchmark: what the trust guards (#55) cost, and that floors add no more than their own episodes.

  guards   one Run (push-v3, the scripted expert, --episodes episodes of at most 150 steps) in this process, as
           it runs today (the clip count per step, the success-hold and first-step checks, a final-state digest
           per episode) and with those guards replaced by no-ops (the like-for-like baseline): the guards'
           overhead per step and as a share.
  floors   the quickstart with `floors: [noop]` resolved once, then run as the policies' Runs alone (A), its
           floor Runs alone (C: the same episodes) and both in one Experiment (B), each by `evalfleet.run` on 2
           workers: B / (A + C), at most about 1 when the floors add no more than their own episodes.

Every measurement is repeated --repeats times, the order rotated each round; prints JSON (median and spread).

    python bench/guards.py [--episodes 20] [--repeats 3]
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
from _common import add_repeat_arg, emit, machine, ratios, rotated, spread

ROOT = Path(__file__).resolve().parent.parent

RUN = {"environment": {"type": "metaworld", "task": "push-v3", "max_steps": 150},
       "policy": {"type": "metaworld_expert"}}


def guarded_run(root: Path, name: str, episodes: int, guards: bool) -> tuple[float, int]:
    """(seconds, steps) of one Run in this process, with the guards or with no-ops in their place."""
    from evalfleet.experiment.loading import load_experiment
    from evalfleet.experiment.plan import make_plan
    from evalfleet.rollout import runner
    from evalfleet.rollout.records import latest_records

    path = root / f"{name}.yaml"
    run = {**RUN, "rollout_limit": {"num_episodes": episodes}}
    path.write_text(yaml.safe_dump({"name": name, "runs": {name: run}}))
    plan = make_plan(load_experiment(path))
    saved = runner.outside, runner.ShardRunner._ending, runner.final_state
    if not guards:
        runner.outside = lambda values, bounds: False
        runner.ShardRunner._ending = lambda self, slot, success, done: (done, success)
        runner.final_state = lambda env, observation: None
    try:
        t0 = time.perf_counter()
        runner.run_shards(plan.runs, plan.shards, root / name)
        elapsed = time.perf_counter() - t0
    finally:
        runner.outside, runner.ShardRunner._ending, runner.final_state = saved
    return elapsed, sum(r["episode_length"] for r in latest_records(root / name, name).values())


def experiment_run(root: Path, name: str, doc: dict[str, Any]) -> float:
    import evalfleet

    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    t0 = time.perf_counter()
    evalfleet.run(path, output=root / name, workers=2, progress=False, log=lambda _: None)
    return time.perf_counter() - t0


def floor_documents(root: Path, episodes: int) -> dict[str, dict[str, Any]]:
    """The quickstart with `floors: [noop]` resolved once (its floor Runs spelt out), then split: the policies'
    Runs alone (A), the floor Runs alone (C), both (B)."""
    from evalfleet.experiment.floors import FLOOR_PREFIX
    from evalfleet.experiment.loading import load_experiment

    loaded = load_experiment(ROOT / "examples" / "quickstart.yaml",
                             ["floors=[noop]", f"shared.rollout_limit.num_episodes={episodes}"])
    runs = {name: run.model_dump(mode="json", exclude_none=True) for name, run in loaded.experiment.runs.items()}
    floors = {n: r for n, r in runs.items() if n.startswith(FLOOR_PREFIX)}
    policies = {n: r for n, r in runs.items() if n not in floors}
    return {"policies": {"name": "a", "runs": policies}, "floors": {"name": "c", "runs": floors},
            "both": {"name": "b", "runs": runs}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=20)
    add_repeat_arg(parser)
    args = parser.parse_args()
    start = machine()
    figures: dict[str, Any] = {"episodes": args.episodes}
    with tempfile.TemporaryDirectory(prefix="evalfleet-bench-guards-") as tmp:
        root = Path(tmp)
        count = iter(range(10**6))
        guarded_run(root, "warmup", 1, True)
        measured = rotated({"with_guards": lambda: guarded_run(root, f"g{next(count)}", args.episodes, True),
                            "without_guards": lambda: guarded_run(root, f"n{next(count)}", args.episodes, False)},
                           args.repeats)
        with_s = [s for s, _ in measured["with_guards"]]
        without_s = [s for s, _ in measured["without_guards"]]
        steps = measured["with_guards"][0][1]
        figures["guards"] = {
            "steps": steps, "seconds_with": spread(with_s), "seconds_without": spread(without_s),
            "overhead": spread([r - 1 for r in ratios(with_s, without_s)], 4),
            "added_us_per_step": spread([1e6 * (a - b) / steps for a, b in zip(with_s, without_s)], 2)}

        docs = floor_documents(root, max(2, args.episodes // 2))
        timed = rotated({kind: (lambda kind=kind: experiment_run(root, f"{kind}{next(count)}", docs[kind]))
                         for kind in docs}, args.repeats)
        sums = [a + c for a, c in zip(timed["policies"], timed["floors"])]
        figures["floors"] = {"seconds_policies": spread(timed["policies"]), "seconds_floors": spread(timed["floors"]),
                             "seconds_both": spread(timed["both"]),
                             "both_over_sum": spread(ratios(timed["both"], sums), 3)}
    emit(figures, machine_before=start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
