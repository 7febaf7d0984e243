"""analysis.ranking: Bradley-Terry on discordant episode pairs, simultaneous bootstrap intervals (issue #25)."""

from __future__ import annotations

import numpy as np
import pytest

from evalfleet.analysis.ranking import (PSEUDO_WINS, _blocks, fit_strengths, outcomes_from_records, rank_blocks,
                                        rank_policies)
from evalfleet.outputs.summary import build_result


def simulate(theta, *, tasks: int, episodes: int, rng) -> dict:
    """Paired episodes: logit P(success of policy i in block b) = theta_i + difficulty_b. Under this model the
    discordant pairs follow Bradley-Terry with log-strengths theta, whatever the difficulties."""
    out = {}
    for t in range(tasks):
        difficulty = rng.normal(0.0, 1.0, episodes) + rng.normal(0.0, 0.5)
        for i, th in enumerate(theta):
            p = 1.0 / (1.0 + np.exp(-(th + difficulty)))
            success = rng.random(episodes) < p
            out[(f"task{t}", f"p{i}")] = {e: bool(s) for e, s in enumerate(success)}
    return out


def by_policy(ranking: dict) -> dict:
    return {p["policy"]: p for p in ranking["policies"]}


def test_the_fit_matches_the_closed_form_for_two_policies():
    # Two policies: the MLE with pseudo-wins is log((w + a) / (l + a)), split evenly by the sum-to-zero rule.
    wins = np.array([[0.0, 30.0], [10.0, 0.0]])
    theta = fit_strengths(wins, np.ones((2, 2)) - np.eye(2), np.zeros(2, dtype=int))
    expected = np.log((30 + PSEUDO_WINS) / (10 + PSEUDO_WINS))
    assert theta[0] - theta[1] == pytest.approx(expected, abs=1e-8)
    assert theta.sum() == pytest.approx(0.0, abs=1e-12)


