"""One real sequential Experiment (issues #25 and #57): Meta-World's expert against the same expert at several
action-noise levels, run sequentially and as a fixed-N run of the cap; the same verdicts with fewer episodes, and in
less time?

    python bench/sequential_metaworld.py [--cap 80] [--wave 10] [--levels 0.1 0.3 1.0] [--task push-v3]
                                         [--workers 2] [--repeats 3] [--env-build-s 0]
                                         [--output outputs/bench_sequential_metaworld]

Three designs, run in rotated order (ABC, BCA, CAB, ...) `--repeats` times:
  fixed       the Experiment without `stopping`: every Run runs `cap` episodes; its verdicts are the same test
              decided once at the cap, `analysis.stopping.state` (what the product decides with) with one look
              (wave = max_episodes = cap) on the recorded outcomes: the exact McNemar test on the discordant pairs
              with Holm's step-down over the comparisons
  sequential  `stopping: {wave, max_episodes: cap, compare: {baseline: expert}}` as evalfleet runs it: on the local
              backend, runners that start once and take each look from the driver's shard feed (issue #57)
  waves       the same sequential Experiment as before #57: one `backend.execute` per look, each starting its
              runners again (the local backend with its shard feed turned off in this process)
Each is `evalfleet.run` in this process (the driver), its runners subprocesses. Per design: wall seconds, runner
starts (runner processes that ran shards: timings.json's `start` count), environment builds (count and seconds,
timings.json), episodes from the records; per repeat the ratio of each sequential design's wall to fixed N's.
`--env-build-s S` loads bench/evalfleet_slow_build.py into the runners: every environment sleeps S seconds in its
constructor (a simulator with a long cold start). Everything is seeded by the Experiment, so every repeat gives the
same records; the bench checks it. Prints JSON with the machine.
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
from _common import emit, machine, rotated, runner_costs, spread

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


def run_once(folder: Path, name: str, text: str, workers: int, *, keep_runners: bool = True) -> dict:
    """One `evalfleet.run` of the Experiment `text`: its output folder, wall seconds, runner starts, env builds."""
    from evalfleet.backends.local.backend import LocalBackend

    path = folder / f"{name}.yaml"
    path.write_text(text)
    out = folder / name
    if out.exists():
        shutil.rmtree(out)
    LocalBackend.keeps_runners = keep_runners  # False: the wave loop of before issue #57
    try:
        t0 = time.perf_counter()
        result = evalfleet.run(path, output=out, workers=workers, progress=False)
        seconds = time.perf_counter() - t0
    finally:
        LocalBackend.keeps_runners = True
    if not result.ok:
        raise SystemExit(f"{name}: the run failed; see {out}")
    return {"out": out, "seconds": seconds, **runner_costs(out)}


def records(out: Path, runs: list[str]) -> dict[str, list[int]]:
    return {r: outcomes(out, r) for r in runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="push-v3")
    parser.add_argument("--levels", type=float, nargs="+", default=[0.1, 0.3, 1.0])
    parser.add_argument("--cap", type=int, default=80)
    parser.add_argument("--wave", type=int, default=10)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--env-build-s", type=float, default=0.0)
    parser.add_argument("--output", default=str(ROOT / "outputs" / "bench_sequential_metaworld"))
    args = parser.parse_args()
    before = machine()
    folder = Path(args.output)
    folder.mkdir(parents=True, exist_ok=True)
    if args.env_build_s > 0:  # the runners load the slow-build plug-in (they inherit this process's environment)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "bench"), os.environ.get("PYTHONPATH")]))
        os.environ["EVALFLEET_PLUGINS"] = "evalfleet_slow_build"
        os.environ["BENCH_ENV_BUILD_S"] = str(args.env_build_s)
    stopping = (f"stopping:\n  wave: {args.wave}\n  max_episodes: {args.cap}\n"
                f"  compare: {{baseline: expert, alpha: {args.alpha}}}\n")
    texts = {"fixed": experiment_yaml("fixed", args.task, args.levels, args.cap, ""),
             "sequential": experiment_yaml("sequential", args.task, args.levels, args.cap, stopping),
             "waves": experiment_yaml("waves", args.task, args.levels, args.cap, stopping)}
    runs = ["expert"] + [noisy(level) for level in args.levels]
    seen: dict[str, dict] = {}  # design → its first repeat's records and comparisons

    def measure(design: str):
        def once() -> dict:
            done = run_once(folder, design, texts[design], args.workers, keep_runners=design != "waves")
            got = records(done["out"], runs)
            if design != "fixed":
                got = {"records": got, "comparisons": json.loads(
                    (done["out"] / "experiment_result.json").read_text())["comparisons"]}
            if seen.setdefault(design, got) != got:
                raise SystemExit(f"{design}: a repeat gave other records than the first; see {done['out']}")
            return done
        return once

    rounds = rotated({d: measure(d) for d in texts}, args.repeats)
    fixed = seen["fixed"]
    fixed_decisions = fixed_n_decisions(fixed, args)
    seq = {c["policy"]: c for c in seen["sequential"]["comparisons"]}
    same_as_waves = seen["sequential"] == seen["waves"]
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
    seq_used = {r: len(v) for r, v in seen["sequential"]["records"].items()}
    total_seq, total_fixed = sum(seq_used.values()), len(runs) * args.cap

    def design(name: str) -> dict:
        done = rounds[name]
        return {"wall_s": spread([d["seconds"] for d in done], 2),
                "runner_starts": spread([d["runner_starts"] for d in done], 0),
                "env_builds": spread([d["env_builds"] for d in done], 0),
                "env_build_s": spread([d["env_build_s"] for d in done], 2)}

    emit({"design": {"task": args.task, "levels": args.levels, "wave": args.wave, "max_episodes": args.cap,
                     "alpha": args.alpha, "workers": args.workers, "repeats": args.repeats,
                     "env_build_s": args.env_build_s, "order": "rotated (ABC, BCA, CAB, ...)",
                     "sequential_method": seq[noisy(args.levels[0])]["method"],
                     "fixed_n_test": "analysis.stopping.state with one look at the cap: exact McNemar on "
                                     "the discordant pairs, Holm step-down over the comparisons"},
          "expert_success_rate_fixed_n": round(sum(fixed["expert"]) / args.cap, 3),
          "comparisons": comparisons,
          "all_verdicts_agree": all(c["same_verdict"] for c in comparisons),
          "sequential_same_as_waves": same_as_waves,  # records, verdicts and stopped_at
          "episodes": {"sequential_per_run": seq_used, "sequential_total": total_seq, "fixed_n_total": total_fixed,
                       "ratio": round(total_seq / total_fixed, 3)},
          "designs": {name: design(name) for name in texts},
          "wall_ratio_to_fixed_n": {
              name: spread([a["seconds"] / b["seconds"] for a, b in zip(rounds[name], rounds["fixed"])], 3)
              for name in ("sequential", "waves")}}, machine_before=before)


def fixed_n_decisions(fixed: dict, args: argparse.Namespace):  # -> analysis.stopping.StoppingState
    """The fixed-N verdicts as the product decides them: `stopping.state` with one look at the cap."""
    runs = ["expert"] + [noisy(level) for level in args.levels]
    rules = [RunRule(r, args.cap, args.cap) for r in runs]
    pairs = [PairRule(args.task, noisy(level), "expert", noisy(level), "expert", args.cap, args.cap, args.alpha)
             for level in args.levels]
    return state(rules, pairs, {r: dict(enumerate(fixed[r])) for r in runs})


if __name__ == "__main__":
    main()
