"""Sequential decisions on paired episodes: stop a comparison, or a Run, once it is decided (groundwork for #25).

Comparison of a policy A with a baseline B on one task. Episode i of A and of B share a seed, so the outcomes
pair up; only discordant pairs (one arm succeeded, the other failed) carry information about the difference
p_A - p_B. Under H0 (p_A = p_B, marginal homogeneity, McNemar's null), given which pairs are discordant, each
discordant pair is a fair coin (A-only vs B-only), independently. The test is therefore a group-sequential design
on the exact binomial of the discordant pairs, conditional on their counts:

- looks at fixed episode counts (every `wave` episodes up to `max_episodes`, the last look at the cap), decided
  in episode-index order: the outcome depends only on the outcomes of the episodes up to a look, never on how
  they were batched, sharded or timed;
- the type-I error is spent over the looks with a Lan-DeMets spending function of the information fraction
  t_k = episodes_k / max_episodes (Lan & DeMets 1983, Biometrika 70:659): O'Brien-Fleming-type
  alpha(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t)) (the default: almost no power lost against the fixed-N
  exact McNemar test at the cap), Pocock-type alpha log(1 + (e - 1) t) (stops earlier, loses more power), or
  the Hwang-Shih-DeCani family alpha (1 - e^{-gamma t}) / (1 - e^{-gamma}) between them (Hwang, Shih & DeCani
  1990, Stat. Med. 9:1439; Jennison & Turnbull 2000, ch. 7.3: gamma -4 is close to O'Brien-Fleming, 1 to Pocock;
  default gamma -3, the value that keeps power within Monte-Carlo error of fixed N while stopping sooner:
  bench/sequential.py, docs/statistics.md);
- at look k the critical region is the most extreme set {|2C - n_k| >= d} (C: A-only pairs, n_k: discordant
  pairs) whose exact probability under H0, on the paths not stopped before, is at most alpha(t_k) minus what
  the earlier looks actually spent (the recursion of Armitage, McPherson & Rowe 1969 on the binomial walk).
  Conditional on every sequence of discordant counts the two-sided type-I error is <= alpha, hence also
  unconditionally. With one look this is the exact McNemar test.

Verdicts: `better` (A better than B), `worse`, `undecided` at the cap, and `continue` while looks remain.
`no_difference` needs an equivalence margin, which this design does not have, so it is never returned.

Several comparisons (tasks x policies): Holm's step-down on the sequential tests (Holm 1979; its group-sequential
form, Bartroff & Lai 2010, "Multistage tests of multiple hypotheses", Commun. Stat. Theory Methods 39:1597):
with l hypotheses rejected, each remaining one is tested at alpha / (m - l), repeated until nothing new is
rejected. FWER <= alpha by closed testing with Bonferroni intersection tests, which holds when a test that rejects
at a level also rejects at every larger level (tests/analysis/test_sequential.py checks this on random data).

One Run's success rate: an anytime-valid confidence sequence, the Beta(1/2, 1/2) mixture martingale
(Robbins 1970; Howard, Ramdas, McAuliffe & Sekhon 2021, "Time-uniform, nonparametric, nonasymptotic confidence
sequences", Ann. Statist. 49:1055; the betting view: Waudby-Smith & Ramdas 2023, JRSS-B 86:1): the set of p whose
mixture likelihood ratio stays below 1/alpha; by Ville's inequality it covers p at every n at once, so stopping
once it is `half_width` narrow keeps its coverage. It is wider than the fixed-n Wilson interval: that is the price.

Pure functions on 0/1 outcomes; numpy only. `decide_many` is the vectorised form the bench and tests use; the
product's decisions over Runs and families (sequential Holm, precision) are analysis/stopping.py's `state`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from evalfleet.analysis.stats import normal_quantile

METHOD = "group-sequential exact binomial on discordant pairs, Lan-DeMets {spending} spending"
VERDICTS = ("better", "worse", "undecided", "continue")


def obrien_fleming(alpha: float) -> Callable[[float], float]:
    """Lan-DeMets O'Brien-Fleming-type spending: alpha spent by information fraction t."""
    z = normal_quantile(1 - alpha / 2)
    return lambda t: 0.0 if t <= 0 else math.erfc(z / math.sqrt(2.0 * min(t, 1.0)))


def pocock(alpha: float) -> Callable[[float], float]:
    """Lan-DeMets Pocock-type spending."""
    return lambda t: alpha * math.log(1 + (math.e - 1) * min(max(t, 0.0), 1.0))


HSD_GAMMA = -3.0  # Hwang-Shih-DeCani's default parameter (module doc)


def hwang_shih_decani(alpha: float, gamma: float = HSD_GAMMA) -> Callable[[float], float]:
    """Hwang-Shih-DeCani spending alpha (1 - e^{-gamma t}) / (1 - e^{-gamma}); gamma 0: alpha t."""
    if not math.isfinite(gamma):
        raise ValueError("gamma must be a finite number")
    if gamma == 0:
        return lambda t: alpha * min(max(t, 0.0), 1.0)
    return lambda t: alpha * math.expm1(-gamma * min(max(t, 0.0), 1.0)) / math.expm1(-gamma)


