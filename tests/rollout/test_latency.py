"""Simulated policy latency (issue #28): which action the env steps at every step, the records' `timing`, the
same records whatever ran them, the chunked Meta-World expert, and the `timing:` checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evalfleet_testkit import metaworld_run
from evalfleet.errors import UserError
from evalfleet.experiment.loading import load_experiment
from evalfleet.experiment.plan import make_plan
from evalfleet.rollout.latency import latency_steps
from evalfleet.rollout.records import latest_records
from evalfleet.rollout.runner import run_shards

STEPS = 20


class Recorder:
    """Chunks whose action k of call c is [c, k, 0, 0] / 100 (recognisable once stepped), and the step each call
    was made at."""

    def __init__(self, chunk: int, single: bool = False):
        self.chunk, self.single, self.calls = chunk, single, []

    def reset(self, episode_seed, env_id=0):
        self.calls.clear()

    def act_batch(self, observations, env_ids):
        c = len(self.calls)
        self.calls.append(len(STEPPED))
        if self.single:
            return [np.array([c, 0, 0, 0]) / 100 for _ in observations]
        return [np.array([[c, k, 0, 0] for k in range(self.chunk)]) / 100 for _ in observations]

    def close(self):
        pass


STEPPED: list[tuple[int, int]] = []


@pytest.fixture
def recorded(write_experiment, tmp_path, monkeypatch):
    """Runs one episode of STEPS steps under a simulated latency; gives (the (call, index) of every action the env
    stepped, the steps the calls were made at, the record)."""
    from evalfleet.policies.base import POLICIES
    from evalfleet.sim.metaworld_env import MetaworldEnvironment

    step = MetaworldEnvironment.step

    def recording_step(self, action):
        STEPPED.append(tuple(int(round(x * 100)) for x in np.asarray(action)[:2]))
        return step(self, np.zeros(4))

    monkeypatch.setattr(MetaworldEnvironment, "step", recording_step)

    def run(chunk: int, timing: dict, single: bool = False):
        STEPPED.clear()
        policy = Recorder(chunk, single)
        POLICIES.register("test_latency_recorder")(lambda options, context: policy)
        path = write_experiment({"r": metaworld_run(
            "reach-v3", policy_type="test_latency_recorder", episodes=1, timing=timing,
            environment={"type": "metaworld", "task": "reach-v3", "max_steps": STEPS})})
        plan = make_plan(load_experiment(path))
        out = tmp_path / f"o{len(list(tmp_path.iterdir()))}"
        run_shards(plan.runs, plan.shards, out)
        return list(STEPPED), list(policy.calls), latest_records(out, "r")[0]

    return run


def test_each_chunk_is_applied_from_the_step_it_arrives_at_and_the_steps_before_hold(recorded):
    # 250 ms at 10 Hz: L = 3 steps; chunks of 6 arrive 3 steps after their call, their first 3 actions stale.
    stepped, calls, record = recorded(6, {"mode": "simulated", "control_hz": 10, "latency": {"fixed_ms": 250}})
    assert calls == [0, 6, 12, 18]  # asked again when the queue runs dry, with the observation of then
    zero = (0, 0)  # no previous action before the first chunk: the late action is zeros
    assert stepped[:6] == [zero, zero, zero, (0, 3), (0, 4), (0, 5)]
    for c, t in enumerate(calls[1:], start=1):  # steps t..t+2 hold the last action applied, then chunk c from 3
        assert stepped[t:t + 3] == ([(c - 1, 5)] * 3)[:STEPS - t]
        assert stepped[t + 3:t + 6] == [(c, 3), (c, 4), (c, 5)][:max(0, STEPS - t - 3)]
    assert len(stepped) == STEPS == record["episode_length"]
    # 3 + 3 + 3 held, and 2 of the last call's 3 before the episode ended; 3 stale actions skipped per call.
    assert record["timing"] == {"mode": "simulated", "latency_ms": 250.0, "latency_steps": 3, "held_steps": 11,
                                "stale_steps": 12, "stale_ratio": 0.55}


def test_late_action_zero_steps_zeros_while_the_policy_thinks(recorded):
    stepped, calls, _ = recorded(6, {"mode": "simulated", "control_hz": 10, "latency": {"fixed_ms": 250},
                                     "late_action": "zero"})
    assert [stepped[t:t + 3] for t in calls[:3]] == [[(0, 0)] * 3] * 3
    assert stepped[9:12] == [(1, 3), (1, 4), (1, 5)]


def test_an_entirely_stale_chunk_has_only_its_newest_action_applied_once(recorded):
    # L = 3 steps, chunks of 2: every action arrives after its step; the chunk's last one is applied at t + 3.
    stepped, calls, record = recorded(2, {"mode": "simulated", "control_hz": 10, "latency": {"fixed_ms": 300}})
    assert calls == [0, 4, 8, 12, 16]
    assert stepped[:8] == [(0, 0)] * 3 + [(0, 1)] + [(0, 1)] * 3 + [(1, 1)]
    assert record["timing"]["stale_steps"] == 5 and record["timing"]["held_steps"] == 15
    # A single action (A,) is a chunk of one: applied when it arrives, one step in L + 1.
    stepped, calls, _ = recorded(1, {"mode": "simulated", "control_hz": 10, "latency": {"fixed_ms": 300}},
                                 single=True)
    assert calls == [0, 4, 8, 12, 16] and stepped[3] == (0, 0) and stepped[4:8] == [(0, 0)] * 3 + [(1, 0)]


def test_zero_latency_steps_exactly_what_sync_steps(recorded):
    sync, sync_calls, sync_record = recorded(6, {"mode": "sync"})
    simulated, calls, record = recorded(6, {"mode": "simulated", "control_hz": 10, "latency": {"fixed_ms": 0}})
    assert simulated == sync and calls == sync_calls
    assert "timing" not in sync_record and record["timing"]["held_steps"] == 0


def test_latency_steps_round_up_without_float_noise():
    assert [latency_steps(ms, 20) for ms in (0, 1, 49.9, 50, 51, 100)] == [0, 1, 1, 1, 2, 2]
    assert latency_steps(200, 80) == 16


# -- the same records whatever runs them ------------------------------------------------------------------------

LATENCY_RUNS = {
    "fixed": {**metaworld_run("push-v3", episodes=4, policy={"type": "metaworld_expert", "chunk_size": 8},
                              environment={"type": "metaworld", "task": "push-v3", "max_steps": 80}),
              "timing": {"mode": "simulated", "latency": {"fixed_ms": 60}}},
    "sampled": {**metaworld_run("reach-v3", episodes=4, policy={"type": "metaworld_expert", "chunk_size": 8},
                                environment={"type": "metaworld", "task": "reach-v3", "max_steps": 80}),
                "timing": {"mode": "simulated", "latency": {"distribution": "uniform", "low": 0, "high": 150}}},
    "recorded": {**metaworld_run("reach-v3", episodes=4, policy={"type": "metaworld_expert", "chunk_size": 8},
                                 environment={"type": "metaworld", "task": "reach-v3", "max_steps": 80}),
                 "timing": {"mode": "simulated", "latency": {"recorded": "latencies.txt"}}},
    "varied": {**metaworld_run("reach-v3", episodes=4, policy={"type": "metaworld_expert", "chunk_size": 8},
                               environment={"type": "metaworld", "task": "reach-v3", "max_steps": 80}),
               "timing": {"mode": "simulated"},
               "variations": {"policy.latency_ms": {"enabled": True, "distribution": "uniform", "low": 0, "high": 99}}},
}
STABLE = ("seed", "status", "success", "episode_length", "variations", "timing")


def _records(out: Path) -> dict:
    return {(run, ep): {k: r.get(k) for k in STABLE}
            for run in LATENCY_RUNS for ep, r in latest_records(out, run).items()}


def test_simulated_latency_records_do_not_depend_on_num_envs_or_shards(write_experiment, tmp_path):
    path = write_experiment(LATENCY_RUNS)
    (Path(path).parent / "latencies.txt").write_text("12\n80\n200\n35.5\n")
    results = []
    for out, overrides, size in (("a", [], 100), ("b", [f"runs.{r}.environment_builder.num_envs=2"
                                                       for r in LATENCY_RUNS], 3)):
        plan = make_plan(load_experiment(path, overrides), shard_size=size)
        shards = plan.shards if out == "a" else list(reversed(plan.shards))
        run_shards(plan.runs, shards, tmp_path / out)
        results.append(_records(tmp_path / out))
    assert results[0] == results[1] and len(results[0]) == 16
    timings = [r["timing"] for r in results[0].values()]
    assert all(t["mode"] == "simulated" and 0 <= t["stale_ratio"] <= 1 for t in timings)
    sampled = {results[0][("sampled", e)]["timing"]["latency_ms"] for e in range(4)}
    assert len(sampled) == 4 and all(0 <= x <= 150 for x in sampled)  # drawn per episode from its seed
    assert {results[0][("fixed", e)]["timing"]["latency_steps"] for e in range(4)} == {5}  # 60 ms at 80 Hz
    varied = [results[0][("varied", e)] for e in range(4)]
    assert all(r["timing"]["latency_ms"] == r["variations"]["policy.latency_ms"] for r in varied)
    recorded = [results[0][("recorded", e)]["timing"]["latency_ms"] for e in range(4)]
    assert all(12 <= x <= 200 for x in recorded) and len(set(recorded)) > 1  # a mean of recorded ms, per episode


def test_the_chunked_expert_succeeds_without_latency_and_fails_with_a_long_one(write_experiment, tmp_path):
    """Meta-World's chunked expert at 0 and 400 ms (two Runs of one policy): success falls, and `evalfleet
    sensitivity` draws it against the records' timing.latency_ms with intervals."""
    from evalfleet_testkit import run_evalfleet

    def push(ms: int) -> dict:
        return {**metaworld_run("push-v3", episodes=3, environment={"type": "metaworld", "task": "push-v3",
                                                                     "max_steps": 300},
                                policy={"type": "metaworld_expert", "chunk_size": 10}),
                "timing": {"mode": "simulated", "late_action": "zero", "latency": {"fixed_ms": ms}}}

    path = write_experiment({"at0": push(0), "at400": push(400)})
    plan = make_plan(load_experiment(path))
    run_shards(plan.runs, plan.shards, tmp_path / "o")
    success = {run: [r["success"] for r in latest_records(tmp_path / "o", run).values()] for run in plan.runs}
    assert success == {"at0": [True] * 3, "at400": [False] * 3}
    parts = [str(p) for p in sorted((tmp_path / "o").glob("*/parts/*.jsonl"))]
    proc = run_evalfleet("sensitivity", "--episode-results", *parts, "--factors", "timing.latency_ms", "--bins", "2",
                         "-o", str(tmp_path / "s.png"))
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "s.json").read_text()
    assert "timing.latency_ms" in text and '"ci"' in text and (tmp_path / "s.png").stat().st_size > 0


def test_wall_clock_mode_paces_the_env_and_says_its_records_do_not_reproduce(recorded):
    """The policy thinks on its own thread while the env steps: its first answer cannot be there at step 0, so
    the episode starts on the late action (zeros), whatever the machine's speed."""
    stepped, calls, record = recorded(6, {"mode": "wall_clock", "control_hz": 200, "late_action": "zero"})
    timing = record["timing"]
    assert timing["mode"] == "wall_clock" and timing["reproducible"] is False
    assert stepped[0] == (0, 0) and 1 <= timing["held_steps"] <= STEPS == record["episode_length"]
    assert calls and record["status"] in ("success", "failure")
    fresh = [a for a in stepped if a != (0, 0)]
    assert all(0 <= c < len(calls) and 0 <= k < 6 for c, k in fresh)  # only actions of the policy's chunks


# -- checks ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("timing", "key", "words"), [
    ({"mode": "simulated", "latency": {"fixed_ms": -5}}, "runs.r.timing.latency.fixed_ms", "greater than or equal"),
    ({"mode": "simulated", "control_hz": 0, "latency": {"fixed_ms": 5}}, "runs.r.timing.control_hz", "greater than"),
    ({"mode": "realtime"}, "runs.r.timing.mode", "sync"),
    ({"mode": "simulated"}, "runs.r.timing.latency", "needs a latency"),
    ({"mode": "sync", "latency": {"fixed_ms": 5}}, "runs.r.timing", "only in mode: simulated"),
    ({"mode": "simulated", "latency": {"fixed_ms": 5, "recorded": [1.0]}}, "runs.r.timing.latency", "exactly one"),
    ({"mode": "simulated", "latency": {"recorded": "missing.txt"}}, "runs.r.timing.latency.recorded", "cannot read"),
    ({"mode": "simulated", "latency": {"distribution": "uniform", "low": 9}}, "runs.r.timing.latency", "needs low"),
])
def test_bad_timing_is_a_user_error_naming_the_key(write_experiment, timing, key, words):
    path = write_experiment({"r": metaworld_run("reach-v3", timing=timing)})
    with pytest.raises(UserError) as info:
        load_experiment(path)
    assert info.value.key == key and words in info.value.message, (info.value.key, info.value.message)


def test_the_latency_variation_needs_a_simulated_run(write_experiment):
    path = write_experiment({"r": metaworld_run("reach-v3", variations={
        "policy.latency_ms": {"enabled": True, "distribution": "choice", "values": [0, 100]}})})
    with pytest.raises(UserError) as info:
        load_experiment(path)
    assert info.value.key == "runs.r.variations.policy.latency_ms" and "mode: simulated" in info.value.message
