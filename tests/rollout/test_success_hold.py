"""`success: {hold_steps: K}` (#55, Arena's success streaks): an episode succeeds only once the env's success has
held K consecutive steps, and at the step limit it fails. The outcomes are checked against what the per-step
success flags give by hand: the flags come from the same episodes recorded in full (a hold longer than the step
limit never ends one early; `recording.trajectories` keeps each step's flag), on reach-v3 with action noise, where
the hand hovers in and out of the goal."""

from __future__ import annotations

import json

import yaml

import evalfleet
from evalfleet.rollout.trajectory import read_trajectory

MAX_STEPS = 150
RUN = {"environment": {"type": "metaworld", "task": "reach-v3", "max_steps": MAX_STEPS},
       "policy": {"type": "metaworld_expert"}, "rollout_limit": {"num_episodes": 8},
       "variations": {"robot.action_noise": {"enabled": True, "distribution": "uniform", "low": 0.3, "high": 0.9}}}


def run(tmp_path, name: str, hold: int, **extra) -> list[dict]:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "runs": {"reach": {**RUN, "success": {"hold_steps": hold},
                                                                      **extra}}}))
    evalfleet.run(path, output=tmp_path / name, workers=1, progress=False, log=lambda _: None)
    records = [json.loads(line) for line in (tmp_path / name / "reach" / "episode_results.jsonl").read_text()
               .splitlines()]
    return sorted(records, key=lambda r: r["episode"])


def by_hand(flags: list[bool], hold: int) -> tuple[str, int, int | None]:
    """(status, length, first success step) of an episode whose env reports `flags` step by step."""
    streak = 0
    for step, success in enumerate(flags, 1):
        streak = streak + 1 if success else 0
        if streak >= hold:
            return "success", step, flags.index(True) + 1
    return "failure", len(flags), (flags.index(True) + 1) if True in flags else None


def test_outcomes_follow_the_per_step_success_flags(tmp_path) -> None:
    full = run(tmp_path, "flags", MAX_STEPS + 1, recording={"trajectories": {"keys": ["success"]}})
    flags = {}
    for rec in full:
        table, _ = read_trajectory(tmp_path / "flags" / "reach" / rec["trajectory"]["frames"])
        flags[rec["episode"]] = table.column("next.success").to_pylist()
        assert len(flags[rec["episode"]]) == MAX_STEPS and rec["status"] == "failure"  # never held long enough
    outcomes = {}
    for hold in (1, 15):
        records = run(tmp_path, f"hold{hold}", hold)
        got = [(r["status"], r["episode_length"], r.get("first_success_step")) for r in records]
        assert got == [by_hand(flags[r["episode"]], hold) for r in records], hold
        outcomes[hold] = [r["status"] for r in records]
        protocols = {r["protocol"] for r in records}
        assert len(protocols) == 1
        outcomes[f"protocol{hold}"] = protocols.pop()
        summary = json.loads((tmp_path / f"hold{hold}" / "experiment_result.json").read_text())["runs"]["reach"]
        seen = [r for r in records if r.get("first_success_step") is not None]
        assert (summary["first_success_step"]["episodes"], summary["first_success_step"]["succeeded"]) == \
            (len(seen), sum(r["status"] == "success" for r in seen))
        page = (tmp_path / f"hold{hold}" / "index.html").read_text()
        assert f"in {len(seen)} episodes, {outcomes[hold].count('success')} of them counted as successes" in page
    assert outcomes[1] != outcomes[15]  # a flickering success counts at 1 step and not at 15
    assert outcomes[1].count("success") > outcomes[15].count("success") > 0
    assert outcomes["protocol1"] != outcomes["protocol15"]  # another measurement, another protocol identity
