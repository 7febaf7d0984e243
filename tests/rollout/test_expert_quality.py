"""The scripted experts are good at nominal (≥ 0.9 over 50 episodes) and action noise lowers them."""

from __future__ import annotations

import pytest

from evalfleet_testkit import metaworld_run
from evalfleet.experiment.loading import load_experiment
from evalfleet.experiment.plan import make_plan
from evalfleet.rollout.records import latest_records
from evalfleet.rollout.runner import run_shards

pytestmark = pytest.mark.slow
TASKS = ("reach-v3", "push-v3", "pick-place-v3", "drawer-open-v3")


def test_experts_reach_ninety_percent_and_noise_lowers_them(write_experiment, tmp_path):
    noisy = {"robot.action_noise": {"enabled": True, "distribution": "uniform", "low": 0.2, "high": 0.8}}
    runs = {t.replace("-", "_"): metaworld_run(t, episodes=50) for t in TASKS}
    runs["push_noisy"] = metaworld_run("push-v3", episodes=50, variations=noisy)
    plan = make_plan(load_experiment(write_experiment(runs)), shard_size=50)
    run_shards(plan.runs, plan.shards, tmp_path / "o")
    rates = {}
    for name in plan.runs:
        records = latest_records(tmp_path / "o", name)
        assert sorted(records) == list(range(50))
        rates[name] = sum(r["status"] == "success" for r in records.values()) / 50
    for t in TASKS:
        assert rates[t.replace("-", "_")] >= 0.9, rates
    assert rates["push_noisy"] <= rates["push_v3"] - 0.2, rates
