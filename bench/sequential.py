"""Sequential paired comparison (analysis.sequential) against a fixed-N exact McNemar test with the same cap.

    python bench/sequential.py [--reps 2000] [--baseline 0.6] [--wave 10] [--max-episodes 200] [--rho 0.5]

Simulates paired Bernoulli outcomes: episode i of the policy and of the baseline share a seed, modelled as a
shared Gaussian latent per seed (correlation `--rho`, a Gaussian copula, so each arm's success rate is exact);
the policy's rate is the baseline's plus 0, 5, 10 and 20 points. For each difference and each spending function,
`--reps` replications with a fixed seed give: the rejection rate (type-I error at 0, power otherwise) of the
sequential design and of the fixed-N test at N = cap, the rate of wrong-direction verdicts, and the mean episodes
per Run used against the cap, each with its Monte-Carlo standard error. Prints JSON with the machine.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from statistics import NormalDist

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import emit, machine

from evalfleet.analysis.sequential import SPENDING, decide_many, looks

DIFFERENCES = (0.0, 0.05, 0.10, 0.20)


def simulate(rng: np.random.Generator, reps: int, n: int, p_base: float, p_policy: float, rho: float
             ) -> tuple[np.ndarray, np.ndarray]:
    """(policy, baseline) outcomes, (reps, n) booleans, correlated through a latent per seed."""
    shared = rng.standard_normal((reps, n))
    own = rng.standard_normal((2, reps, n))
    z = rho**0.5 * shared + (1 - rho) ** 0.5 * own
    q = NormalDist().inv_cdf
    return z[0] < q(p_policy), z[1] < q(p_base)


def rate(x: np.ndarray) -> dict[str, float]:
    p = float(np.mean(x))
    return {"rate": round(p, 4), "mc_se": round(math.sqrt(p * (1 - p) / len(x)), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--baseline", type=float, default=0.6)
    parser.add_argument("--wave", type=int, default=10)
    parser.add_argument("--max-episodes", type=int, default=200)
    parser.add_argument("--rho", type=float, default=0.5)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=20261201)
    args = parser.parse_args()
    before = machine()
    t0 = time.perf_counter()
    at = looks(args.wave, args.max_episodes)
    fractions = [k / args.max_episodes for k in at]
    idx = np.asarray(at)
    rng = np.random.default_rng(args.seed)
    results = []
    for diff in DIFFERENCES:
        a, b = simulate(rng, args.reps, args.max_episodes, args.baseline, args.baseline + diff, args.rho)
        zero = np.zeros((args.reps, 1), np.int64)
        c_cum = np.concatenate([zero, np.cumsum(a & ~b, axis=1)], axis=1)
        n_cum = c_cum + np.concatenate([zero, np.cumsum(b & ~a, axis=1)], axis=1)
        fixed_stop, fixed_sign = decide_many(c_cum[:, -1:], n_cum[:, -1:], [1.0], args.alpha)
        row = {"difference": diff, "policy_rate": args.baseline + diff,
               "discordant_fraction": round(float(n_cum[:, -1].mean() / args.max_episodes), 4),
               "fixed_n": {"episodes": args.max_episodes, "reject": rate(fixed_stop >= 0),
                           "wrong_direction": rate((fixed_stop >= 0) & (fixed_sign < 0))}}
        for spending in SPENDING:
            stop, sign = decide_many(c_cum[:, idx], n_cum[:, idx], fractions, args.alpha, spending)
            used = np.where(stop >= 0, idx[np.maximum(stop, 0)], args.max_episodes).astype(float)
            mean_used = float(used.mean())
            se_used = float(used.std(ddof=1) / math.sqrt(len(used)))
            row[spending] = {
                "reject": rate(stop >= 0), "wrong_direction": rate((stop >= 0) & (sign < 0)),
                "mean_episodes": round(mean_used, 2), "mean_episodes_mc_se": round(se_used, 2),
                "fraction_of_fixed_n": round(mean_used / args.max_episodes, 3),
                "fraction_mc_se": round(se_used / args.max_episodes, 3),
            }
        results.append(row)
    emit({"design": {"baseline_rate": args.baseline, "wave": args.wave, "max_episodes": args.max_episodes,
                     "looks": len(at), "alpha": args.alpha, "latent_correlation": args.rho,
                     "replications": args.reps, "seed": args.seed,
                     "fixed_n_test": "exact McNemar at N = max_episodes",
                     "type_one_limit": round(args.alpha + 2 * math.sqrt(args.alpha * (1 - args.alpha) / args.reps),
                                             4)},
          "results": results, "seconds": round(time.perf_counter() - t0, 2)}, machine_before=before)


if __name__ == "__main__":
    main()
