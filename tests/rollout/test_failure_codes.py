"""Every failed or errored episode record carries one failure code (issue #26), each produced here by driving a real
runner's episode into it with the toy environment and policies of tests/plugins/evalfleet_failure_plugins.py; every
record carries its Run's protocol identity, written to <run>/protocol.json; a Run folder of another protocol is
refused on resume."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from evalfleet_testkit import PLUGINS_DIR

if str(PLUGINS_DIR) not in sys.path:
    sys.path.insert(0, str(PLUGINS_DIR))
import evalfleet_failure_plugins  # registers test_faulty and test_zero (the path above first)
from evalfleet.errors import UserError
from evalfleet.execution.output_dir import prepare_output
from evalfleet.experiment.loading import load_experiment
from evalfleet.experiment.plan import make_plan
from evalfleet.rollout.failures import UndeclaredFailureCode, run_protocol
from evalfleet.rollout.runner import run_shards


def _toy(episodes: int = 2, policy: dict | None = None, **env) -> dict:
    return {"environment": {"type": "test_faulty", **env}, "policy": policy or {"type": "test_zero"},
            "rollout_limit": {"num_episodes": episodes}, "max_attempts": 1}


def _records(write_experiment, tmp_path: Path, run: dict, overrides=()) -> tuple[list[dict], list]:
    """Every record line the runner wrote for the Run (parts, in order), and the shards' outcomes."""
    loaded = load_experiment(write_experiment({"r": run}), list(overrides))
    plan = make_plan(loaded, shard_size=100)  # one shard: its env slots play side by side
    outcomes = run_shards(plan.runs, plan.shards, tmp_path / "out")
    lines = [json.loads(line) for part in sorted((tmp_path / "out" / "r" / "parts").glob("*.jsonl"))
             for line in part.read_text().splitlines()]
    return lines, outcomes


def _codes(records: list[dict]) -> list[tuple[str, str | None]]:
    return [(r["status"], r.get("failure_code")) for r in records]


@pytest.mark.parametrize("env, expected", [
    ({"fault": "none", "succeed": True}, [("success", None)] * 2),
    ({"fault": "none"}, [("failure", "step_limit")] * 2),
    ({"fault": "tipped_over"}, [("failure", "tipped_over")] * 2),
    ({"fault": "physics"}, [("error", "physics_error")] * 2),
    ({"fault": "step_raises"}, [("error", "env_error")] * 2),
])
def test_the_environment_decides_the_code(write_experiment, tmp_path, env, expected):
    records, _ = _records(write_experiment, tmp_path, _toy(**env))
    assert _codes(records) == expected
    run = load_experiment(write_experiment({"r": _toy(**env)}), []).experiment.runs["r"]
    identity = run_protocol(run).identity
    assert {r["protocol"] for r in records} == {identity}
    described = json.loads((tmp_path / "out" / "r" / "protocol.json").read_text())
    assert described["identity"] == identity and described["task"] == "test_faulty:toy"
    assert [c["code"] for c in described["failures"]] == ["tipped_over"]


def test_a_code_the_protocol_does_not_declare_is_the_adapters_bug(write_experiment, tmp_path):
    with pytest.raises(UndeclaredFailureCode, match="'fell_in_a_hole'.*task codes: tipped_over, step_limit"):
        _records(write_experiment, tmp_path, _toy(fault="undeclared_code"))


def test_the_policy_and_the_runner_decide_the_code(write_experiment, tmp_path):
    records, _ = _records(write_experiment, tmp_path / "a", _toy(policy={"type": "test_zero", "raise_at": 2}))
    assert _codes(records) == [("error", "policy_error"), ("failure", "step_limit")]
    assert "the policy gave up at call 2" in records[0]["error"]
    # Past its deadline after its first step (a deadline no step can beat): every episode.
    records, _ = _records(write_experiment, tmp_path / "b", {**_toy(), "episode_timeout_s": 1e-9})
    assert _codes(records) == [("error", "episode_timeout")] * 2
    # A video whose frames cannot be drawn: the episode is an error of the recording, not of the env.
    recording = {"video": True, "cameras": ["front"], "every_n_episodes": 1}
    records, _ = _records(write_experiment, tmp_path / "c", {**_toy(fault="render_fails"), "recording": recording})
    assert _codes(records) == [("error", "recording_error")] * 2
    assert "no display" in records[0]["error"]


