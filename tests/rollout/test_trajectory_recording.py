"""Per-step trajectories written by the runner (#54, rollout/trajectory.py): one file per recorded episode whose
frames are the observations the policy saw and the actions it sent, as many as the record's steps, ending where
the record ends; which episodes keep one; a retried episode leaves the trajectory of the attempt its record holds;
a camera's video has one frame per step."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from evalfleet_testkit import ROOT

import evalfleet
from evalfleet.rollout.trajectory import read_trajectory


class Witness:
    """The example's noisy expert, keeping every observation state it is shown and every action it returns."""

    def __init__(self, expert):
        self.expert = expert
        self.states: list[np.ndarray] = []
        self.actions: list[np.ndarray] = []

    def reset(self, episode_seed: int, env_id: int = 0) -> None:
        self.expert.reset(episode_seed, env_id)

    def act_batch(self, observations, env_ids):
        actions = self.expert.act_batch(observations, env_ids)
        self.states += [np.asarray(o["observation/state"], dtype=np.float32) for o in observations]
        self.actions += [np.asarray(a, dtype=np.float32) for a in actions]
        return actions


def noisy_expert(scale: float):
    spec = importlib.util.spec_from_file_location("evaluate_during_training",
                                                  ROOT / "examples" / "evaluate_during_training.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example.NoisyExpert(scale)


def records_of(out, run: str) -> list[dict]:
    return [json.loads(line) for line in (out / run / "episode_results.jsonl").read_text().splitlines()]


def evaluate(policy, out, trajectories: str, episodes: int = 4, max_steps: int = 60) -> list[dict]:
    evalfleet.evaluate(policy, str(ROOT / "examples" / "quickstart.yaml"), runs=["push_expert"], workers=1,
                       output=out, log=lambda _: None,
                       overrides=[f"shared.rollout_limit.num_episodes={episodes}",
                                  f"shared.environment.max_steps={max_steps}",
                                  f"shared.recording.trajectories={trajectories}"])
    return records_of(out, "push_expert")


def test_frames_are_what_the_policy_saw_and_sent_and_end_with_the_record(tmp_path) -> None:
    policy = Witness(noisy_expert(0.3))
    records = evaluate(policy, tmp_path / "o", "{keys: [state, action, applied_action, reward, success, done, "
                                               "progress]}")
    assert {r["status"] for r in records} == {"success", "failure"}  # both endings are checked
    at = 0
    for rec in sorted(records, key=lambda r: r["episode"]):
        assert rec["trajectory"] == {"frames": f"trajectories/episode_{rec['episode']:06d}.arrow"}
        table, meta = read_trajectory(tmp_path / "o" / "push_expert" / rec["trajectory"]["frames"])
        length = rec["episode_length"]
        assert table.num_rows == length and (meta["seed"], meta["attempt"]) == (rec["seed"], rec["attempt"])
        assert meta["status"] == rec["status"] and meta["fps"] == 80.0 and meta["instruction"]
        states = np.array(table.column("observation.state").to_pylist(), dtype=np.float32)
        actions = np.array(table.column("action").to_pylist(), dtype=np.float32)
        np.testing.assert_allclose(states, np.stack(policy.states[at:at + length]), rtol=1e-6)
        np.testing.assert_allclose(actions, np.stack(policy.actions[at:at + length]), rtol=1e-6)
        np.testing.assert_allclose(np.array(table.column("applied_action").to_pylist()), np.clip(actions, -1, 1))
        success, done = table.column("next.success").to_pylist(), table.column("next.done").to_pylist()
        assert done == [False] * (length - 1) + [True]
        assert success[-1] == rec["success"] and not any(success[:-1])  # the episode ends at its first success
        assert all(np.isfinite(table.column("next.reward").to_numpy()))
        assert table.column("next.progress").to_pylist()[-1] == pytest.approx(rec["progress"]["overall_score"])
        at += length
    assert at == len(policy.actions)


@pytest.mark.parametrize("which, kept", [
    ("{episodes: failures, keys: [action]}", lambda r: r["status"] != "success"),
    ("{episodes: every_n, every_n: 2, keys: [action]}", lambda r: r["episode"] % 2 == 0),
])
def test_which_episodes_keep_their_trajectory(tmp_path, which, kept) -> None:
    records = evaluate(noisy_expert(0.3), tmp_path / "o", which)
    folder = tmp_path / "o" / "push_expert" / "trajectories"
    assert sorted(p.name for p in folder.glob("*.arrow")) == \
        sorted(f"episode_{r['episode']:06d}.arrow" for r in records if kept(r))
    assert all(("trajectory" in r) == kept(r) for r in records)  # the record says where its trajectory is
    assert not list(folder.glob(".tmp-*"))


def test_a_sample_is_chosen_by_seed(tmp_path) -> None:
    a = evaluate(noisy_expert(0.0), tmp_path / "a", "{episodes: sample, fraction: 0.5, keys: [action]}", episodes=12,
                 max_steps=5)
    evaluate(noisy_expert(0.0), tmp_path / "b", "{episodes: sample, fraction: 0.5, keys: [action]}", episodes=12,
             max_steps=5)
    kept = {p.name for p in (tmp_path / "a" / "push_expert" / "trajectories").glob("*.arrow")}
    assert 0 < len(kept) < len(a)
    assert kept == {p.name for p in (tmp_path / "b" / "push_expert" / "trajectories").glob("*.arrow")}


def test_a_retried_episode_leaves_the_trajectory_of_the_attempt_its_record_holds(write_experiment, tmp_path,
                                                                                   monkeypatch) -> None:
    from evalfleet_testkit import PLUGINS_DIR, metaworld_run

    from evalfleet.experiment.loading import load_experiment
    from evalfleet.experiment.plan import make_plan
    from evalfleet.rollout.runner import run_shards

    monkeypatch.syspath_prepend(str(PLUGINS_DIR))
    import evalfleet_test_plugins  # noqa: F401 - registers test_flaky_expert

    run = metaworld_run("reach-v3", policy_type="test_flaky_expert", episodes=12)
    run["recording"] = {"trajectories": {"keys": ["action", "done"]}}
    loaded = load_experiment(write_experiment({"flaky": run}), ["runs.flaky.policy.rate=0.3"])
    plan = make_plan(loaded)
    run_shards(plan.runs, plan.shards, tmp_path / "o")
    from evalfleet.rollout.records import latest_records

    final = latest_records(tmp_path / "o", "flaky")
    assert any(r["attempt"] > 1 for r in final.values())  # some episodes were retried
    for episode, rec in final.items():
        table, meta = read_trajectory(tmp_path / "o" / "flaky" / "trajectories" / f"episode_{episode:06d}.arrow")
        assert (meta["attempt"], meta["status"]) == (rec["attempt"], rec["status"])
        assert table.num_rows == rec["episode_length"]


def test_a_camera_is_recorded_one_frame_per_step(tmp_path) -> None:
    import av

    records = evaluate(noisy_expert(0.0), tmp_path / "o", "{keys: [action], cameras: [corner], width: 32, "
                                                        "height: 32}", episodes=2, max_steps=30)
    for rec in records:
        path = tmp_path / "o" / "push_expert" / rec["trajectory"]["videos"]["corner"]
        with av.open(str(path)) as container:
            assert sum(1 for _ in container.decode(video=0)) == rec["episode_length"]


def test_one_dataset_per_run_when_asked(tmp_path) -> None:
    records = evaluate(noisy_expert(0.0), tmp_path / "o", "{keys: [state, action], dataset: run}", episodes=3,
                       max_steps=20)
    info = json.loads((tmp_path / "o" / "push_expert" / "dataset" / "meta" / "info.json").read_text())
    assert (info["total_episodes"], info["total_frames"]) == (3, sum(r["episode_length"] for r in records))
    assert not (tmp_path / "o" / "dataset").exists()  # no Experiment-wide dataset beside it