SPENDING = {"obrien_fleming": obrien_fleming, "pocock": pocock, "hwang_shih_decani": hwang_shih_decani}


def spending_function(spending: str, alpha: float, gamma: float | None = None) -> Callable[[float], float]:
    """The spending function by name; `gamma` only for hwang_shih_decani (None: HSD_GAMMA)."""
    if spending == "hwang_shih_decani":
        return hwang_shih_decani(alpha, HSD_GAMMA if gamma is None else gamma)
    if gamma is not None:
        raise ValueError(f"gamma is a parameter of hwang_shih_decani spending, not of {spending}")
    return SPENDING[spending](alpha)


def spending_label(spending: str, gamma: float | None = None) -> str:
    """How a method string names the spending: O'Brien-Fleming, Pocock, Hwang-Shih-DeCani (gamma -3)."""
    if spending == "hwang_shih_decani":
        return f"Hwang-Shih-DeCani (gamma {HSD_GAMMA if gamma is None else gamma:g})"
    return {"obrien_fleming": "O'Brien-Fleming", "pocock": "Pocock"}.get(spending, spending)


def looks(wave: int, max_episodes: int) -> list[int]:
    """Episode counts at which a decision is taken: every `wave`, and the cap."""
    if wave < 1 or max_episodes < 1:
        raise ValueError("wave and max_episodes must be at least 1")
    out = list(range(wave, max_episodes, wave))
    return [*out, max_episodes]


@dataclass(frozen=True)
class Decision:
    verdict: str  # better | worse | undecided | continue
    stopped_at: int | None  # episodes per Run at the deciding look; the cap when undecided; None: continue
    statistic: float  # (C - B) / sqrt(C + B) over the discordant pairs at that look (0 with none)
    method: str
    looks_taken: int = 0
    policy_only: int = 0  # discordant pairs where A succeeded and B failed
    baseline_only: int = 0
    details: dict = field(default_factory=dict)


def _pmf_table(m_max: int) -> np.ndarray:
    table = np.zeros((m_max + 1, m_max + 1))
    for m in range(m_max + 1):
        for d in range(m + 1):
            table[m, d] = math.comb(m, d) / 2.0**m
    return table


