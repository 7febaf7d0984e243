"""One real sequential Experiment (issue #25, must-show 1): Meta-World's expert against the same expert at several
action-noise levels, run sequentially and as a fixed-N run of the cap; the same verdicts with fewer episodes?

    python bench/sequential_metaworld.py [--cap 80] [--wave 10] [--levels 0.1 0.3 1.0] [--task push-v3]
                                         [--workers 2] [--output outputs/bench_sequential_metaworld]

Sequential: the Experiment with `stopping: {wave, max_episodes: cap, compare: {baseline: expert}}`, run with
`evalfleet.run`; its verdicts and `stopped_at` come from its `experiment_result.json`. Fixed N: the same Experiment
without `stopping` (every Run runs `cap` episodes), then the same test decided once at the cap:
`analysis.stopping.state` (what the product decides with) with one look (wave = max_episodes = cap) on the recorded
outcomes, i.e. the exact McNemar test on the discordant pairs with Holm's step-down over the comparisons. Episodes
used are counted from the records of each output folder. Everything is seeded by the Experiment, so two runs give
the same numbers. Prints JSON with the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import emit, machine

import evalfleet
from evalfleet.analysis.stopping import PairRule, RunRule, state

ROOT = Path(__file__).resolve().parent.parent


def experiment_yaml(name: str, task: str, levels: list[float], cap: int, stopping: str) -> str:
    runs = ["  expert: {policy_name: expert}"]
    for level in levels:
        run = noisy(level)
        runs.append(f"  {run}:\n    policy_name: {run}\n    variations:\n      robot.action_noise: "
                    f"{{enabled: true, distribution: uniform, low: {level}, high: {level}}}")
    return (f"name: {name}\n{stopping}shared:\n  environment: {{type: metaworld, task: {task}}}\n"
            f"  policy: {{type: metaworld_expert}}\n  rollout_limit: {{num_episodes: {cap}}}\nruns:\n"
            + "\n".join(runs) + "\n")


def noisy(level: float) -> str:
    return "noise_" + f"{level:g}".replace(".", "_")


def outcomes(out: Path, run: str) -> list[int]:
    """The Run's successes in episode order, from its records."""
    lines = [json.loads(x) for x in (out / run / "episode_results.jsonl").read_text().splitlines() if x.strip()]
    by_episode = {r["episode"]: int(bool(r["success"])) for r in lines}
    return [by_episode[e] for e in sorted(by_episode)]


def run_once(folder: Path, name: str, text: str, workers: int) -> tuple[Path, float]:
    path = folder / f"{name}.yaml"
    path.write_text(text)
    out = folder / name
    if out.exists():
        shutil.rmtree(out)
    t0 = time.perf_counter()
    result = evalfleet.run(path, output=out, workers=workers, progress=False)
    if not result.ok:
        raise SystemExit(f"{name}: the run failed; see {out}")
    return out, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="push-v3")
    parser.add_argument("--levels", type=float, nargs="+", default=[0.1, 0.3, 1.0])
    parser.add_argument("--cap", type=int, default=80)
    parser.add_argument("--wave", type=int, default=10)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--output", default=str(ROOT / "outputs" / "bench_sequential_metaworld"))
    args = parser.parse_args()
    before = machine()
    folder = Path(args.output)
    folder.mkdir(parents=True, exist_ok=True)
    stopping = (f"stopping:\n  wave: {args.wave}\n  max_episodes: {args.cap}\n"
                f"  compare: {{baseline: expert, alpha: {args.alpha}}}\n")
    seq_out, seq_s = run_once(folder, "sequential", experiment_yaml("sequential", args.task, args.levels, args.cap,
                                                                   stopping), args.workers)
    fixed_out, fixed_s = run_once(folder, "fixed", experiment_yaml("fixed", args.task, args.levels, args.cap, ""),
                                  args.workers)

    runs = ["expert"] + [noisy(level) for level in args.levels]
    seq_used = {r: len(outcomes(seq_out, r)) for r in runs}
    fixed = {r: outcomes(fixed_out, r) for r in runs}
    fixed_decisions = fixed_n_decisions(fixed, args)
    seq = {c["policy"]: c for c in json.loads((seq_out / "experiment_result.json").read_text())["comparisons"]}
    comparisons = []
    for level, fixed_d in zip(args.levels, fixed_decisions.pairs):
        run = noisy(level)
        s = seq[run]
        comparisons.append({
            "policy": run, "action_noise": level, "task": args.task,
            "sequential": {"verdict": s["verdict"], "stopped_at": s["stopped_at"], "discordant": s["discordant"],
                           "policy_only": s["policy_only"], "baseline_only": s["baseline_only"],
                           "interval": s["interval"]},
            "fixed_n": {"verdict": fixed_d.verdict, "episodes": args.cap,
                        "policy_only": fixed_d.counts["policy_only"], "baseline_only": fixed_d.counts["baseline_only"],
                        "statistic": round(fixed_d.statistic, 3),
                        "success_rate": round(sum(fixed[run]) / args.cap, 3)},
            "same_verdict": s["verdict"] == fixed_d.verdict,
        })
    total_seq, total_fixed = sum(seq_used.values()), len(runs) * args.cap
    emit({"design": {"task": args.task, "levels": args.levels, "wave": args.wave, "max_episodes": args.cap,
                     "alpha": args.alpha, "workers": args.workers,
                     "sequential_method": seq[noisy(args.levels[0])]["method"],
                     "fixed_n_test": "analysis.stopping.state with one look at the cap: exact McNemar on "
                                     "the discordant pairs, Holm step-down over the comparisons"},
          "expert_success_rate_fixed_n": round(sum(fixed["expert"]) / args.cap, 3),
          "comparisons": comparisons,
          "all_verdicts_agree": all(c["same_verdict"] for c in comparisons),
          "episodes": {"sequential_per_run": seq_used, "sequential_total": total_seq, "fixed_n_total": total_fixed,
                       "ratio": round(total_seq / total_fixed, 3)},
          "seconds": {"sequential": round(seq_s, 1), "fixed_n": round(fixed_s, 1)}}, machine_before=before)


def fixed_n_decisions(fixed: dict, args: argparse.Namespace):  # -> analysis.stopping.StoppingState
    """The fixed-N verdicts as the product decides them: `stopping.state` with one look at the cap."""
    runs = ["expert"] + [noisy(level) for level in args.levels]
    rules = [RunRule(r, args.cap, args.cap) for r in runs]
    pairs = [PairRule(args.task, noisy(level), "expert", noisy(level), "expert", args.cap, args.cap, args.alpha)
             for level in args.levels]
    return state(rules, pairs, {r: dict(enumerate(fixed[r])) for r in runs})


if __name__ == "__main__":
    main()
