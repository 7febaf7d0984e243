"""analysis.sequential: the group-sequential paired comparison and the anytime rate interval; sequential Holm and
precision stopping as the product decides them (analysis.stopping.state, the function the wave loop runs)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalfleet.analysis.sequential import decide, decide_many, looks, rate_confidence_sequence
from evalfleet.analysis.stopping import PairRule, RunRule, StoppingState, state
from evalfleet.analysis.stats import mcnemar_exact, wilson_interval

WAVE, CAP = 10, 200


def family(pairs: list[tuple[np.ndarray, np.ndarray]], wave: int, cap: int, alpha: float) -> StoppingState:
    """Policies p0, p1, ... against one baseline (each pair's second arm: the same outcomes in every pair here, or
    its own baseline Run per pair), decided by `stopping.state` on every outcome recorded."""
    rules, pair_rules, outcomes = [], [], {}
    for i, (a, b) in enumerate(pairs):
        outcomes[f"p{i}"] = {k: int(v) for k, v in enumerate(a)}
        outcomes[f"b{i}"] = {k: int(v) for k, v in enumerate(b)}
        rules += [RunRule(f"p{i}", wave, cap), RunRule(f"b{i}", wave, cap)]
        # one family: one baseline name, alpha and spending (the baseline's outcomes are each pair's own)
        pair_rules.append(PairRule("task", f"p{i}", "baseline", f"p{i}", f"b{i}", wave, cap, alpha))
    return state(rules, pair_rules, outcomes)


def _paired(rng: np.random.Generator, reps: int, p_a: float, p_b: float, n: int = CAP) -> tuple[np.ndarray, ...]:
    """Correlated pairs: a shared uniform latent per seed decides both arms for half the seeds."""
    shared = rng.random((reps, n))
    common = rng.random((reps, n)) < 0.5
    a = np.where(common, shared, rng.random((reps, n))) < p_a
    b = np.where(common, shared, rng.random((reps, n))) < p_b
    return a, b


def _many(a: np.ndarray, b: np.ndarray, alpha: float = 0.05, spending: str = "obrien_fleming"):
    at = np.asarray(looks(WAVE, CAP))
    zero = np.zeros((len(a), 1), np.int64)
    c = np.concatenate([zero, np.cumsum(a & ~b, axis=1)], axis=1)[:, at]
    n = c + np.concatenate([zero, np.cumsum(b & ~a, axis=1)], axis=1)[:, at]
    return decide_many(c, n, at / CAP, alpha, spending)


def test_looks_every_wave_and_the_cap():
    assert looks(10, 35) == [10, 20, 30, 35]
    assert looks(50, 50) == [50]
    with pytest.raises(ValueError):
        looks(0, 10)


@pytest.mark.parametrize("spending", ["obrien_fleming", "pocock"])
def test_type_one_error_below_alpha_in_simulation(spending):
    reps, alpha = 500, 0.05
    a, b = _paired(np.random.default_rng(1), reps, 0.6, 0.6)
    stop, _ = _many(a, b, alpha, spending)
    rate = float(np.mean(stop >= 0))
    assert rate <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / reps), rate


def test_one_look_is_the_exact_mcnemar_test():
    for n in range(0, 30):
        for c in range(n + 1):
            stop, _ = decide_many([[c]], [[n]], [1.0], 0.05)
            assert (stop[0] >= 0) == (mcnemar_exact(c, n - c) <= 0.05), (c, n)


def test_a_clear_difference_is_better_before_the_cap():
    a, b = _paired(np.random.default_rng(2), 1, 0.9, 0.5)
    d = decide(a[0], b[0], WAVE, CAP)
    assert d.verdict == "better"
    assert d.stopped_at is not None and d.stopped_at < CAP and d.stopped_at % WAVE == 0
    assert d.statistic > 0 and d.policy_only > d.baseline_only
    assert decide(b[0], a[0], WAVE, CAP).verdict == "worse"


def test_equal_policies_end_undecided_at_the_cap_and_continue_before():
    x = np.tile([1, 0, 1, 1, 0], 40)
    final = decide(x, x, WAVE, CAP)
    assert (final.verdict, final.stopped_at, final.statistic) == ("undecided", CAP, 0.0)
    early = decide(x[:55], x[:55], WAVE, CAP)
    assert (early.verdict, early.stopped_at, early.looks_taken) == ("continue", None, 5)
    assert decide(x[:5], x[:5], WAVE, CAP).verdict == "continue"


def test_decision_is_the_same_however_the_outcomes_arrive():
    """Only the looks count: feeding the outcomes wave by wave, in uneven batches or all at once, and with
    episodes past the last look or past the cap appended, gives the same decision."""
    rng = np.random.default_rng(3)
    a, b = _paired(rng, 1, 0.75, 0.6, n=CAP + 17)
    a, b = a[0], b[0]
    full = decide(a[:CAP], b[:CAP], WAVE, CAP)
    seen = None
    for end in sorted({*looks(WAVE, CAP), *rng.integers(1, CAP, 30).tolist()}):
        d = decide(a[:end], b[:end], WAVE, CAP)
        if d.verdict != "continue":
            seen = seen or d
            assert d == seen  # once decided, later data never changes it
    assert seen == full
    assert decide(a, b, WAVE, CAP) == full
    part = decide(a[:47], b[:47], WAVE, CAP)
    assert part == decide(a[:40], b[:40], WAVE, CAP)


def test_a_larger_alpha_rejects_no_later():
    """The property sequential Holm relies on: a test rejecting at a level rejects by the same look at any larger
    level."""
    a, b = _paired(np.random.default_rng(4), 400, 0.7, 0.6)
    strict, _ = _many(a, b, 0.0125)
    loose, _ = _many(a, b, 0.05)
    hit = strict >= 0
    assert hit.any()
    assert (loose[hit] >= 0).all() and (loose[hit] <= strict[hit]).all()


def test_holm_steps_down():
    """Three comparisons: a clear one rejects at alpha/3, which frees alpha/2 for the next; a null one stays."""
    rng = np.random.default_rng(5)
    clear = _paired(rng, 1, 0.95, 0.4)
    medium = _paired(rng, 1, 0.8, 0.6)
    null = _paired(rng, 1, 0.6, 0.6)
    pairs = [(clear[0][0], clear[1][0]), (medium[0][0], medium[1][0]), (null[0][0], null[1][0])]
    decided = family(pairs, WAVE, CAP, 0.05)
    assert decided.done and [p.family_size for p in decided.pairs] == [3, 3, 3]
    got = [p.verdict for p in decided.pairs]
    assert got[0] == "better"
    assert got[2] in ("undecided", "better", "worse")
    # Holm never rejects fewer than Bonferroni nor more than the unadjusted tests
    bonferroni = [decide(x, y, WAVE, CAP, 0.05 / 3).verdict for x, y in pairs]
    unadjusted = [decide(x, y, WAVE, CAP, 0.05).verdict for x, y in pairs]
    for bon, hol, raw in zip(bonferroni, got, unadjusted):
        assert bon in ("undecided",) or hol == bon
        assert hol == "undecided" or raw == hol


def test_holm_example_where_step_down_matters():
    """A comparison significant at alpha/2 but not alpha/3 is rejected only once another one is."""
    rng = np.random.default_rng(6)
    for _ in range(200):
        cand = _paired(rng, 1, 0.75, 0.6)
        x, y = cand[0][0], cand[1][0]
        if decide(x, y, WAVE, CAP, 0.025).verdict == "better" and decide(x, y, WAVE, CAP, 0.05 / 3).verdict != "better":
            break
    else:
        pytest.skip("no example drawn")
    clear = _paired(rng, 1, 0.95, 0.3)
    null = (np.tile([1, 0], CAP // 2), np.tile([1, 0], CAP // 2))
    decided = family([(clear[0][0], clear[1][0]), (x, y), null], WAVE, CAP, 0.05)
    assert [p.verdict for p in decided.pairs] == ["better", "better", "undecided"]
    alone = family([(x, y)], WAVE, CAP, 0.05 / 3)  # at alpha/3 throughout it is not rejected
    assert alone.pairs[0].verdict != "better"


def test_rate_sequence_contains_wilson_and_covers_at_every_look():
    lo, hi = rate_confidence_sequence(np.array([30]), np.array([50]))
    w_lo, w_hi = wilson_interval(30, 50)
    assert lo[0] < w_lo and hi[0] > w_hi  # anytime validity costs width
    rng = np.random.default_rng(7)
    reps, p = 500, 0.7
    x = rng.random((reps, CAP)) < p
    at = np.asarray(looks(WAVE, CAP))
    s = np.cumsum(x, axis=1)[:, at - 1]
    lo, hi = rate_confidence_sequence(s, np.broadcast_to(at, s.shape))
    missed = np.mean(((lo > p) | (hi < p)).any(axis=1))  # a miss at any look counts
    assert missed <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps)
    lo, hi = rate_confidence_sequence(0, 0)
    assert (float(lo), float(hi)) == (0.0, 1.0)


def test_precision_stop():
    """A Run with only `precision: {half_width}` stops at the first look whose anytime interval is narrow enough,
    and needs its next look while it is not."""
    x = np.tile([1, 1, 1, 0], 200)
    rule = RunRule("r", WAVE, 800, half_width=0.1)
    run = state([rule], [], {"r": {i: int(v) for i, v in enumerate(x)}}).runs["r"]
    assert run.stopped_at is not None and run.stopped_at % WAVE == 0 and run.stopped_at < 800
    assert (run.interval[1] - run.interval[0]) / 2 <= 0.1 and run.interval[0] < 0.75 < run.interval[1]
    assert "precision reached" in run.reason
    before = state([rule], [], {"r": {i: int(v) for i, v in enumerate(x[: run.stopped_at - WAVE])}}).runs["r"]
    assert before.stopped_at is None and before.need == run.stopped_at - WAVE + WAVE
    empty = state([rule], [], {"r": {}}).runs["r"]
    assert empty.stopped_at is None and empty.need == WAVE