def decide_many(c: np.ndarray, n: np.ndarray, fractions: Sequence[float], alpha: float = 0.05,
                spending: str = "obrien_fleming", gamma: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The design on many comparisons at once. c, n: (reps, K) cumulative A-only and discordant counts at the K
    looks; fractions: information fraction of each look (the last 1.0 for the cap). Returns (look index of the
    rejection, -1 if none; sign +1 better / -1 worse / 0)."""
    c = np.atleast_2d(np.asarray(c, dtype=np.int64))
    n = np.atleast_2d(np.asarray(n, dtype=np.int64))
    reps, k_looks = n.shape
    if c.shape != n.shape or len(fractions) != k_looks:
        raise ValueError("c, n and fractions must agree in shape")
    spend = spending_function(spending, alpha, gamma)
    n_max = int(n.max()) if n.size else 0
    steps = np.diff(np.concatenate([np.zeros((reps, 1), np.int64), n], axis=1), axis=1)
    if (steps < 0).any() or (c < 0).any() or (c > n).any():
        raise ValueError("counts must be cumulative, with 0 <= c <= n")
    pmf = _pmf_table(int(steps.max()) if steps.size else 0)
    j = np.arange(n_max + 1)
    rows = np.arange(reps)
    mass = np.zeros((reps, n_max + 1))
    mass[:, 0] = 1.0
    spent = np.zeros(reps)
    stop = np.full(reps, -1)
    sign = np.zeros(reps, dtype=np.int64)
    for k in range(k_looks):
        m = steps[:, k]
        new = np.zeros_like(mass)
        for d in range(pmf.shape[0]):
            w = pmf[m, d]
            if d == 0:
                new += mass * w[:, None]
            elif w.any():
                new[:, d:] += mass[:, :-d] * w[:, None]
        mass = new
        nk = n[:, k][:, None]
        upper = np.cumsum(mass[:, ::-1], axis=1)[:, ::-1]  # P(C >= j)
        lower = np.cumsum(mass, axis=1)  # P(C <= j)
        hi = np.clip(np.maximum(j, nk - j), 0, n_max)
        lo = np.clip(np.minimum(j, nk - j), 0, n_max)
        tail = np.take_along_axis(upper, hi, 1) + np.take_along_axis(lower, lo, 1)
        tail = np.where(hi == lo, upper[:, :1], tail)  # the centre: every path is as extreme
        budget = spend(fractions[k]) - spent
        region = (tail <= budget[:, None] * (1 + 1e-12)) & (j <= nk)
        observed = region[rows, c[:, k]]
        fresh = (stop < 0) & observed
        stop[fresh] = k
        sign[fresh] = np.sign(2 * c[fresh, k] - n[fresh, k])
        spent += (mass * region).sum(axis=1)
        mass[region] = 0.0
    return stop, sign


def _counts(pairs_a: Sequence[int], pairs_b: Sequence[int], at: list[int]) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(pairs_a, dtype=bool)
    b = np.asarray(pairs_b, dtype=bool)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError("pairs_a and pairs_b must be equal-length sequences of outcomes, episode by episode")
    c_cum = np.concatenate([[0], np.cumsum(a & ~b)])
    b_cum = np.concatenate([[0], np.cumsum(b & ~a)])
    idx = np.asarray(at, dtype=np.int64)
    return c_cum[idx], b_cum[idx]


def decide(pairs_a: Sequence[int], pairs_b: Sequence[int], wave: int, max_episodes: int, alpha: float = 0.05,
           spending: str = "obrien_fleming", gamma: float | None = None) -> Decision:
    """Policy A (`pairs_a[i]`: success of its episode i) against baseline B (same seeds, `pairs_b[i]`), decided
    at the looks every `wave` episodes up to `max_episodes` that the outcomes reach; episodes past the last
    reached look are not used. Two-sided, type-I error <= alpha over all looks."""
    if not 0 < alpha < 1:
        raise ValueError("alpha must lie strictly between 0 and 1")
    all_looks = looks(wave, max_episodes)
    reached = [x for x in all_looks if x <= len(pairs_a)]
    spending_function(spending, alpha, gamma)  # refuses an unknown name or a stray gamma before any work
    name = spending.replace("_", "-")
    method = METHOD.format(spending=name if spending != "hwang_shih_decani" else spending_label(spending, gamma))
    if not reached:
        return Decision("continue", None, 0.0, method)
    c, b = _counts(pairs_a[:max_episodes], pairs_b[:max_episodes], reached)
    fractions = [x / max_episodes for x in reached]
    stop, sign = decide_many(c[None, :], (c + b)[None, :], fractions, alpha, spending, gamma)
    k = int(stop[0]) if stop[0] >= 0 else len(reached) - 1
    disc = int(c[k] + b[k])
    stat = float((c[k] - b[k]) / math.sqrt(disc)) if disc else 0.0
    if stop[0] >= 0:
        verdict = "better" if sign[0] > 0 else "worse"
    else:
        verdict = "undecided" if reached[-1] == max_episodes else "continue"
    return Decision(verdict, reached[k] if verdict != "continue" else None, stat, method, k + 1, int(c[k]),
                    int(b[k]), {"alpha": alpha, "looks": all_looks, "discordant": disc})


# ------------------------------------------------------------------------------------------------------------
# One Run's success rate: the Beta(1/2, 1/2) mixture confidence sequence.

_PRIOR = 0.5
_lgamma = np.frompyfunc(math.lgamma, 1, 1)


def rate_confidence_sequence(successes: np.ndarray | int, n: np.ndarray | int, alpha: float = 0.05
                             ) -> tuple[np.ndarray, np.ndarray]:
    """Anytime-valid (lower, upper) for a success rate after `n` episodes with `successes`: valid at every n
    simultaneously with probability >= 1 - alpha. Vectorised over arrays; (0, 1) where n == 0."""
    s = np.asarray(successes, dtype=float)
    n = np.asarray(n, dtype=float)
    s, n = np.broadcast_arrays(s, n)
    a = _PRIOR
    log_mix = np.asarray(_lgamma(a + s) + _lgamma(a + n - s) - _lgamma(2 * a + n), dtype=float) - (
        2 * math.lgamma(a) - math.lgamma(2 * a))
    bound = math.log(1 / alpha)

    def inside(p: np.ndarray) -> np.ndarray:  # log M_n(p) < log(1/alpha)
        with np.errstate(divide="ignore", invalid="ignore"):
            loglik = np.where(s > 0, s * np.log(p), 0.0) + np.where(n - s > 0, (n - s) * np.log1p(-p), 0.0)
        return log_mix - loglik < bound

    p_hat = np.where(n > 0, s / np.maximum(n, 1), 0.5)
    lo_out, lo_in = np.zeros_like(p_hat), p_hat.copy()
    hi_in, hi_out = p_hat.copy(), np.ones_like(p_hat)
    for _ in range(50):
        mid = (lo_out + lo_in) / 2
        ok = inside(mid)
        lo_in, lo_out = np.where(ok, mid, lo_in), np.where(ok, lo_out, mid)
        mid = (hi_in + hi_out) / 2
        ok = inside(mid)
        hi_in, hi_out = np.where(ok, mid, hi_in), np.where(ok, hi_out, mid)
    lower = np.where((s > 0) & (n > 0), lo_out, 0.0)
    upper = np.where((s < n) & (n > 0), hi_out, 1.0)
    return lower, upper
