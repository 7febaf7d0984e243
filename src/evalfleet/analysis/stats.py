"""Statistics shared by summaries, reports and analyses."""

from __future__ import annotations

import math

Z95 = 1.959963984540054


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion; (0, 1) when n == 0."""
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


# --------------------------------------------------------------------------------------------------
# Tests and intervals used by `evalfleet compare`, `power` and `sensitivity`. Pure Python / numpy so the
# runtime stays light; tests check them against scipy and statsmodels.


def normal_two_sided_p(z: float) -> float:
    """Two-sided p-value of a standard-normal statistic."""
    return math.erfc(abs(z) / math.sqrt(2.0))


def normal_quantile(q: float) -> float:
    """Quantile of the standard normal distribution."""
    from statistics import NormalDist

    return NormalDist().inv_cdf(q)


def binomial_cdf_half(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2); exact integer arithmetic for moderate n."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if n <= 4000:
        total = sum(math.comb(n, i) for i in range(k + 1))
        return total / 2**n  # int / int division is correctly rounded
    log_half_n = n * math.log(0.5)
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + log_half_n for i in range(k + 1)]
    top = max(logs)
    return min(1.0, math.exp(top) * math.fsum(math.exp(v - top) for v in logs))


def mcnemar_exact(b: int, c: int) -> float:
    """Exact (binomial) two-sided McNemar p-value from the two discordant counts.

    b: pairs where the first arm succeeded and the second failed; c: the reverse. Matches
    statsmodels' `mcnemar(table, exact=True)`."""
    n = b + c
    if n == 0:
        return 1.0
    return min(1.0, 2.0 * binomial_cdf_half(min(b, c), n))


def two_proportion_ztest(s1: int, n1: int, s2: int, n2: int) -> tuple[float, float]:
    """Pooled two-proportion z test of p1 == p2 (two-sided): (z, p). Matches statsmodels'
    `proportions_ztest([s1, s2], [n1, n2])`; when both arms are all-success or all-failure the
    statistic is undefined there and here it is (0.0, 1.0)."""
    if n1 <= 0 or n2 <= 0:
        raise ValueError("both arms need at least one episode")
    p1, p2 = s1 / n1, s2 / n2
    pooled = (s1 + s2) / (n1 + n2)
    var = pooled * (1 - pooled) * (1 / n1 + 1 / n2)
    if var <= 0:
        return (0.0, 1.0)
    z = (p1 - p2) / math.sqrt(var)
    return (z, normal_two_sided_p(z))


def holm_adjust(pvalues: list[float]) -> list[float]:
    """Holm step-down adjusted p-values (same order as given), as statsmodels' multipletests(method='holm')."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def newcombe_difference_interval(s1: int, n1: int, s2: int, n2: int, z: float = Z95) -> tuple[float, float]:
    """Newcombe's hybrid score interval for p2 - p1 (independent arms), built from Wilson intervals."""
    p1, p2 = s1 / n1, s2 / n2
    l1, u1 = wilson_interval(s1, n1, z)
    l2, u2 = wilson_interval(s2, n2, z)
    d = p2 - p1
    lower = d - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2)
    upper = d + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2)
    return (max(-1.0, lower), min(1.0, upper))


def paired_difference_interval(b: int, c: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wald interval for the paired difference p2 - p1 = (c - b) / n over n matched pairs."""
    if n <= 0:
        return (-1.0, 1.0)
    d = (c - b) / n
    var = ((b + c) - (c - b) ** 2 / n) / (n * n)
    half = z * math.sqrt(max(var, 0.0))
    return (max(-1.0, d - half), min(1.0, d + half))


def episodes_per_arm(p1: float, p2: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """Episodes per arm for a two-sided pooled two-proportion z test to detect p1 vs p2 (normal
    approximation, equal arms, no continuity correction; as statsmodels'
    samplesize_proportions_2indep_onetail)."""
    if not (0 < p1 < 1 and 0 < p2 < 1):
        raise ValueError("p1 and p2 must lie strictly between 0 and 1")
    if p1 == p2:
        raise ValueError("p1 and p2 must differ")
    if not (0 < alpha < 1 and 0 < power < 1):
        raise ValueError("alpha and power must lie strictly between 0 and 1")
    z_a = normal_quantile(1 - alpha / 2)
    z_b = normal_quantile(power)
    p_bar = (p1 + p2) / 2
    num = z_a * math.sqrt(2 * p_bar * (1 - p_bar)) + z_b * math.sqrt(p1 * (1 - p1) + p2 * (1 - p2))
    return math.ceil(num * num / (p1 - p2) ** 2)


def mean_interval(values: list[float], z: float = Z95) -> tuple[float, float, float]:
    """(mean, lower, upper): normal-approximation 95% interval of a mean."""
    n = len(values)
    if n == 0:
        return (math.nan, math.nan, math.nan)
    mean = math.fsum(values) / n
    if n < 2:
        return (mean, mean, mean)
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    half = z * math.sqrt(var / n)
    return (mean, mean - half, mean + half)
