"""Sequential paired comparison (analysis.sequential) against a fixed-N exact McNemar test with the same cap.

    python bench/sequential.py [--reps 2000] [--baseline 0.6] [--wave 10] [--max-episodes 200] [--rho 0.5]

Simulates paired Bernoulli outcomes: episode i of the policy and of the baseline share a seed, modelled as a shared
Gaussian latent per seed (correlation `--rho`, a Gaussian copula, so each arm's success rate is exact); the
policy's rate is the baseline's plus 0, 5, 10 and 20 points. Caps: `--max-episodes`, and the N that `evalfleet
power --paired` (analysis.paired_power) gives for 80%, 90% and 95% power (`--power-caps`) at +10 points from the
copula's exact discordance, the way a user would size the cap. For each cap, difference and design (O'Brien-
Fleming, Pocock, Hwang-Shih-DeCani), `--reps` replications with a fixed seed give: the rejection rate (type-I error
at 0, power otherwise) of the sequential design and of the fixed-N test at N = cap, the power lost against fixed N
on the same replications with its Monte-Carlo standard error, the rate of wrong-direction verdicts, and the mean
episodes per Run used against the cap. `meets_goal` (issue #25, must-show 1, at +10 and +20 points): mean episodes
<= 0.6 x the cap, with power no worse than fixed N within Monte-Carlo error (loss <= 2 s.e.).
Prints JSON with the machine.
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

from evalfleet.analysis.paired_power import paired_episodes
from evalfleet.analysis.sequential import HSD_GAMMA, decide_many, looks

DIFFERENCES = (0.0, 0.05, 0.10, 0.20)
DESIGNS = {"obrien_fleming": ("obrien_fleming", None), "pocock": ("pocock", None),
           f"hwang_shih_decani_{HSD_GAMMA:g}": ("hwang_shih_decani", HSD_GAMMA),
           "hwang_shih_decani_-2": ("hwang_shih_decani", -2.0)}
GOAL = 0.6  # mean episodes / cap at differences >= 10 points


def simulate(rng: np.random.Generator, reps: int, n: int, p_base: float, p_policy: float, rho: float
             ) -> tuple[np.ndarray, np.ndarray]:
    """(policy, baseline) outcomes, (reps, n) booleans, correlated through a latent per seed."""
    shared = rng.standard_normal((reps, n))
    own = rng.standard_normal((2, reps, n))
    z = rho**0.5 * shared + (1 - rho) ** 0.5 * own
    q = NormalDist().inv_cdf
    return z[0] < q(p_policy), z[1] < q(p_base)


def discordance(p_policy: float, p_base: float, rho: float) -> float:
    """P(exactly one arm succeeds) under the copula, by quadrature over the shared latent."""
    s = np.linspace(-9.0, 9.0, 36001)
    weight = np.exp(-s * s / 2) / math.sqrt(2 * math.pi) * (s[1] - s[0])
    cdf = np.vectorize(NormalDist().cdf)
    fa = cdf((NormalDist().inv_cdf(p_policy) - math.sqrt(rho) * s) / math.sqrt(1 - rho))
    fb = cdf((NormalDist().inv_cdf(p_base) - math.sqrt(rho) * s) / math.sqrt(1 - rho))
    return float((weight * (fa * (1 - fb) + fb * (1 - fa))).sum())


def rate(x: np.ndarray) -> dict[str, float]:
    p = float(np.mean(x))
    return {"rate": round(p, 4), "mc_se": round(math.sqrt(p * (1 - p) / len(x)), 4)}


def one_cap(rng: np.random.Generator, cap: int, args: argparse.Namespace, limit: float) -> list[dict]:
    at = looks(args.wave, cap)
    fractions = [k / cap for k in at]
    idx = np.asarray(at)
    rows = []
    for diff in DIFFERENCES:
        a, b = simulate(rng, args.reps, cap, args.baseline, args.baseline + diff, args.rho)
        zero = np.zeros((args.reps, 1), np.int64)
        c_cum = np.concatenate([zero, np.cumsum(a & ~b, axis=1)], axis=1)
        n_cum = c_cum + np.concatenate([zero, np.cumsum(b & ~a, axis=1)], axis=1)
        fixed_stop, fixed_sign = decide_many(c_cum[:, -1:], n_cum[:, -1:], [1.0], args.alpha)
        row = {"difference": diff, "policy_rate": round(args.baseline + diff, 4),
               "discordant_fraction": round(float(n_cum[:, -1].mean() / cap), 4),
               "fixed_n": {"episodes": cap, "reject": rate(fixed_stop >= 0),
                           "wrong_direction": rate((fixed_stop >= 0) & (fixed_sign < 0))}}
        for label, (spending, gamma) in DESIGNS.items():
            stop, sign = decide_many(c_cum[:, idx], n_cum[:, idx], fractions, args.alpha, spending, gamma)
            used = np.where(stop >= 0, idx[np.maximum(stop, 0)], cap).astype(float)
            loss = (fixed_stop >= 0).astype(float) - (stop >= 0)
            loss_mean, loss_se = float(loss.mean()), float(loss.std(ddof=1) / math.sqrt(len(loss)))
            fraction, fraction_se = float(used.mean() / cap), float(used.std(ddof=1) / math.sqrt(len(used)) / cap)
            entry = {"reject": rate(stop >= 0), "wrong_direction": rate((stop >= 0) & (sign < 0)),
                     "power_loss_vs_fixed": round(loss_mean, 4), "power_loss_mc_se": round(loss_se, 4),
                     "mean_episodes": round(float(used.mean()), 2),
                     "fraction_of_fixed_n": round(fraction, 3), "fraction_mc_se": round(fraction_se, 3)}
            if diff == 0:
                entry["type_one_ok"] = bool(np.mean(stop >= 0) <= limit)
            elif diff >= 0.10:
                entry["power_ok"] = bool(loss_mean <= 2 * loss_se)
                entry["meets_goal"] = bool(entry["power_ok"] and fraction <= GOAL)
            row[label] = entry
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--baseline", type=float, default=0.6)
    parser.add_argument("--wave", type=int, default=10)
    parser.add_argument("--max-episodes", type=int, default=200)
    parser.add_argument("--rho", type=float, default=0.5)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--power-caps", default="0.8,0.9,0.95",
                        help="comma-separated powers at +10 points whose `power --paired` N is a cap too")
    args = parser.parse_args()
    before = machine()
    t0 = time.perf_counter()
    limit = round(args.alpha + 2 * math.sqrt(args.alpha * (1 - args.alpha) / args.reps), 4)
    d10 = discordance(args.baseline + 0.10, args.baseline, args.rho)
    caps = [(args.max_episodes, "--max-episodes")]
    for power in (float(p) for p in args.power_caps.split(",") if p):
        size = paired_episodes(args.baseline + 0.10, args.baseline, d10, args.alpha, power)
        caps.append((size.pairs, f"power --paired: {power:.0%} power at +10 points (discordance {d10:.4f})"))
    rng = np.random.default_rng(args.seed)
    out = []
    for cap, sized_by in caps:
        results = one_cap(rng, cap, args, limit)
        goal = [f"{label} at +{row['difference'] * 100:.0f}" for row in results for label in DESIGNS
                if row[label].get("meets_goal")]
        out.append({"max_episodes": cap, "sized_by": sized_by, "looks": len(looks(args.wave, cap)),
                    "meets_goal": goal, "results": results})
    emit({"design": {"baseline_rate": args.baseline, "wave": args.wave, "alpha": args.alpha,
                     "latent_correlation": args.rho, "replications": args.reps, "seed": args.seed,
                     "fixed_n_test": "exact McNemar at N = max_episodes", "type_one_limit": limit,
                     "goal": f"mean episodes <= {GOAL} x cap at +10 and +20 points, power loss <= 2 MC s.e."},
          "caps": out, "seconds": round(time.perf_counter() - t0, 2)}, machine_before=before)


if __name__ == "__main__":
    main()
