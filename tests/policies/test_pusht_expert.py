"""The scripted Push-T planner (`pusht_expert`, policies/pusht_planner.py): through real `evalfleet run`s on both
observation types it pushes the T onto the target in nearly every episode, the two observation types give the same
episodes, and a Run it cannot play is refused naming why. The demonstrations scripts/pusht-checkpoint.sh trains on
(scripts/pusht_demonstrations.yaml) record the planner's actions, not the noisy ones the environment executes, and
play seeds no evaluation plays."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

pytest.importorskip("gym_pusht")

from evalfleet_testkit import ROOT
from evalfleet_testkit import run_evalfleet as run_cli

from evalfleet.policies.pusht_planner import PushTPlanner, pose_from_keypoints
from evalfleet.rollout.trajectory import read_trajectory

DEMONSTRATIONS = ROOT / "scripts" / "pusht_demonstrations.yaml"


def _records(out: Path, run: str) -> list[dict]:
    return [json.loads(line) for line in (out / run / "episode_results.jsonl").read_text().splitlines() if line]


def test_the_planner_pushes_the_t_onto_the_target_on_both_observation_types(tmp_path):
    runs = {name: {"environment": {"type": "pusht", "obs_type": obs_type}, "policy": {"type": "pusht_expert"},
                   "task": "pusht", "rollout_limit": {"num_episodes": 16}}
            for name, obs_type in (("state", "state"), ("keypoints", "environment_state_agent_pos"))}
    experiment = tmp_path / "expert.yaml"
    experiment.write_text(yaml.safe_dump({"name": "pusht_expert", "seed": 5, "runs": runs}))
    proc = run_cli("run", str(experiment), "--output", str(tmp_path / "out"), "--no-progress")
    assert proc.returncode == 0, proc.stderr[-3000:]
    state, keypoints = _records(tmp_path / "out", "state"), _records(tmp_path / "out", "keypoints")
    assert sum(r["success"] for r in state) >= 14, [(r["seed"], r["success"], r["failure_code"]) for r in state]
    # the keypoints give the pose to floating-point accuracy, so the same seeds play out the same way
    assert ({r["seed"]: (r["success"], r["episode_length"]) for r in state}
            == {r["seed"]: (r["success"], r["episode_length"]) for r in keypoints})


def test_the_planner_is_a_function_of_the_state_and_never_leaves_the_board():
    planner = PushTPlanner()
    rng = np.random.default_rng(0)
    for _ in range(200):
        agent, xy, angle = rng.uniform(30, 480, 2), rng.uniform(100, 400, 2), rng.uniform(-np.pi, np.pi)
        target = planner.target(agent, xy, angle)
        np.testing.assert_array_equal(target, planner.target(agent, xy, angle))
        assert np.all((target >= 0) & (target <= 512)) and np.linalg.norm(target - agent) <= 30.0 + 1e-9
    left, right = np.array([-60.0, 0.0]), np.array([60.0, 0.0])
    c, s = np.cos(1.0), np.sin(1.0)
    turn = np.array([[c, -s], [s, c]])
    points = np.concatenate([turn @ left + [200, 300], turn @ right + [200, 300], np.zeros(12)])
    xy, angle = pose_from_keypoints(points)
    np.testing.assert_allclose(xy, [200, 300]) and np.testing.assert_allclose(angle, 1.0)


@pytest.mark.parametrize("environment, key, fix", [
    ({"type": "pusht", "obs_type": "pixels"}, "runs.r.environment.obs_type", "obs_type state or environment_state"),
    ({"type": "pusht", "actions": "normalized"}, "runs.r.environment.actions", "actions: native"),
    ({"type": "metaworld", "task": "reach-v3"}, "runs.r.environment.type", "type: pusht"),
])
def test_a_run_the_planner_cannot_play_is_refused_at_load_naming_file_key_and_fix(tmp_path, environment, key, fix):
    experiment = tmp_path / "bad.yaml"
    experiment.write_text(yaml.safe_dump({"name": "bad", "runs": {"r": {
        "environment": environment, "policy": {"type": "pusht_expert"}, "rollout_limit": {"num_episodes": 1}}}}))
    proc = run_cli("run", str(experiment), "--output", str(tmp_path / "out"), "--no-progress")
    assert proc.returncode == 2 and not (tmp_path / "out").exists(), proc.stderr[-3000:]
    assert str(experiment) in proc.stderr and key in proc.stderr and fix in proc.stderr, proc.stderr


def _frames(out: Path, episode: int) -> dict[str, np.ndarray]:
    table, _ = read_trajectory(out / "planner" / "trajectories" / f"episode_{episode:06d}.arrow")
    return {key: np.array(table.column(key).to_pylist(), dtype=np.float64)
            for key in ("observation.state", "observation.environment_state", "action")}


def test_the_demonstrations_record_the_planners_actions_while_the_environment_executes_noisy_ones(tmp_path):
    """DART: the Experiment's action noise is the environment's, so every recorded action is what the planner
    answers to the recorded observation, and the same seeds without the noise play out otherwise."""
    outs = {}
    for name, noise in (("noisy", "true"), ("exact", "false")):
        outs[name] = tmp_path / name
        proc = run_cli("run", str(DEMONSTRATIONS), "--output", str(outs[name]), "--no-progress", "--workers", "1",
                       "runs.planner.rollout_limit.num_episodes=2", "runs.planner.environment.max_steps=40",
                       f"runs.planner.variations.robot.action_noise.enabled={noise}")
        assert proc.returncode == 0, proc.stderr[-3000:]
    planner = PushTPlanner()
    for episode in (0, 1):
        noisy, exact = _frames(outs["noisy"], episode), _frames(outs["exact"], episode)
        replanned = [planner.target(agent, *pose_from_keypoints(keys))
                     for agent, keys in zip(noisy["observation.state"], noisy["observation.environment_state"])]
        np.testing.assert_allclose(noisy["action"], replanned, atol=1e-3)  # float32 frames: ~1e-5 px apart
        # the noise was executed: from the same start, the agent's path parts from the noise-free one
        np.testing.assert_array_equal(noisy["observation.state"][0], exact["observation.state"][0])
        assert np.abs(noisy["observation.state"][1:] - exact["observation.state"][1:]).max() > 1.0


def test_the_demonstrations_play_no_seed_an_evaluation_plays():
    proc = run_cli("plan", str(DEMONSTRATIONS), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    seeds = [e["seed"] for e in json.loads(proc.stdout)["runs"][0]["episodes"]]
    assert len(seeds) == len(set(seeds)) >= 600 and min(seeds) >= 1_000_000  # lerobot-eval plays 0.. and 1000..