def test_a_policy_that_does_not_fit_records_its_episode_in_flight_and_stops_the_run(write_experiment, tmp_path):
    records, outcomes = _records(write_experiment, tmp_path, _toy(episodes=3, policy={"type": "test_zero", "size": 3}),
                                 overrides=["runs.r.environment_builder.num_envs=2"])
    # Both episodes in flight say why; the third never starts.
    assert sorted((r["episode"], r["status"], r["failure_code"]) for r in records) == [
        (0, "error", "spec_mismatch"), (1, "error", "spec_mismatch")]
    assert outcomes[0].spec_mismatch and "returned an action of shape (3,)" in outcomes[0].spec_mismatch


def test_resume_refuses_records_of_another_protocol(write_experiment, tmp_path):
    path = write_experiment({"r": _toy(max_steps=4)})
    loaded = load_experiment(path, [])
    out = tmp_path / "out"
    prepare_output(out, loaded, resume=False)
    plan = make_plan(loaded)
    run_shards(plan.runs, plan.shards, out)
    prepare_output(out, loaded, resume=True)  # the same protocol: resumes
    parts = sorted((out / "r" / "parts").glob("*.jsonl"))
    before = {p: p.read_bytes() for p in parts}
    old = run_protocol(loaded.experiment.runs["r"]).identity
    changed = json.loads(parts[0].read_text().splitlines()[0])
    changed["protocol"] = "0" * 64  # a record made when the task's protocol was another one
    parts[0].write_text(parts[0].read_text() + json.dumps(changed) + "\n")
    with pytest.raises(UserError) as raised:
        prepare_output(out, loaded, resume=True)
    message = raised.value.line()
    assert str(parts[0]) in message and ": protocol:" in message and "0" * 64 in message and old in message
    assert "new output folder" in message
    assert [p.read_bytes() for p in parts[1:]] == [before[p] for p in parts[1:]]  # nothing written
    with pytest.raises(UserError, match="protocol"):  # the runner refuses too (a backend that resumes on its own)
        run_shards(plan.runs, plan.shards, out)


def test_a_served_policy_whose_server_is_gone_after_its_reconnects_is_server_lost(write_experiment, tmp_path):
    from evalfleet.policies.base import PolicyContext
    from evalfleet.serving.openpi import OpenpiServer
    from evalfleet.serving.process import ServerThread

    served = evalfleet_failure_plugins.ZeroPolicy({}, PolicyContext(run="r", task="toy", env_type="test_faulty",
                                                                    action_dim=2))
    thread = ServerThread(OpenpiServer(served, host="127.0.0.1", port=0)).start()
    policy = {"type": "openpi_remote", "host": "127.0.0.1", "port": int(thread.port), "connect_timeout_s": 0.3,
              "max_retries": 1, "backoff_s": 0.05}
    loaded = load_experiment(write_experiment({"r": _toy(episodes=3, policy=policy)}), [])
    plan = make_plan(loaded, shard_size=100)
    out = tmp_path / "out"
    try:  # the server goes once the first episode is recorded: the next ones find it gone
        run_shards(plan.runs, plan.shards, out, on_record=lambda record: thread.stop())
    finally:
        thread.stop()
    records = [json.loads(line) for line in next((out / "r" / "parts").glob("*.jsonl")).read_text().splitlines()]
    assert _codes(records) == [("failure", "step_limit"), ("error", "server_lost"), ("error", "server_lost")]