def mm_fit(wins: np.ndarray, edges: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """The MM algorithm (Hunter 2004) the ranking used before Newton's method, run to a tight tolerance: the
    reference the Newton fit must meet."""
    w = wins + PSEUDO_WINS * edges
    n, total, pi = w + np.swapaxes(w, -1, -2), w.sum(axis=-1), np.ones(w.shape[:-1])
    for _ in range(200_000):
        denom = (n / (pi[..., :, None] + pi[..., None, :])).sum(axis=-1)
        new = np.where(denom > 0, total / np.where(denom > 0, denom, 1.0), 1.0)
        for g in np.unique(groups):
            new[..., groups == g] /= np.exp(np.log(new[..., groups == g]).mean(axis=-1, keepdims=True))
        if np.max(np.abs(np.log(new) - np.log(pi))) < 1e-13:
            return np.log(new)
        pi = new
    raise AssertionError("MM did not converge")


@pytest.mark.parametrize("case", ["close", "lopsided", "unbeaten", "two groups", "replicates"])
def test_newtons_fit_is_the_maximum_the_mm_algorithm_reaches(case):
    rng = np.random.default_rng(7)
    k = 6
    edges = np.ones((k, k)) - np.eye(k)
    groups = np.zeros(k, dtype=int)
    wins = rng.integers(0, 40, (k, k)).astype(float)
    if case == "lopsided":  # strengths far apart: the maximum is far from the start
        wins = np.triu(rng.integers(200, 400, (k, k)), 1) + np.tril(rng.integers(0, 3, (k, k)), -1).astype(float)
    elif case == "unbeaten":
        wins[:, 0] = 0.0
    elif case == "two groups":  # {0, 1, 2} and {3, 4, 5} share no block
        groups = np.array([0, 0, 0, 1, 1, 1])
        edges = (groups[:, None] == groups[None, :]) - np.eye(k)
        wins = wins * edges
    elif case == "replicates":
        wins = rng.integers(0, 40, (50, k, k)).astype(float)
    np.fill_diagonal(wins, 0.0) if wins.ndim == 2 else None
    theta = fit_strengths(wins, edges, groups)
    assert np.max(np.abs(theta - mm_fit(wins, edges, groups))) < 1e-7
    for g in np.unique(groups):
        assert np.abs(theta[..., groups == g].sum(axis=-1)).max() < 1e-9


def test_recovers_known_strengths():
    theta = np.array([1.0, 0.3, -0.2, -1.1])
    theta -= theta.mean()
    ranking = rank_policies(simulate(theta, tasks=3, episodes=1500, rng=np.random.default_rng(11)))
    got = by_policy(ranking)
    errors = [got[f"p{i}"]["strength"] - theta[i] for i in range(4)]
    assert max(abs(e) for e in errors) < 0.1, errors
    assert [p["policy"] for p in ranking["policies"]] == ["p0", "p1", "p2", "p3"]
    assert [p["rank"] for p in ranking["policies"]] == [1, 2, 3, 4]
    assert all(p["rank_interval"] == [p["rank"], p["rank"]] for p in ranking["policies"])  # well separated
    assert all(p["interval"][0] < p["strength"] < p["interval"][1] for p in ranking["policies"])
    assert ranking["tasks"] == ["task0", "task1", "task2"] and ranking["bootstrap"]["blocks"] == 4500


def test_simultaneous_intervals_cover_all_strengths_at_once():
    """Over 300 simulated data sets (3 policies, 2 tasks, 100 episodes each) the 95% intervals cover all three
    true strengths at once in >= 95% of them, within Monte-Carlo error (2 standard errors)."""
    theta = np.array([0.8, 0.0, -0.8])
    rng = np.random.default_rng(2025)
    sets, covered = 300, 0
    for _ in range(sets):
        got = by_policy(rank_policies(simulate(theta, tasks=2, episodes=100, rng=rng), ["p0", "p1", "p2"]))
        covered += all(got[f"p{i}"]["interval"][0] <= theta[i] <= got[f"p{i}"]["interval"][1] for i in range(3))
    rate, se = covered / sets, (0.95 * 0.05 / sets) ** 0.5
    assert rate >= 0.95 - 2 * se, rate


def test_one_policy_is_not_ranked():
    outcomes = {("reach", "expert"): {0: True, 1: False}, ("push", "expert"): {0: True}}
    ranking = rank_policies(outcomes)
    assert ranking["policies"] == [] and "no ranking" in ranking["note"]


def test_disconnected_policies_are_ranked_within_their_groups():
    rng = np.random.default_rng(3)
    left = simulate([0.5, -0.5], tasks=1, episodes=200, rng=rng)
    right = {(task.replace("task", "other"), policy.replace("p", "q")): eps
             for (task, policy), eps in simulate([1.0, -1.0], tasks=1, episodes=200, rng=rng).items()}
    ranking = rank_policies({**left, **right})
    got = by_policy(ranking)
    assert "2 groups that share no task" in ranking["note"] and "{p0, p1} {q0, q1}" in ranking["note"]
    assert got["p0"]["group"] == got["p1"]["group"] != got["q0"]["group"] == got["q1"]["group"]
    assert (got["p0"]["rank"], got["p1"]["rank"], got["q0"]["rank"], got["q1"]["rank"]) == (1, 2, 1, 2)
    assert got["p0"]["strength"] + got["p1"]["strength"] == pytest.approx(0.0, abs=1e-6)  # centred per group
    assert got["q0"]["rank_interval"] == [1, 1] and got["q1"]["rank_interval"] == [2, 2]


def test_a_policy_that_wins_every_discordant_pair_gets_a_finite_strength():
    outcomes = {("reach", "best"): {e: True for e in range(40)},
                ("reach", "mid"): {e: e % 2 == 0 for e in range(40)},
                ("reach", "worst"): {e: e % 4 == 0 for e in range(40)}}
    ranking = rank_policies(outcomes)
    got = by_policy(ranking)
    assert all(np.isfinite(p["strength"]) and np.isfinite(p["interval"]).all() for p in ranking["policies"])
    assert [p["policy"] for p in ranking["policies"]] == ["best", "mid", "worst"]
    assert "won every discordant pair: best" in ranking["note"] and "pseudo-win" in ranking["note"]
    assert got["best"]["mean_success"] == 1.0 and got["worst"]["mean_success"] == 0.25


def test_a_policy_with_no_paired_episode_is_named_and_left_out():
    outcomes = {("reach", "a"): {0: True, 1: False}, ("reach", "b"): {0: False, 1: True},
                ("push", "c"): {0: True}}
    ranking = rank_policies(outcomes)
    assert [p["policy"] for p in ranking["policies"]] == ["a", "b"]
    assert "not ranked (no episode paired with another policy's on a task): c" in ranking["note"]


def test_a_named_reference_has_strength_zero():
    theta = np.array([0.6, 0.0, -0.6])
    outcomes = simulate(theta, tasks=2, episodes=300, rng=np.random.default_rng(5))
    centred, referenced = rank_policies(outcomes), rank_policies(outcomes, reference="p2")
    got = by_policy(referenced)
    assert referenced["reference"] == "p2" and got["p2"]["strength"] == 0.0 and got["p2"]["interval"] == [0.0, 0.0]
    diff = by_policy(centred)["p0"]["strength"] - by_policy(centred)["p2"]["strength"]
    assert got["p0"]["strength"] == pytest.approx(diff, abs=1e-5)


def test_blocks_given_as_patterns_with_counts_rank_as_one_row_per_block():
    """The store's board aggregates its blocks in SQL: each distinct outcome pattern once, with its count. The
    ranking must be the one of the blocks themselves, bootstrap included (a shuffled pattern order too)."""
    outcomes = simulate(np.array([0.5, 0.0, -0.4]), tasks=2, episodes=200, rng=np.random.default_rng(3))
    outcomes[("task1", "p2")] = {e: s for e, s in outcomes[("task1", "p2")].items() if e % 3}  # some NaN cells
    policies, tasks = ["p0", "p1", "p2"], ["task0", "task1"]
    y, strata = _blocks(outcomes, policies, tasks)
    keyed = np.column_stack([strata, np.nan_to_num(y, nan=-1.0)])
    distinct, counts = np.unique(keyed, axis=0, return_counts=True)
    order = np.random.default_rng(0).permutation(len(distinct))
    distinct, counts = distinct[order], counts[order]
    patterns = np.where(distinct[:, 1:] < 0, np.nan, distinct[:, 1:])
    assert len(patterns) < len(y) / 10
    whole = rank_policies(outcomes, policies)
    aggregated = rank_blocks(patterns, distinct[:, 0].astype(int), counts, policies, tasks,
                             mean_success={p["policy"]: p["mean_success"] for p in whole["policies"]})
    assert aggregated == whole


def test_outcomes_from_records_pairs_by_task_and_episode_and_skips_repeated_runs():
    def recs(statuses):
        return [{"episode": e, "status": s} for e, s in enumerate(statuses)]

    outcomes, notes = outcomes_from_records([
        ("reach", "a", recs(["success", "failure", "error"])),
        ("reach", "b", recs(["failure", "success", "success"])),
        ("reach", "c", recs(["success"])), ("reach", "c", recs(["failure"])),
    ])
    assert outcomes == {("reach", "a"): {0: True, 1: False}, ("reach", "b"): {0: False, 1: True, 2: True}}
    assert notes == ["policy c has 2 Runs on task reach: left out of that task"]


def _summary(run: str, task: str, policy: str) -> dict:
    return {"run": run, "task": task, "policy": policy, "status": "completed", "decided": 2, "episodes_recorded": 2,
            "counts": {"success": 1, "failure": 1, "error": 0, "missing": 0}}


def test_build_result_adds_the_ranking_only_when_two_policies_share_a_task():
    recs = {"r1": [{"episode": 0, "status": "success"}, {"episode": 1, "status": "failure"}],
            "r2": [{"episode": 0, "status": "failure"}, {"episode": 1, "status": "success"}]}
    shared = build_result([_summary("r1", "reach", "a"), _summary("r2", "reach", "b")], {}, records=recs)
    assert [p["policy"] for p in shared["ranking"]["policies"]] == ["a", "b"]
    assert shared["ranking"]["tasks"] == ["reach"]
    apart = build_result([_summary("r1", "reach", "a"), _summary("r2", "push", "b")], {}, records=recs)
    assert "ranking" not in apart
    assert "ranking" not in build_result([_summary("r1", "reach", "a")], {}, records=recs)


def test_a_fit_started_elsewhere_reaches_the_same_maximum():
    """Bootstrap replicates start at the point estimate (fewer Newton steps): any start reaches the one maximum."""
    rng = np.random.default_rng(3)
    k = 5
    edges = np.ones((k, k)) - np.eye(k)
    wins = rng.integers(0, 30, (20, k, k)).astype(float) * edges
    start = rng.normal(0.0, 2.0, k)
    from_zero = fit_strengths(wins, edges, np.zeros(k, dtype=int))
    started = fit_strengths(wins, edges, np.zeros(k, dtype=int), start=start - start.mean())
    assert np.max(np.abs(started - from_zero)) < 1e-9
