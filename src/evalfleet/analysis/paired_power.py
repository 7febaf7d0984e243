"""Sample size for a paired comparison: how many matched episode pairs McNemar's exact test needs (issue #25).

Two policies on the same seeds give pairs; only the discordant ones (A succeeded and B failed: probability
p10, or the reverse: p01) carry information. With p_a - p_b = p10 - p01 and the discordance D = p10 + p01,
the test is the exact (conditional binomial) McNemar test that `evalfleet compare` runs
(`stats.mcnemar_exact`): given m discordant pairs, A-only ~ Binomial(m, 1/2) under H0.

`paired_episodes` returns N pairs:
1. Connor's normal approximation (R. J. Connor 1987, "Sample size for testing differences in proportions for
   the paired-sample design", Biometrics 43:207-211):
   N0 = (z_{1-alpha/2} sqrt(D) + z_{power} sqrt(D - delta^2))^2 / delta^2, delta = p_a - p_b;
2. refined by an exact search: the exact power of the exact test at N is
   sum_m Binomial(N, D)(m) * P(reject | m), with P(reject | m) from the binomial(m, p10 / D) law of the A-only
   count over the exact test's two-sided rejection region (as in Miettinen 1968, Biometrics 24:339, and
   Lachin 1992, Stat. Med. 11:1239, for the conditional test); N is the smallest count from 2 N0 / 3 upward whose
   exact power reaches the target. (The exact power is a slightly saw-toothed function of N; the search takes
   the first crossing.) Beyond EXACT_LIMIT pairs the search is skipped and Connor's N returned, said so.

`pilot_estimate` reads a pilot output folder, pairs the two policies' episodes by seed as `compare` does
(`compare.matched_outcomes`), and estimates p_a, p_b and D from the pairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evalfleet.analysis.stats import normal_quantile
from evalfleet.errors import UserError

EXACT_LIMIT = 20_000  # pairs: above this the exact search is skipped (Connor's approximation is then very close)
WHERE = "command line"


@dataclass(frozen=True)
class PairedSize:
    pairs: int  # N matched pairs (episodes per policy)
    connor_pairs: int  # Connor's normal approximation
    exact_power: float | None  # exact power of the exact McNemar test at `pairs` (None: search skipped)
    method: str
    p_a: float
    p_b: float
    discordance: float
    alpha: float
    power: float
    source: dict[str, Any] = field(default_factory=dict)  # what the inputs were estimated from (a pilot)


def _check_unit(value: float, flag: str) -> None:
    if not 0 < value < 1:
        raise UserError(f"{flag} must lie strictly between 0 and 1, got {value}", where=WHERE, key=flag)


def _validate(p_a: float, p_b: float, discordance: float, alpha: float, power: float) -> None:
    for value, flag in ((p_a, "--p1"), (p_b, "--p2"), (alpha, "--alpha"), (power, "--power")):
        _check_unit(value, flag)
    if p_a == p_b:
        raise UserError("--p1 and --p2 are equal; no episode count detects a zero difference", where=WHERE,
                        key="--p2")
    delta = abs(p_a - p_b)
    if not 0 < discordance <= 1:
        raise UserError(f"--discordance must lie in (0, 1], got {discordance}", where=WHERE, key="--discordance")
    if discordance < delta - 1e-12:
        raise UserError(f"--discordance {discordance:g} is smaller than |p1 - p2| = {delta:g}, which is impossible "
                        f"(the discordant pairs carry the whole difference); give --discordance of at least "
                        f"{delta:g} (a pilot's share of pairs where exactly one policy succeeded)",
                        where=WHERE, key="--discordance")
    a_only, b_only = (discordance + (p_a - p_b)) / 2, (discordance - (p_a - p_b)) / 2
    if a_only > min(p_a, 1 - p_b) + 1e-12 or b_only > min(p_b, 1 - p_a) + 1e-12:
        most = min(p_a, 1 - p_b) + min(p_b, 1 - p_a)
        raise UserError(f"--discordance {discordance:g} is too large for rates {p_a:g} and {p_b:g}: at most "
                        f"{most:g} of the pairs can be discordant; give --discordance between {delta:g} and "
                        f"{most:g}", where=WHERE, key="--discordance")


def connor_pairs(p_a: float, p_b: float, discordance: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """Connor (1987)'s normal-approximation N pairs for McNemar's test (two-sided alpha)."""
    delta = p_a - p_b
    z_a, z_b = normal_quantile(1 - alpha / 2), normal_quantile(power)
    root = z_a * math.sqrt(discordance) + z_b * math.sqrt(max(discordance - delta * delta, 0.0))
    return max(1, math.ceil(root * root / (delta * delta)))


class _ExactPower:
    """Exact power of the exact McNemar test at N pairs, N up to `n_max`."""

    def __init__(self, a_only: float, b_only: float, alpha: float, n_lo: int, n_max: int) -> None:
        self.d = a_only + b_only
        q = a_only / self.d
        self.log_fact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n_max + 1)))])
        self.reject = np.zeros(n_max + 1)  # P(reject | m discordant pairs)
        # m below the mean - 12 sd of Binomial(n_lo, D) or above that of Binomial(n_max, D) weigh < 1e-30
        spread = 12 * math.sqrt(n_max * self.d * (1 - self.d)) + 10
        m_lo, m_hi = max(1, int(n_lo * self.d - spread)), min(n_max, int(n_max * self.d + spread) + 1)
        for m in range(m_lo, m_hi + 1):
            i = np.arange(m + 1)
            log_comb = self.log_fact[m] - self.log_fact[i] - self.log_fact[m - i]
            cdf_half = np.cumsum(np.exp(log_comb + m * math.log(0.5)))
            k = int(np.searchsorted(cdf_half, alpha / 2 * (1 + 1e-12), side="right")) - 1  # largest k: 2F(k) <= a
            if k < 0:
                continue
            with np.errstate(divide="ignore"):
                log_pmf = log_comb + i * np.log(q) + (m - i) * np.log1p(-q) if 0 < q < 1 else None
            pmf = np.exp(log_pmf) if log_pmf is not None else (i == (m if q >= 1 else 0)).astype(float)
            self.reject[m] = min(1.0, pmf[: k + 1].sum() + pmf[m - k:].sum())

    def __call__(self, n: int) -> float:
        m = np.arange(n + 1)
        log_comb = self.log_fact[n] - self.log_fact[m] - self.log_fact[n - m]
        if self.d >= 1:
            return float(self.reject[n])
        weights = np.exp(log_comb + m * math.log(self.d) + (n - m) * math.log1p(-self.d))
        return float(weights @ self.reject[: n + 1])


def paired_episodes(p_a: float, p_b: float, discordance: float, alpha: float = 0.05,
                    power: float = 0.8) -> PairedSize:
    """N matched pairs for the two-sided exact McNemar test to detect success rates p_a vs p_b with `power`,
    given the discordant-pair probability D = p10 + p01 (Connor's N refined by an exact search; module doc)."""
    _validate(p_a, p_b, discordance, alpha, power)
    discordance = max(discordance, abs(p_a - p_b))
    n0 = connor_pairs(p_a, p_b, discordance, alpha, power)
    args = dict(connor_pairs=n0, p_a=p_a, p_b=p_b, discordance=discordance, alpha=alpha, power=power)
    if n0 > EXACT_LIMIT:
        return PairedSize(pairs=n0, exact_power=None, method="McNemar, Connor (1987) normal approximation "
                          f"(over {EXACT_LIMIT} pairs: exact search skipped)", **args)
    n_lo, n_max = max(1, (2 * n0) // 3), 2 * n0 + 50
    exact = _ExactPower((discordance + p_a - p_b) / 2, (discordance - p_a + p_b) / 2, alpha, n_lo, n_max)
    for n in range(n_lo, n_max + 1):
        achieved = exact(n)
        if achieved >= power:
            return PairedSize(pairs=n, exact_power=achieved, method="exact McNemar test; smallest N whose exact "
                              "power reaches the target, searched from Connor (1987)'s N", **args)
    return PairedSize(pairs=n0, exact_power=None, method="McNemar, Connor (1987) normal approximation (exact "
                      "search found no N)", **args)


def paired_episodes_from_cells(a_only: float, b_only: float, alpha: float = 0.05, power: float = 0.8,
                               p_a: float | None = None) -> PairedSize:
    """The same from the two discordant cell probabilities (A-only p10, B-only p01). Only they set N; `p_a`
    (default chosen so both rates are valid) is reported alongside."""
    for value, flag in ((a_only, "--a-only"), (b_only, "--b-only")):
        if not 0 <= value < 1:
            raise UserError(f"{flag} must lie in [0, 1), got {value}", where=WHERE, key=flag)
    if a_only + b_only > 1:
        raise UserError(f"--a-only + --b-only = {a_only + b_only:g} exceeds 1", where=WHERE, key="--b-only")
    if p_a is None:
        p_a = a_only + (1 - a_only - b_only) / 2
    return paired_episodes(p_a, p_a - a_only + b_only, a_only + b_only, alpha, power)


def pilot_estimate(folder: str, policy: str, baseline: str, task: str | None = None) -> dict[str, Any]:
    """p_a (policy), p_b (baseline), D and the pair count from a pilot folder's seed-matched episodes."""
    from evalfleet.analysis.compare import _arm_data, matched_outcomes
    from evalfleet.analysis.loading import load_records
    from evalfleet.analysis.success import labelled_records

    if policy == baseline:
        raise UserError(f"--policy and --baseline are both {policy!r}; name two policies", where=WHERE,
                        key="--baseline")
    record_set = load_records([folder])
    labelled = labelled_records(record_set, None, [policy, baseline], where=folder, flag="--policy/--baseline")
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for arm, rec in labelled:
        groups.setdefault((arm.task, arm.policy), []).append(rec)
    tasks = sorted({t for t, _ in groups})
    if task is not None:
        if task not in tasks:
            raise UserError(f"no records of task {task!r}; tasks present: {', '.join(tasks)}", where=folder,
                            key="--task")
        tasks = [task]
    pairs: list[tuple[bool, bool]] = []
    used = []
    for t in tasks:
        if (t, policy) in groups and (t, baseline) in groups:
            found = matched_outcomes(_arm_data(groups[(t, baseline)]), _arm_data(groups[(t, policy)]))
            pairs += found
            if found:
                used.append(t)
    if not pairs:
        raise UserError(f"no episodes of {policy!r} and {baseline!r} share a seed on the same task; run both "
                        "policies on the same tasks (same Experiment seeds) or give --p1 --p2 --discordance",
                        where=folder, key="--pilot")
    n = len(pairs)
    p_b = sum(b for b, _ in pairs) / n
    p_a = sum(a for _, a in pairs) / n
    disc = sum(a != b for b, a in pairs) / n
    if p_a == p_b or not (0 < p_a < 1 and 0 < p_b < 1):
        raise UserError(f"the pilot's {n} pairs give rates {p_a:g} ({policy}) and {p_b:g} ({baseline}), from which "
                        "no sample size follows (equal, or 0 or 1); give the rates to detect: --p1 --p2 "
                        f"--discordance (the pilot's discordance: {disc:g})", where=folder, key="--pilot")
    return {"folder": folder, "policy": policy, "baseline": baseline, "tasks": used, "pairs": n, "p_a": p_a,
            "p_b": p_b, "discordance": disc}


def describe(size: PairedSize) -> list[str]:
    """Lines `evalfleet power --paired` prints."""
    lines = [f"{size.pairs} matched pairs (episodes per policy on the same seeds) detect success rates "
             f"{size.p_a:g} vs {size.p_b:g} with discordance {size.discordance:g} at power {size.power:g}, "
             f"two-sided alpha {size.alpha:g}"]
    power = f", exact power {size.exact_power:.3f}" if size.exact_power is not None else ""
    lines.append(f"method: {size.method} (Connor's approximation: {size.connor_pairs}{power})")
    src = size.source
    if src:
        lines.append(f"estimated from {src['pairs']} seed-matched pairs of {src['policy']} (p1) vs "
                     f"{src['baseline']} (p2) in {src['folder']} (tasks: {', '.join(src['tasks'])})")
    return lines


def paired_episodes_from_pilot(folder: str, policy: str, baseline: str, task: str | None = None,
                               alpha: float = 0.05, power: float = 0.8) -> PairedSize:
    """`paired_episodes` with p_a, p_b and D estimated from a pilot folder (`pilot_estimate`)."""
    _check_unit(alpha, "--alpha")
    _check_unit(power, "--power")
    est = pilot_estimate(folder, policy, baseline, task)
    size = paired_episodes(est["p_a"], est["p_b"], est["discordance"], alpha, power)
    return PairedSize(**{**size.__dict__, "source": est})
