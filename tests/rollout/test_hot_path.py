"""The runner's per-step work made cheaper (issue #29) keeps its meaning: the action check's fast path (a sum of the
values) never lets a non-finite action through nor refuses finite values whose sum overflows, and the timings'
skip-based reservoir keeps every value with the same probability."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest

from evalfleet.policies.base import SpecMismatchError
from evalfleet.rollout.actions import checked_action
from evalfleet.rollout.timings import SAMPLE_SIZE, PhaseStats

ENV = SimpleNamespace(action_dim=3)
RUN = SimpleNamespace(environment=SimpleNamespace(type="gymnasium", options=lambda: {"id": "CartPole-v1"}))
PLAN = SimpleNamespace(policy="p", name="r")


def check(action):
    return checked_action(action, ENV, RUN, PLAN, 0, None)


def test_finite_values_whose_sum_overflows_are_an_action():
    big = [1e308, 1e308, -5.0]
    assert check(big).tolist() == big
    assert check(np.array([1.0, 2.0, 3.0], dtype=np.float32)).dtype == np.float64


@pytest.mark.parametrize("action, problem", [
    ([float("inf"), float("-inf"), 0.0], "inf at index 0"),  # the sum is nan
    ([1e308, 1e308, float("nan")], "nan at index 2"),  # the sum overflows, and there is a nan
    ([0.0, 0.0, float("-inf")], "-inf at index 2"),
])
def test_a_non_finite_action_is_refused_naming_the_first_bad_value(action, problem, monkeypatch):
    monkeypatch.setattr("evalfleet.sim.base.environment_spec",
                        lambda *a: SimpleNamespace(describe=lambda: "action_dim 3"))
    with pytest.raises(SpecMismatchError, match=f"a non-finite action \\({problem}\\)"):
        check(action)


def test_the_timings_sample_keeps_every_value_alike():
    n, trials = 2560, 100
    kept = np.zeros(10)
    rng = random.Random(1)
    for _ in range(trials):
        stats = PhaseStats()
        for i in range(n):
            stats.add(float(i), rng)
        assert len(stats.samples) == SAMPLE_SIZE and stats.count == n
        assert stats.min_ms == 0.0 and stats.max_ms == n - 1.0
        kept += np.bincount([int(v) * 10 // n for v in stats.samples], minlength=10)
    expected = trials * SAMPLE_SIZE / 10  # each tenth of the stream: a tenth of the sample
    chi2 = float(((kept - expected) ** 2 / expected).sum())
    assert chi2 < 27.9, (chi2, kept)  # 9 degrees of freedom: p = 0.001


@pytest.mark.parametrize("batches", [[5], [300], [100, 100, 100, 2000], [255, 1, 1, 700], [1] * 600, [0, 3000, 0]])
def test_values_added_in_batches_give_what_adding_them_one_by_one_gives(batches):
    values = [random.Random(7).uniform(0.0, 0.01) for _ in range(sum(batches))]
    one, many = PhaseStats(), PhaseStats()
    rng_one, rng_many = random.Random(3), random.Random(3)
    for v in values:
        one.add(v * 1000.0, rng_one)
    start = 0
    for size in batches:
        many.add_seconds(values[start:start + size], rng_many)
        start += size
    assert many.count == one.count == len(values)
    assert many.samples == one.samples  # the same values kept, in the same places: the same draws
    assert (many.min_ms, many.max_ms) == (one.min_ms, one.max_ms)
    assert many.total_ms == pytest.approx(one.total_ms, rel=1e-12)
    assert rng_many.random() == rng_one.random()


def test_a_series_joins_its_phase_when_folded_and_when_flushed(tmp_path):
    import json

    from evalfleet.rollout.timings import PhaseTimings

    timings = PhaseTimings()
    steps = timings.series("sim_step")
    assert timings.series("sim_step") is steps
    steps.extend([0.001, 0.003])
    timings.fold()
    assert steps == [] and timings.phases["sim_step"].count == 2
    steps.append(0.002)  # the same list serves on, and flush folds what it holds
    timings.flush(tmp_path / "t.json", run="r", shard="s")
    phase = json.loads((tmp_path / "t.json").read_text())["phases"]["sim_step"]
    assert phase["count"] == 3 and phase["total_ms"] == 6.0 and phase["max_ms"] == 3.0 and steps == []
