"""A ranking of several policies over several tasks, with simultaneous intervals (issue #25).

Model: Bradley-Terry on the discordant pairs. Episodes pair by (task, episode index): the plan gives every
policy on a task the same seeds, so one such index is a block every policy on the task faced. In a block where
policy i succeeded and j failed, i "wins" against j; blocks where both succeeded or both failed say nothing
about their order. P(i wins | discordant) = pi_i / (pi_i + pi_j), theta = log pi. (If each episode's outcome
follows logit P(success) = theta_i + the block's difficulty, the discordant pairs follow exactly this model,
whatever the difficulties: the blocks' seeds, tasks and conditions cancel.)

Fit: maximum likelihood by Newton's method, vectorised over bootstrap replicates. The log-likelihood is concave
in theta; each step solves (L + C) delta = gradient, L the Laplacian of the pair weights n_ij p_ij (1 - p_ij) and
C the averaging matrix of each group (it fixes the free shift: the step keeps each group's mean), and is halved
until the likelihood does not fall, so every step is an ascent and the fit reaches the maximum from any start. It
converges in about 6 steps where the MM algorithm of Hunter (2004, "MM algorithms for generalized Bradley-Terry
models", Ann. Statist. 32:384), used before, took about 100 (the same maximum: tests/analysis/test_ranking.py
compares them). Prior: PSEUDO_WINS
(1/2) win each way added to every pair of policies that share a paired block (Haldane-Anscombe), so a policy
that wins every discordant pair gets a finite strength; the note says so. The log-strengths sum to zero within
each connected group (every policy gets an interval; none is privileged), or a named reference's is 0.

Intervals: simultaneous 95% over the policies' log-strengths by a cluster bootstrap with a max-|t| band. The
units resampled are the blocks, with replacement within each task (a stratified cluster bootstrap: Field &
Welsh 2007, JRSS-B 69:369; Cameron, Gelbach & Miller 2008): one block yields discordant pairs for several pairs
of policies at once, correlated, so the Wald intervals of the Bradley-Terry likelihood, which treats each pair as
independent, would be too narrow. The band: c is the 95% quantile of max_i |theta*_i - theta_i| / se_i over the
replicates, each interval theta_i +- c se_i (the bootstrap max-t band: Davison & Hinkley 1997, Bootstrap Methods
and their Application, sec. 5.2 and 4.2.4; Montiel Olea & Plagborg-Moller 2019, J. Appl. Econometrics 34:1). Ranks:
while every theta lies in its interval (probability >= 95% at once), each policy's rank lies in rank_interval
(Klein, Wright & Wieczorek 2020, "A joint confidence region for an overall ranking of populations", JRSS-C
69:589). tests/analysis/test_ranking.py checks recovery and coverage on simulated data.

Pure functions; numpy only.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

PSEUDO_WINS = 0.5  # per ordered pair of policies that share a paired block
BOOTSTRAP = 1000
LEVEL = 0.95
SEED = 20250  # the bootstrap's own seed: the same records give the same intervals
BOOT_BYTES = 256 * 1024 * 1024  # the bootstrap's win matrices, at most, at once
FEW_DISCORDANT = 10  # below this many discordant pairs a policy's interval is said to be rough
MAX_ITER = 200  # Newton steps; it converges in about 6
MAX_HALVINGS = 60
TOL = 1e-10
METHOD = ("Bradley-Terry on discordant episode pairs (task, episode index), maximum likelihood (Newton); "
          "simultaneous 95% intervals: stratified cluster bootstrap over episodes with a max-|t| band")

Outcomes = Mapping[tuple[str, str], Mapping[int, bool]]  # (task, policy) -> episode index -> success


def fit_strengths(wins: np.ndarray, edges: np.ndarray, groups: np.ndarray, start: np.ndarray | None = None
                  ) -> np.ndarray:
    """Log-strengths from win counts `wins[..., i, j]` (i beat j; leading axes are replicates), PSEUDO_WINS
    added on `edges` (i and j share a block), mean 0 within each group label in `groups` (module doc: Newton).
    `start`: where the steps begin (mean 0 within each group), e.g. the point estimate for bootstrap replicates,
    which lie near it (fewer steps; the same maximum)."""
    w = np.asarray(wins, dtype=float) + PSEUDO_WINS * edges
    n = w + np.swapaxes(w, -1, -2)
    total = w.sum(axis=-1)
    sizes = np.bincount(groups)[groups]
    averaging = (groups[:, None] == groups[None, :]) / sizes[None, :]  # C: a group's mean, spread over it
    diagonal = np.arange(len(groups))
    theta = np.zeros(w.shape[:-1]) if start is None else np.broadcast_to(start, w.shape[:-1]).astype(float)
    likelihood = _log_likelihood(w, theta)
    for _ in range(MAX_ITER):
        p = 1.0 / (1.0 + np.exp(theta[..., None, :] - theta[..., :, None]))  # P(i beats j)
        gradient = total - (n * p).sum(axis=-1)
        laplacian = -n * p * (1.0 - p)
        laplacian[..., diagonal, diagonal] = 0.0
        laplacian[..., diagonal, diagonal] = -laplacian.sum(axis=-1)
        step = np.linalg.solve(laplacian + averaging, gradient[..., None])[..., 0]
        scale = np.ones(theta.shape[:-1])
        for _ in range(MAX_HALVINGS):  # halve the step of each replicate whose likelihood would fall
            candidate = theta + scale[..., None] * step
            reached = _log_likelihood(w, candidate)
            fell = reached < likelihood - 1e-12 * np.abs(likelihood)
            if not fell.any():
                break
            scale = np.where(fell, scale / 2, scale)
        moved = np.max(np.abs(candidate - theta), initial=0.0)
        theta, likelihood = candidate, reached
        if moved < TOL:
            break
    return theta


def _log_likelihood(w: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """sum_ij w_ij log P(i beats j), per replicate; over the pairs i < j, each with both of its directions (the
    logarithms on half the matrix: this is most of a Newton step's cost)."""
    i, j = np.triu_indices(theta.shape[-1], k=1)
    d = theta[..., i] - theta[..., j]  # log-odds that i beats j
    lose_i = np.logaddexp(0.0, -d)  # -log P(i beats j); -log P(j beats i) is lose_i + d
    return -((w[..., i, j] + w[..., j, i]) * lose_i + w[..., j, i] * d).sum(axis=-1)


def _components(edges: np.ndarray) -> np.ndarray:
    k = len(edges)
    label = np.full(k, -1)
    for start in range(k):
        if label[start] >= 0:
            continue
        label[start], stack = start, [start]
        while stack:
            i = stack.pop()
            for j in np.flatnonzero(edges[i]):
                if label[j] < 0:
                    label[j] = start
                    stack.append(j)
    _, dense = np.unique(label, return_inverse=True)
    return dense


def _blocks(outcomes: Outcomes, policies: list[str], tasks: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """One row per (task, episode) block: 1/0 per policy, NaN where that policy has no decided episode."""
    rows, strata = [], []
    for t, task in enumerate(tasks):
        episodes = sorted({e for (tk, p), eps in outcomes.items() if tk == task and p in policies for e in eps})
        for e in episodes:
            row = [float(outcomes[(task, p)][e]) if e in outcomes.get((task, p), {}) else np.nan for p in policies]
            rows.append(row)
            strata.append(t)
    return np.array(rows, dtype=float).reshape(-1, len(policies)), np.array(strata, dtype=int)


def _win_matrix(y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """wins[b, i, j] = sum over blocks of weight[b, block] * (i succeeded and j failed)."""
    won = np.nan_to_num(y, nan=0.0)
    lost = np.nan_to_num(1.0 - y, nan=0.0)
    return np.einsum("bn,ni,nj->bij", weights, won, lost, optimize=True)  # optimize: two BLAS products, ~3x faster


def _resampled_patterns(y: np.ndarray, strata: np.ndarray, counts: np.ndarray, bootstrap: int,
                        rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The blocks resampled with replacement within each task, as counts of each distinct outcome pattern
    (a multinomial over a task's patterns is the same draw, and memory grows with patterns, not episodes).
    `counts[n]`: how many blocks row n of `y` stands for (1 each when y holds one row per block)."""
    patterns, weights = [], []
    for t in np.unique(strata):
        here = strata == t
        rows, inverse = np.unique(np.nan_to_num(y[here], nan=-1.0), axis=0, return_inverse=True)
        per_row = np.bincount(inverse.ravel(), weights=counts[here], minlength=len(rows)).astype(np.int64)
        patterns.append(np.where(rows < 0, np.nan, rows))
        weights.append(rng.multinomial(int(per_row.sum()), per_row / per_row.sum(), size=bootstrap))
    return np.concatenate(patterns), np.concatenate(weights, axis=1).astype(float)


def _bootstrap_strengths(patterns: np.ndarray, weights: np.ndarray, edges: np.ndarray,
                         groups: np.ndarray, theta: np.ndarray | None = None) -> np.ndarray:
    """fit_strengths over every bootstrap replicate, one group of policies at a time (groups share no block, so
    their fits are independent) and in slices of replicates small enough for BOOT_BYTES: the win matrices take
    replicates x policies^2 numbers, which for the store's board of many policy revisions would not fit in memory
    at once. One group that fits is fitted as one array, as before."""
    boot = np.zeros((weights.shape[0], len(groups)))
    for g in np.unique(groups):
        members = np.flatnonzero(groups == g)
        rows = np.flatnonzero((~np.isnan(patterns[:, members])).sum(axis=1) >= 2)  # patterns this group plays
        part = patterns[np.ix_(rows, members)]
        sub_edges = edges[np.ix_(members, members)]
        step = max(1, BOOT_BYTES // (8 * len(members) ** 2 * 4))  # a few arrays of that size live at once
        for start in range(0, weights.shape[0], step):
            wins = _win_matrix(part, weights[start:start + step][:, rows])
            boot[start:start + step, members] = fit_strengths(
                wins, sub_edges, np.zeros(len(members), dtype=int),
                start=None if theta is None else theta[members] - theta[members].mean())
    return boot


def _rank_bounds(lo: np.ndarray, hi: np.ndarray, groups: np.ndarray) -> list[list[int]]:
    out = []
    for i in range(len(lo)):
        same = groups == groups[i]
        surely_above = int(np.sum(same & (lo > hi[i])))
        surely_below = int(np.sum(same & (hi < lo[i])))
        out.append([1 + surely_above, int(same.sum()) - surely_below])
    return out


def rank_policies(outcomes: Outcomes, policies: Sequence[str] | None = None, *, reference: str | None = None,
                  bootstrap: int = BOOTSTRAP, level: float = LEVEL, seed: int = SEED) -> dict[str, Any]:
    """The ranking (experiment_result.json's `ranking`) of the policies in `outcomes` (module doc)."""
    if policies is None:
        policies = sorted({p for _, p in outcomes})
    policies = list(dict.fromkeys(policies))
    tasks = sorted({t for t, p in outcomes if p in policies})
    y, strata = _blocks(outcomes, policies, tasks)
    return rank_blocks(y, strata, np.ones(len(y), dtype=np.int64), policies, tasks,
                       mean_success=_mean_success(outcomes, policies, tasks), reference=reference,
                       bootstrap=bootstrap, level=level, seed=seed)


def rank_blocks(y: np.ndarray, strata: np.ndarray, counts: np.ndarray, policies: Sequence[str],
                tasks: Sequence[str], *, mean_success: Mapping[str, float | None], reference: str | None = None,
                bootstrap: int = BOOTSTRAP, level: float = LEVEL, seed: int = SEED) -> dict[str, Any]:
    """The ranking from paired blocks given as outcome patterns: row n of `y` (1/0 per policy, NaN where the
    policy has no decided episode) stands for `counts[n]` blocks of task `tasks[strata[n]]`. rank_policies
    gives one row per block; a caller that aggregated its blocks elsewhere (the store's board, in SQL) gives
    each distinct pattern once with its count: the same fit and the same bootstrap draw."""
    policies = list(policies)
    counts = np.asarray(counts, dtype=np.int64)
    result: dict[str, Any] = {"method": METHOD, "level": level, "tasks": list(tasks), "reference": None,
                              "policies": [], "notes": []}
    both = np.nan_to_num(y * 0 + 1, nan=0.0)  # 1 where the policy has a decided episode in the block
    edges = ((both.T @ both) > 0).astype(float)
    np.fill_diagonal(edges, 0.0)
    ranked = [i for i in range(len(policies)) if edges[i].any()]
    alone = [policies[i] for i in range(len(policies)) if not edges[i].any()]
    if alone:
        result["notes"].append(f"not ranked (no episode paired with another policy's on a task): {', '.join(alone)}")
    if len(ranked) < 2:
        result["notes"].append("fewer than two policies have paired episodes on a shared task: no ranking")
        result["note"] = "; ".join(result["notes"])
        return result
    y, edges = y[:, ranked], edges[np.ix_(ranked, ranked)]
    names = [policies[i] for i in ranked]
    groups = _components(edges)
    if groups.max() > 0:
        parts = ["{" + ", ".join(n for n, g in zip(names, groups) if g == k) + "}" for k in range(groups.max() + 1)]
        result["notes"].append(f"the policies fall into {groups.max() + 1} groups that share no task: "
                               f"{' '.join(parts)}; strengths and ranks compare only within a group")
    wins = _win_matrix(y, counts[None, :].astype(float))[0]
    theta = fit_strengths(wins, edges, groups)
    rng = np.random.default_rng(seed)
    patterns, weights = _resampled_patterns(y, strata, counts, bootstrap, rng)
    boot = _bootstrap_strengths(patterns, weights, edges, groups, theta)  # each replicate's steps begin at theta
    if reference is not None and reference in names:
        ref = names.index(reference)
        same = groups == groups[ref]
        theta[same] -= theta[ref]
        boot[:, same] -= boot[:, [ref]]
        result["reference"] = reference
    se = boot.std(axis=0, ddof=1)
    free = se > 0
    t_max = np.max(np.abs(boot[:, free] - theta[free]) / se[free], axis=1) if free.any() else np.zeros(1)
    crit = float(np.quantile(t_max, level))
    lo, hi = theta - crit * se, theta + crit * se
    bounds = _rank_bounds(lo, hi, groups)
    discordant = wins + wins.T
    for i in sorted(range(len(names)), key=lambda i: (groups[i], -theta[i], names[i])):
        same = groups == groups[i]
        result["policies"].append({
            "policy": names[i], "rank": 1 + int(np.sum(same & (theta > theta[i] + 1e-12))),
            "rank_interval": bounds[i], "strength": _r(theta[i]), "interval": [_r(lo[i]), _r(hi[i])],
            "mean_success": mean_success.get(names[i]), "discordant_pairs": int(discordant[i].sum()),
            "group": int(groups[i]),
        })
    never_lost = [names[i] for i in range(len(names)) if wins[:, i].sum() == 0 and wins[i].sum() > 0]
    never_won = [names[i] for i in range(len(names)) if wins[i].sum() == 0 and wins[:, i].sum() > 0]
    if never_lost or never_won:
        result["notes"].append(
            "an unbeaten or never-winning policy has no finite maximum-likelihood strength; "
            f"{PSEUDO_WINS:g} pseudo-win each way per pair of policies keeps it finite, and its interval understates "
            "the uncertainty (every bootstrap resample is unbeaten too)"
            + (f" (won every discordant pair: {', '.join(never_lost)})" if never_lost else "")
            + (f" (lost every discordant pair: {', '.join(never_won)})" if never_won else ""))
    few = [names[i] for i in range(len(names)) if discordant[i].sum() < FEW_DISCORDANT]
    if few:
        result["notes"].append(f"fewer than {FEW_DISCORDANT} discordant pairs for {', '.join(few)}: "
                               "the bootstrap intervals are rough there")
    result["bootstrap"] = {"replicates": bootstrap, "critical_value": crit, "seed": seed,
                           "blocks": int(counts.sum())}
    result["prior"] = f"{PSEUDO_WINS:g} pseudo-win each way per pair of policies sharing a task"
    result["reference"] = result["reference"] or "sum-to-zero (log-strengths average 0 within each group)"
    result["note"] = ranking_note(result["notes"])
    return result


def _r(x: float) -> float:
    return round(float(x), 6) + 0.0  # + 0.0: no -0.0


def ranking_note(notes: Sequence[str]) -> str:
    """The ranking's `note`: what a strength means, then what the data made necessary."""
    return "; ".join(["strength: log-odds of winning a discordant episode pair against an average policy of its "
                      "group; the intervals hold for all policies at once", *notes])


def _mean_success(outcomes: Outcomes, policies: list[str], tasks: list[str]) -> dict[str, float | None]:
    """Each policy's success rate per task (decided episodes), averaged over the tasks it ran."""
    out: dict[str, float | None] = {}
    for p in policies:
        rates = [sum(eps.values()) / len(eps) for t in tasks if (eps := outcomes.get((t, p)))]
        out[p] = float(np.mean(rates)) if rates else None
    return out


def outcomes_from_records(runs: Sequence[tuple[str | None, str | None, Sequence[Mapping[str, Any]]]]
                          ) -> tuple[dict[tuple[str, str], dict[int, bool]], list[str]]:
    """(task, policy) -> {episode: success} from Runs given as (task, policy, records); decided episodes only.
    A policy with several Runs on one task (e.g. one per variation) is left out of that task (which of its Runs
    would pair is not defined); the returned notes say so."""
    count: dict[tuple[str, str], int] = {}
    for task, policy, _ in runs:
        if task is not None and policy is not None:
            count[(task, policy)] = count.get((task, policy), 0) + 1
    out: dict[tuple[str, str], dict[int, bool]] = {}
    for task, policy, records in runs:
        if task is None or policy is None or count[(task, policy)] > 1:
            continue
        eps = {int(r["episode"]): r.get("status") == "success" for r in records
               if r.get("status") in ("success", "failure") and isinstance(r.get("episode"), int)}
        if eps:
            out[(task, policy)] = eps
    notes = [f"policy {p} has {n} Runs on task {t}: left out of that task" for (t, p), n in sorted(count.items())
             if n > 1]
    return out, notes
