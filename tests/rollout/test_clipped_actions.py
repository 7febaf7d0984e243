"""Actions outside the environment's bounds (#55, the contract check during rollouts): every episode's record
counts the steps whose action the env clipped (`clipped_actions`), equal to a count the policy keeps of its own
actions, and a Run clipped on most steps is flagged with the likely convention fault in experiment_result.json and
in the report; the same expert at its own scale is not flagged."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
from evalfleet_testkit import ROOT

import evalfleet


class Scaled:
    """The example's noiseless expert with every action multiplied by `scale`; counts the actions it returns
    that lie outside Meta-World's [-1, 1] (what the runner must count as clipped)."""

    def __init__(self, expert, scale: float):
        self.expert, self.scale = expert, scale
        self.outside = 0
        self.actions = 0

    def reset(self, episode_seed: int, env_id: int = 0) -> None:
        self.expert.reset(episode_seed, env_id)

    def act_batch(self, observations, env_ids):
        actions = [a * self.scale for a in self.expert.act_batch(observations, env_ids)]
        for a in actions:
            self.actions += 1
            self.outside += bool(np.any(np.abs(a) > 1.0))
        return actions


def test_clipped_actions_are_counted_and_a_mostly_clipped_run_is_flagged(tmp_path) -> None:
    spec = importlib.util.spec_from_file_location("evaluate_during_training",
                                                  ROOT / "examples" / "evaluate_during_training.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    quickstart = str(ROOT / "examples" / "quickstart.yaml")
    flagged = {}
    for scale in (1.0, 10.0):
        policy = Scaled(example.NoisyExpert(0.0), scale)
        out = tmp_path / f"x{scale:g}"
        evalfleet.evaluate(policy, quickstart, runs=["push_expert"], workers=1, output=out, log=lambda _: None,
                           overrides=["shared.rollout_limit.num_episodes=4"])
        records = [json.loads(line) for line in (out / "push_expert" / "episode_results.jsonl").read_text()
                   .splitlines()]
        assert all(isinstance(r["clipped_actions"], int) for r in records)
        assert sum(r["clipped_actions"] for r in records) == policy.outside
        assert sum(r["episode_length"] for r in records) == policy.actions
        summary = json.loads((out / "experiment_result.json").read_text())["runs"]["push_expert"]
        clipping = summary["clipped_actions"]
        assert (clipping["steps_clipped"], clipping["steps"]) == (policy.outside, policy.actions)
        flagged[scale] = clipping["flagged"]
        page = (out / "index.html").read_text()
        assert ("actions outside the environment&#x27;s bounds" in page) == clipping["flagged"]
        assert any("likely fault is the action convention" in n for n in summary.get("notes", [])) == \
            clipping["flagged"]
    assert flagged == {1.0: False, 10.0: True}
