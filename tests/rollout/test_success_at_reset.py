"""Success at reset (#55): a Gymnasium task whose start already meets its success for some seeds. Those episodes
are marked in their records (`success_at_reset`, an `error` with code success_at_reset, so the rate leaves them
out) and the Run says how many on every surface: experiment_result.json, its notes and the report."""

from __future__ import annotations

import json

import gymnasium
import numpy as np
import yaml
from gymnasium import spaces

from evalfleet.experiment.loading import load_experiment
from evalfleet.experiment.plan import make_plan
from evalfleet.outputs.finalize import finalize
from evalfleet.rollout.records import latest_records
from evalfleet.rollout.runner import run_shards


class StartsAtGoal(gymnasium.Env):
    """A point on a line that succeeds at x >= 3 (terminating). Its start is drawn in [0, 4): about one start in
    four is already past the goal, so the first step reports success whatever the action (a step moves at most
    0.1 back)."""

    def __init__(self):
        self.action_space = spaces.Box(-0.1, 0.1, shape=(1,), dtype=np.float32)
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(1,), dtype=np.float64)
        self.x = 0.0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.x = float(self.np_random.uniform(0, 4))
        return np.array([self.x]), {}

    def step(self, action):
        self.x += float(np.clip(np.asarray(action).reshape(-1)[0], -0.1, 0.1))
        reached = self.x >= 3.0
        return np.array([self.x]), float(reached), reached, False, {"reached": reached}


gymnasium.register("evalfleet-test/StartsAtGoal-v0", entry_point=StartsAtGoal, max_episode_steps=40)


def test_episodes_that_start_at_success_are_marked_and_left_out_of_the_rate(tmp_path) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({"name": "at_reset", "runs": {"line": {
        "environment": {"type": "gymnasium", "id": "evalfleet-test/StartsAtGoal-v0", "success": {"terminated": True},
                        "max_steps": 40},
        "policy": {"type": "random"}, "rollout_limit": {"num_episodes": 24}, "max_attempts": 2}}}))
    plan = make_plan(load_experiment(exp))
    out = tmp_path / "out"
    run_shards(plan.runs, plan.shards, out)
    records = latest_records(out, "line")
    starts = {}
    for episode, seed in ((e, plan.runs["line"].episode(e).seed) for e in range(24)):
        env = StartsAtGoal()
        starts[episode] = env.reset(seed=seed)[0][0]
    surely = {e for e, x in starts.items() if x >= 3.1}  # past the goal by more than one step can undo
    maybe = {e for e, x in starts.items() if x >= 2.9}  # within one step of it
    marked = {e for e, r in records.items() if r.get("success_at_reset")}
    assert surely and surely <= marked <= maybe and len(marked) < 24
    for e in marked:
        r = records[e]
        assert (r["status"], r["success"], r["failure_code"], r["attempt"]) == ("error", None, "success_at_reset", 2)
        assert r["episode_length"] == 1
    finalize(out)
    summary = json.loads((out / "experiment_result.json").read_text())["runs"]["line"]
    decided = [r for e, r in records.items() if e not in marked]
    assert summary["success_at_reset"] == len(marked)
    assert summary["decided"] == len(decided) and summary["counts"]["success"] == sum(r["success"] for r in decided)
    assert any("success at reset" in n for n in summary["notes"])
    assert f"{len(marked)} episodes already met the task&#x27;s success after the first step" in \
        (out / "index.html").read_text()
