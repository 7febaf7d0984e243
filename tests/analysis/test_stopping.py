"""The pure stopping state (analysis/stopping.py) on constructed outcomes, and the coverage of the comparison's
anytime interval over many simulated sequences, checked at every look."""

from __future__ import annotations

import numpy as np

from evalfleet.analysis.sequential import decide
from evalfleet.analysis.stopping import PairRule, RunRule, comparison_entry, difference_intervals, state


def recorded(outcomes: list[int | None]) -> dict[int, int | None]:
    return dict(enumerate(outcomes))


def pair(policy: str, baseline_run: str = "base", alpha: float = 0.05, margin: float | None = None,
         task: str = "t") -> PairRule:
    return PairRule(task, policy, "base", policy, baseline_run, wave=10, cap=60, alpha=alpha, margin=margin)


def test_a_clear_difference_stops_both_runs_at_the_deciding_look() -> None:
    rules = [RunRule("a", 10, 60), RunRule("base", 10, 60)]
    out = {"a": recorded([1] * 60), "base": recorded([0] * 60)}
    s = state(rules, [pair("a")], out)
    p = s.pairs[0]
    # the same look the sequential test on its own decides at
    expected = decide([1] * 60, [0] * 60, 10, 60).stopped_at
    assert (p.verdict, p.stopped_at) == ("better", expected) and expected < 60
    assert s.done and {n: r.stopped_at for n, r in s.runs.items()} == {"a": expected, "base": expected}
    assert p.counts == {"pairs": expected, "discordant": expected, "policy_only": expected, "baseline_only": 0}
    assert comparison_entry(p)["verdict"] == "better" and comparison_entry(p)["interval"][0] > 0


def test_the_state_waits_for_a_complete_look() -> None:
    rules = [RunRule("a", 10, 60), RunRule("base", 10, 60)]
    out = {"a": recorded([1] * 9), "base": recorded([0] * 30)}  # a's first look is not complete
    s = state(rules, [pair("a")], out)
    assert s.rounds == 0 and not s.done and {n: r.need for n, r in s.runs.items()} == {"a": 10, "base": 10}
    assert s.pairs[0].verdict == "continue"


def test_a_decided_comparison_stays_decided_while_the_baseline_runs_on() -> None:
    rng = np.random.default_rng(3)
    base = [0] * 20 + [int(x) for x in rng.random(40) < 0.5]
    b_close = base[:20] + [int(x) for x in rng.random(40) < 0.55]
    rules = [RunRule("a", 10, 60), RunRule("b", 10, 60), RunRule("base", 10, 60)]
    pairs = [pair("a"), pair("b")]
    early = {"a": recorded([1] * 20), "b": recorded(b_close[:20]), "base": recorded(base[:20])}
    first = state(rules, pairs, early)
    a_decision = (first.pairs[0].verdict, first.pairs[0].stopped_at)
    assert a_decision[0] == "better" and first.runs["a"].stopped_at == a_decision[1]
    assert first.runs["base"].stopped_at is None  # kept for b
    # more of a's episodes, and the baseline's, recorded: a's decision and stop do not move
    later = {"a": recorded([0] * 60), "b": recorded(b_close), "base": recorded(base)}
    later["a"].update({i: 1 for i in range(a_decision[1])})
    s = state(rules, pairs, later)
    assert (s.pairs[0].verdict, s.pairs[0].stopped_at) == a_decision and s.runs["a"].stopped_at == a_decision[1]
    assert s.done and s.runs["base"].stopped_at == s.runs["b"].stopped_at


def test_holm_gives_the_second_comparison_the_larger_level() -> None:
    # b alone at alpha/2 is not rejected, but at alpha once a is: Holm's step-down decides it
    rules = [RunRule("a", 10, 60), RunRule("b", 10, 60), RunRule("base", 10, 60)]
    base = [0] * 60
    for k in range(1, 61):
        b = [1] * k + [0] * (60 - k)
        at_half = decide(b, base, 10, 60, 0.025)
        at_full = decide(b, base, 10, 60, 0.05)
        if at_full.verdict == "better" and at_half.verdict != "better":
            break
    else:  # pragma: no cover - the design has such a count
        raise AssertionError("no count between the levels")
    s = state(rules, [pair("a"), pair("b")], {"a": recorded([1] * 60), "b": recorded(b), "base": recorded(base)})
    assert [p.verdict for p in s.pairs] == ["better", "better"] and s.pairs[1].family_size == 2
    lone = state([rules[1], rules[2]], [pair("b", alpha=0.025)], {"b": recorded(b), "base": recorded(base)})
    assert lone.pairs[0].verdict == "undecided"
    assert "Holm across 2 comparisons" in comparison_entry(s.pairs[1])["method"]


def test_precision_stops_a_run_and_none_pairs_are_dropped() -> None:
    rules = [RunRule("a", 10, 200, half_width=0.1)]
    s = state(rules, [], {"a": recorded([1] * 200)})
    assert s.done and s.runs["a"].stopped_at < 200 and s.runs["a"].reason.startswith("precision reached")
    lo, hi = s.runs["a"].interval
    assert (hi - lo) / 2 <= 0.1
    # an errored episode (None) on either side drops the pair
    rules = [RunRule("a", 10, 60), RunRule("base", 10, 60)]
    a = [1] * 10 + [None] * 10
    base = [None] * 5 + [0] * 15
    s = state(rules, [pair("a")], {"a": recorded(a), "base": recorded(base)})
    assert s.pairs[0].counts == {"pairs": 5, "discordant": 5, "policy_only": 5, "baseline_only": 0}


def test_no_difference_needs_a_margin_and_undecided_at_the_cap() -> None:
    rules = [RunRule("a", 10, 60), RunRule("base", 10, 60)]
    same = recorded([1] * 60)
    with_margin = state(rules, [pair("a", margin=0.2)], {"a": same, "base": same})
    assert with_margin.pairs[0].verdict == "no_difference" and with_margin.pairs[0].stopped_at < 60
    without = state(rules, [pair("a")], {"a": same, "base": same})
    assert (without.pairs[0].verdict, without.pairs[0].stopped_at) == ("undecided", 60)
    assert without.runs["a"].reason == "cap of 60 episodes reached"


def test_the_difference_interval_covers_at_every_look() -> None:
    rng = np.random.default_rng(0)
    reps, n_max, look_every = 2000, 200, 10
    for p_a, p_b, rho in ((0.5, 0.5, 0.3), (0.7, 0.4, 0.2), (0.9, 0.85, 0.6)):
        # correlated pairs: a shared uniform decides both with probability rho
        shared = rng.random((reps, n_max))
        own = rng.random((reps, n_max, 2))
        common = rng.random((reps, n_max)) < rho
        a = np.where(common, shared < p_a, own[..., 0] < p_a)
        b = np.where(common, shared < p_b, own[..., 1] < p_b)
        c = np.cumsum(a & ~b, axis=1)[:, look_every - 1::look_every]
        d = np.cumsum(b & ~a, axis=1)[:, look_every - 1::look_every]
        ns = np.arange(look_every, n_max + 1, look_every)
        lo, hi = difference_intervals(c, d, np.broadcast_to(ns, c.shape), 0.05)
        rate = ((lo <= p_a - p_b) & (p_a - p_b <= hi)).all(axis=1).mean()
        assert rate >= 0.95 - 3 * np.sqrt(0.95 * 0.05 / reps), (p_a, p_b, rho, rate)
