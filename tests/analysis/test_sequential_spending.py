"""analysis.sequential's spending functions: values at t = 0 and 1, monotone, and the exact type-I error of the
design under each (by enumerating every path of the discordant-pair walk, not by simulation)."""

from __future__ import annotations

import itertools
import math
import textwrap

import numpy as np
import pytest
from pydantic import ValidationError

from evalfleet.analysis.sequential import HSD_GAMMA, decide, decide_many, spending_function
from evalfleet.analysis.stopping import rules_of
from evalfleet.errors import UserError
from evalfleet.experiment.loading import load_experiment
from evalfleet.experiment.schema import Compare

ALL = [("obrien_fleming", None), ("pocock", None), ("hwang_shih_decani", None), ("hwang_shih_decani", -4.0),
       ("hwang_shih_decani", -1.0), ("hwang_shih_decani", 0.0), ("hwang_shih_decani", 1.0)]


@pytest.mark.parametrize("spending,gamma", ALL)
def test_spending_is_zero_at_start_alpha_at_the_cap_and_monotone(spending, gamma):
    alpha = 0.05
    f = spending_function(spending, alpha, gamma)
    assert f(0.0) == 0.0
    assert f(1.0) == pytest.approx(alpha, rel=1e-12)
    ts = np.linspace(0.0, 1.0, 201)
    values = [f(t) for t in ts]
    assert all(b > a for a, b in zip(values[1:], values[2:])), "strictly increasing after t = 0"
    assert values[1] > 0.0
    assert f(1.5) == pytest.approx(alpha)  # past the cap: nothing more to spend


def test_hwang_shih_decani_lies_between_its_limits():
    """gamma 0 is linear spending; a smaller gamma spends less early (towards O'Brien-Fleming), a larger more."""
    alpha = 0.05
    linear = spending_function("hwang_shih_decani", alpha, 0.0)
    assert linear(0.3) == pytest.approx(0.3 * alpha)
    assert spending_function("hwang_shih_decani", alpha)(0.5) == spending_function(
        "hwang_shih_decani", alpha, HSD_GAMMA)(0.5)
    for t in (0.1, 0.25, 0.5, 0.75, 0.9):
        by_gamma = [spending_function("hwang_shih_decani", alpha, g)(t) for g in (-6, -4, -3, -2, -1, 0, 1)]
        assert by_gamma == sorted(by_gamma)
        assert spending_function("obrien_fleming", alpha)(t) < by_gamma[-2]


def _exact_type_one(steps: tuple[int, ...], alpha: float, spending: str, gamma: float | None) -> float:
    """P(reject) under H0 given discordant pairs arriving `steps[k]` per look: each A-only count is
    Binomial(steps[k], 1/2); every combination of the looks' counts is run through decide_many and weighted."""
    combos = np.asarray(list(itertools.product(*[range(m + 1) for m in steps])), dtype=np.int64)
    weight = np.prod([[math.comb(m, d) / 2.0**m for d, m in zip(row, steps)] for row in combos], axis=1)
    c = np.cumsum(combos, axis=1)
    n = np.broadcast_to(np.cumsum(steps), c.shape)
    fractions = [(k + 1) / len(steps) for k in range(len(steps))]
    stop, _ = decide_many(c, n, fractions, alpha, spending, gamma)
    return float(weight[stop >= 0].sum())


@pytest.mark.parametrize("gamma", [None, -4.0, -2.0, 0.0, 1.0])
@pytest.mark.parametrize("alpha", [0.05, 0.2])
@pytest.mark.parametrize("steps", [(8, 8, 8, 8), (3, 12, 1, 9), (20, 20)])
def test_exact_type_one_error_at_most_alpha(gamma, alpha, steps):
    size = _exact_type_one(steps, alpha, "hwang_shih_decani", gamma)
    assert size <= alpha * (1 + 1e-9), size
    assert size > alpha / 4, size  # the design spends a real part of its budget: a test that can fail


def test_exact_type_one_error_matches_the_old_spendings_too():
    for spending in ("obrien_fleming", "pocock"):
        size = _exact_type_one((8, 8, 8, 8), 0.2, spending, None)
        assert 0.2 / 4 < size <= 0.2 * (1 + 1e-9), (spending, size)


def test_earlier_spending_stops_no_later_on_a_clear_difference():
    rng = np.random.default_rng(5)
    a = rng.random(200) < 0.85
    b = rng.random(200) < 0.45
    at = {g: decide(a, b, 10, 200, spending="hwang_shih_decani", gamma=g).stopped_at for g in (-6.0, -3.0, 1.0)}
    assert at[1.0] <= at[-3.0] <= at[-6.0] < 200, at
    d = decide(a, b, 10, 200, spending="hwang_shih_decani")
    assert "hwang-shih-decani" in d.method.lower() and "gamma -3" in d.method


def test_gamma_only_with_hwang_shih_decani():
    with pytest.raises(ValueError, match="gamma"):
        spending_function("obrien_fleming", 0.05, -2.0)
    with pytest.raises(ValueError, match="finite"):
        spending_function("hwang_shih_decani", 0.05, math.inf)
    assert Compare(baseline="expert", spending="hwang_shih_decani", gamma=-2).gamma == -2
    assert Compare(baseline="expert", spending="hwang_shih_decani").gamma is None
    with pytest.raises(ValidationError, match="gamma is a parameter of spending: hwang_shih_decani"):
        Compare(baseline="expert", spending="pocock", gamma=-2)
    with pytest.raises(ValidationError):
        Compare(baseline="expert", spending="hwang_shih_decani", gamma=40)


def test_the_experiment_file_takes_hwang_shih_decani_and_refuses_a_stray_gamma(tmp_path):
    def write(compare: str):
        path = tmp_path / "exp.yaml"
        path.write_text(textwrap.dedent(f"""\
            stopping: {{wave: 5, max_episodes: 20, compare: {compare}}}
            shared:
              environment: {{type: metaworld, task: reach-v3}}
              policy: {{type: metaworld_expert}}
              rollout_limit: {{num_episodes: 20}}
            runs:
              expert: {{policy_name: expert}}
              noisy: {{policy_name: noisy}}
            """))
        return path

    loaded = load_experiment(write("{baseline: expert, spending: hwang_shih_decani, gamma: -2}"))
    _, pairs = rules_of(loaded.experiment)
    assert [(p.spending, p.gamma) for p in pairs] == [("hwang_shih_decani", -2.0)]
    path = write("{baseline: expert, spending: pocock, gamma: -2}")
    with pytest.raises(UserError) as exc:
        load_experiment(path)
    assert (exc.value.where, exc.value.key) == (str(path), "stopping.compare.gamma"), exc.value.line()
    assert "set spending: hwang_shih_decani" in exc.value.message
