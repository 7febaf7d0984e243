"""The runner in-process: per-episode results do not depend on num_envs, sharding or order; variations
never leak; chunks, step budgets and faults are handled."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evalfleet_testkit import metaworld_run
from evalfleet.experiment.loading import load_experiment
from evalfleet.experiment.plan import make_plan
from evalfleet.rollout.records import latest_records
from evalfleet.rollout.runner import run_shards

ALL_VARIATIONS = {
    "robot.action_noise": {"enabled": True, "distribution": "uniform", "low": 0.0, "high": 0.3},
    "robot.observation_noise": {"enabled": True},
    "scene.friction_scale": {"enabled": True},
    "object.mass_scale": {"enabled": True},
    "object.position_noise": {"enabled": True, "sampler_cfg": {"low": [-0.02, -0.02, 0.0], "high": [0.02, 0.02, 0.0]}},
}


def _outcomes(out: Path, runs: list[str]) -> dict:
    found = {}
    for run in runs:
        for ep, rec in latest_records(out, run).items():
            found[(run, ep)] = (rec["seed"], rec["status"], rec["episode_length"], str(rec["variations"]))
    return found


def _run(path: Path, out: Path, overrides=(), shard_size=None, reverse=False) -> dict:
    loaded = load_experiment(path, overrides)
    plan = make_plan(loaded, shard_size=shard_size)
    shards = list(reversed(plan.shards)) if reverse else plan.shards
    run_shards(plan.runs, shards, out)
    return _outcomes(out, list(plan.runs))


@pytest.fixture
def experiment(write_experiment):
    return write_experiment({
        "push_noisy": metaworld_run("push-v3", episodes=8, variations=ALL_VARIATIONS),
        "reach_random": metaworld_run("reach-v3", policy_type="random", episodes=4,
                                      environment={"type": "metaworld", "task": "reach-v3", "max_steps": 60}),
    })


def test_results_do_not_depend_on_num_envs_shards_or_order(experiment, tmp_path):
    base = _run(experiment, tmp_path / "a", shard_size=100)
    assert len(base) == 12
    assert {s for (_, s, _, _) in base.values()} <= {"success", "failure"}
    assert _run(experiment, tmp_path / "b", shard_size=3, reverse=True) == base
    four_envs = ["runs.push_noisy.environment_builder.num_envs=4", "runs.reach_random.environment_builder.num_envs=3"]
    assert _run(experiment, tmp_path / "c", overrides=four_envs, shard_size=5) == base


def test_variations_never_leak_into_the_next_episode(write_experiment, tmp_path):
    from evalfleet.sim.metaworld_env import MetaworldEnvironment
    from evalfleet.sim.metaworld_spec import MetaworldOptions

    env = MetaworldEnvironment(MetaworldOptions(task="pick-place-v3"))
    fresh = MetaworldEnvironment(MetaworldOptions(task="pick-place-v3"))
    varied = {"scene.friction_scale": 0.3, "object.mass_scale": 3.0, "object.position_noise": [0.03, -0.02, 0.0],
              "robot.action_noise": 0.5, "robot.observation_noise": 0.05}
    obs = env.reset(7, varied)
    for _ in range(20):
        env.step(np.ones(4))
    nominal_after = env.reset(11, {})
    nominal_fresh = fresh.reset(11, {})
    np.testing.assert_array_equal(nominal_after["observation/state"], nominal_fresh["observation/state"])
    assert np.array_equal(env.env.model.geom_friction, fresh.env.model.geom_friction)
    assert np.array_equal(env.env.model.body_mass, fresh.env.model.body_mass)
    for _ in range(30):
        a, b = env.step(np.full(4, 0.3)), fresh.step(np.full(4, 0.3))
        np.testing.assert_array_equal(a.observation["observation/state"], b.observation["observation/state"])
    assert not np.array_equal(obs["observation/state"], nominal_fresh["observation/state"])


def test_action_chunks_run_open_loop_horizon_actions_per_call(write_experiment, tmp_path):
    from evalfleet.policies.base import POLICIES

    calls = []

    class Chunker:
        def reset(self, episode_seed, env_id=0):
            pass

        def act_batch(self, observations, env_ids):
            calls.append(len(observations))
            return [np.zeros((8, 4)) for _ in observations]

        def close(self):
            pass

    POLICIES.register("test_chunker")(lambda options, context: Chunker())
    path = write_experiment({"r": metaworld_run("reach-v3", policy_type="test_chunker", episodes=1,
                                                environment={"type": "metaworld", "task": "reach-v3", "max_steps": 30},
                                                policy={"type": "test_chunker", "open_loop_horizon": 3})})
    _run(path, tmp_path / "o")
    assert sum(calls) == 10  # 30 steps, 3 actions of each 8-action chunk


def test_step_budget_run_stops_launching_episodes_once_spent(write_experiment, tmp_path):
    path = write_experiment({"r": {**metaworld_run("reach-v3", policy_type="zero"),
                                   "environment": {"type": "metaworld", "task": "reach-v3", "max_steps": 40},
                                   "rollout_limit": {"num_steps": 100}}})
    out = _run(path, tmp_path / "o")
    assert sorted(ep for (_, ep) in out) == [0, 1, 2]  # 40 + 40 < 100 ≤ 120
    assert all(length == 40 for (_, _, length, _) in out.values())


def test_policy_errors_are_recorded_retried_and_not_failures(write_experiment, tmp_path, monkeypatch):
    import sys

    from evalfleet_testkit import PLUGINS_DIR

    monkeypatch.syspath_prepend(str(PLUGINS_DIR))
    import evalfleet_test_plugins  # noqa: F401 - registers test_flaky_expert

    path = write_experiment({"flaky": metaworld_run("reach-v3", policy_type="test_flaky_expert", episodes=30),
                             "clean": metaworld_run("reach-v3", episodes=30)})
    loaded = load_experiment(path, ["runs.flaky.policy.rate=0.3"])
    plan = make_plan(loaded)
    run_shards(plan.runs, plan.shards, tmp_path / "o")
    lines = [r for p in (tmp_path / "o" / "flaky" / "parts").glob("*.jsonl") for r in p.read_text().splitlines()]
    import json

    records = [json.loads(x) for x in lines]
    errors = [r for r in records if r["status"] == "error"]
    assert errors and all(r["success"] is None and "hiccup" in r["error"] for r in errors)
    final = latest_records(tmp_path / "o", "flaky")
    clean = latest_records(tmp_path / "o", "clean")
    assert sorted(final) == list(range(30))
    assert all(final[e]["status"] != "error" and final[e]["attempt"] == 2 for e in {r["episode"] for r in errors})
    assert [final[e]["success"] for e in range(30)] == [clean[e]["success"] for e in range(30)]
    del sys.modules["evalfleet_test_plugins"]


def test_a_torn_last_line_is_tolerated_and_its_episode_rerun(write_experiment, tmp_path):
    path = write_experiment({"r": metaworld_run("reach-v3", episodes=4)})
    out = tmp_path / "o"
    base = _run(path, out, shard_size=10)
    part = next((out / "r" / "parts").glob("*.jsonl"))
    lines = part.read_text().splitlines(keepends=True)
    part.write_text("".join(lines[:3]) + lines[3][: len(lines[3]) // 2])  # crash mid-write of episode 3
    assert sorted(latest_records(out, "r")) == [0, 1, 2]
    assert _run(path, out, shard_size=10) == base
    assert len([x for x in part.read_text().splitlines() if x.startswith("{") and x.endswith("}")]) == 4


def test_a_worker_keeps_recent_runs_envs_open_across_interleaved_shards(write_experiment, tmp_path, monkeypatch):
    """Shards arrive earliest-episodes-first across Runs (A0 B0 C0 A2 B2 C2 ...): each Run's env is built
    once while it fits in `keep_runners`, the least recently used one is closed when it does not, every
    env is closed at the end, and the records are the same either way."""
    from evalfleet.sim.metaworld_env import MetaworldEnvironment

    built, closed = [], []
    init, close = MetaworldEnvironment.__init__, MetaworldEnvironment.close

    def counting_init(self, options, *args, **kwargs):
        built.append(options.task)
        init(self, options, *args, **kwargs)

    def counting_close(self):
        closed.append(self.options.task)
        close(self)

    monkeypatch.setattr(MetaworldEnvironment, "__init__", counting_init)
    monkeypatch.setattr(MetaworldEnvironment, "close", counting_close)
    short = {"max_steps": 30}
    path = write_experiment({
        name: metaworld_run(task, episodes=4, environment={"type": "metaworld", "task": task, **short})
        for name, task in (("a", "reach-v3"), ("b", "push-v3"), ("c", "drawer-open-v3"))
    })
    plan = make_plan(load_experiment(path), shard_size=2)
    order = sorted(plan.shards, key=lambda s: (s.start, list(plan.runs).index(s.run)))

    run_shards(plan.runs, order, tmp_path / "kept")
    assert sorted(built) == ["drawer-open-v3", "push-v3", "reach-v3"]
    assert sorted(closed) == sorted(built)

    built.clear(), closed.clear()
    run_shards(plan.runs, order, tmp_path / "two", keep_runners=2)
    # a b c(closes a) a(closes b) b(closes c) c: six builds, the LRU Run closed each time
    assert built == ["reach-v3", "push-v3", "drawer-open-v3"] * 2
    assert closed[:3] == ["reach-v3", "push-v3", "drawer-open-v3"] and sorted(closed) == sorted(built)
    assert _outcomes(tmp_path / "kept", list(plan.runs)) == _outcomes(tmp_path / "two", list(plan.runs))
