"""Issue #26's failure taxonomy in experiment_result.json: each Run's failed and errored episodes by code
(the final attempt of each episode, as the rates count them; a record without a code is `unclassified`), the
Run's protocol identity, the roll-up by policy with each code's kind and description, ExperimentResult's view,
the summary's top-codes line, collect's refusal of one Run's records under two protocol identities, and the
codes of Arena's and vla-eval's records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from arena_output import write_arena_run
from outputs_helpers import record, write_jsonl, write_status

from evalfleet.errors import UserError
from evalfleet.outputs.collect import collect
from evalfleet.outputs.result import ExperimentResult
from evalfleet.outputs.summary_table import summary_table_lines
from evalfleet.sim.protocol import FailureCode, TaskProtocol

PUSH = TaskProtocol(task="metaworld:push-v3", success="the puck is within 5 cm of the goal",
                    milestones=("reached", "pushed"),
                    failures=(FailureCode("object_dropped", "the puck left the table"),),
                    parameters={"max_steps": 150})
PROTO = PUSH.identity


def coded(run: str, episode: int, status: str, code: str | None, *, policy: str = "expert", attempt: int = 1,
          protocol: str | None = PROTO, timestamp: float | None = None) -> dict:
    extra = {"attempt": attempt, "policy": policy}
    if code is not None:
        extra["failure_code"] = code
    if protocol is not None:
        extra["protocol"] = protocol
    return record(run, episode, status, timestamp=timestamp, **extra)


def write_run(root: Path, run: str, records: list[dict], *, planned: int, policy: str = "expert",
              protocol: TaskProtocol | None = PUSH) -> Path:
    folder = root / run
    write_jsonl(folder / "parts" / "shard-000.jsonl", records)
    write_status(folder, planned=planned, state="completed", policy=policy)
    if protocol is not None:
        (folder / "protocol.json").write_text(json.dumps(protocol.describe()))
    return folder


def test_rollup_counts_final_attempts_by_code_per_run_and_policy(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_run(out, "push_expert", [
        coded("push_expert", 0, "success", None),
        coded("push_expert", 1, "failure", "step_limit"),
        coded("push_expert", 2, "failure", "object_dropped"),
        coded("push_expert", 3, "failure", "object_dropped"),
        # episode 4: attempt 1 lost its server, attempt 2 (the one the rate counts) dropped the puck
        coded("push_expert", 4, "error", "server_lost", timestamp=1.0),
        coded("push_expert", 4, "failure", "object_dropped", attempt=2, timestamp=2.0),
        coded("push_expert", 5, "error", "policy_error"),
    ], planned=6)
    write_run(out, "push_random", [
        coded("push_random", 0, "failure", "step_limit", policy="random"),
        coded("push_random", 1, "failure", "step_limit", policy="random"),
        record("push_random", 2, "failure", policy="random"),  # an older record: no code, no protocol
    ], planned=3, policy="random")
    write_run(out, "push_random_2", [coded("push_random_2", 0, "failure", "step_limit", policy="random")],
              planned=1, policy="random")

    result = collect([str(out)], str(tmp_path / "collected"))
    expert = result["runs"]["push_expert"]
    assert expert["failures"] == {"object_dropped": 3, "policy_error": 1, "step_limit": 1}
    assert list(expert["failures"]) == ["object_dropped", "policy_error", "step_limit"]  # biggest first
    assert sum(expert["failures"].values()) == expert["counts"]["failure"] + expert["counts"]["error"]
    assert expert["protocol"] == PROTO
    assert result["runs"]["push_random"]["failures"] == {"step_limit": 2, "unclassified": 1}
    assert result["failures_by_policy"] == {
        "expert": {"object_dropped": 3, "policy_error": 1, "step_limit": 1},
        "random": {"step_limit": 3, "unclassified": 1}}
    codes = result["failure_codes"]
    assert codes["object_dropped"] == {"kind": "task", "description": "the puck left the table"}
    assert codes["policy_error"]["kind"] == "fault" and codes["step_limit"]["kind"] == "task"
    assert codes["unclassified"]["kind"] is None and "no failure code" in codes["unclassified"]["description"]
    assert set(codes) == {"object_dropped", "policy_error", "step_limit", "unclassified"}  # only codes counted
    # protocol.json travels with the collected Run, so a second collect still knows the task's codes
    again = collect([str(tmp_path / "collected")], str(tmp_path / "again"))
    assert again["failure_codes"] == codes and again["failures_by_policy"] == result["failures_by_policy"]

    typed = ExperimentResult.from_json("push", tmp_path / "collected", result, report=tmp_path / "index.html")
    assert typed.runs["push_expert"].failures_by_code == expert["failures"]
    assert typed.runs["push_expert"].protocol == PROTO
    assert typed.failures_by_policy == result["failures_by_policy"]
    assert typed.failure_codes["object_dropped"]["description"] == "the puck left the table"

    lines = summary_table_lines(result, 100)
    assert [line for line in lines if "failure codes" in line] == [
        "top failure codes: step_limit 4, object_dropped 3, policy_error 1"]


def test_no_failures_no_codes_and_no_summary_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_run(out, "push_expert", [coded("push_expert", e, "success", None) for e in range(3)], planned=3)
    result = collect([str(out)], str(out), report=True)
    assert result["runs"]["push_expert"]["failures"] == {} and result["failures_by_policy"] == {}
    assert result["failure_codes"] == {}
    assert not [line for line in summary_table_lines(result, 100) if "failure" in line]
    assert 'id="failures"' not in (out / "index.html").read_text()


def test_collect_refuses_one_runs_records_under_two_protocols(tmp_path: Path) -> None:
    changed = TaskProtocol(task=PUSH.task, success=PUSH.success, milestones=PUSH.milestones, failures=PUSH.failures,
                           parameters={"max_steps": 200})
    out = tmp_path / "out"
    folder = write_run(out, "push_expert", [coded("push_expert", 0, "failure", "step_limit")], planned=2)
    write_jsonl(folder / "parts" / "shard-001.jsonl",
                [coded("push_expert", 1, "failure", "step_limit", protocol=changed.identity)])
    dest = tmp_path / "collected"
    with pytest.raises(UserError) as err:
        collect([str(out)], str(dest))
    e = err.value
    assert e.key == "protocol" and e.where == str(folder / "parts" / "shard-001.jsonl")
    assert PROTO in e.message and changed.identity in e.message
    assert str(folder / "parts" / "shard-000.jsonl") in e.message and "fresh output folder" in e.message
    assert not dest.exists()  # nothing partial written
    # another Run's records, or an episode outside the plan, never count: they do not make a mix
    write_jsonl(folder / "parts" / "shard-001.jsonl",
                [coded("other", 1, "failure", "step_limit", protocol=changed.identity),
                 coded("push_expert", 7, "failure", "step_limit", protocol=changed.identity)])
    assert collect([str(out)], str(dest))["runs"]["push_expert"]["protocol"] == PROTO


def test_a_bad_protocol_file_names_itself(tmp_path: Path) -> None:
    out = tmp_path / "out"
    folder = write_run(out, "push_expert", [coded("push_expert", 0, "failure", "step_limit")], planned=1)
    (folder / "protocol.json").write_text("{not json")
    with pytest.raises(UserError) as err:
        collect([str(out)], str(tmp_path / "collected"))
    assert err.value.where == str(folder / "protocol.json") and "rerun the Run" in err.value.message
    assert not (tmp_path / "collected").exists()


def test_arena_records_codes_and_spec_hash(tmp_path: Path) -> None:
    """Arena's lines (episode_results_recorder keys) with its protocol's EvaluationResult fields
    (isaaclab_arena/evaluation/protocol/result.py: outcome, failure_code, failure_stage, spec_hash), nested or
    flat, its autograder's failure_category (episode_record.FailureCategory) and a datagen `timeout` outcome
    (episode_outcome.classify_outcome)."""
    root = tmp_path / "arena"
    folder = write_arena_run(root, "banana", episodes=6, rate=0.0, task="banana_in_bowl", policy="gr00t", seed=1,
                             videos=False)
    spec = "ab" * 32
    path = folder / "episode_results_rebuild0.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    extras = [{"evaluation_result": {"outcome": "failure", "failure_code": "object_dropped",
                                     "failure_stage": "grasp", "spec_hash": spec}},
              {"failure_code": "object_dropped", "spec_hash": spec},
              {"failure_category": "grasp_miss", "spec_hash": spec},
              {"failure_category": "timeout"},
              {"outcome": "timeout"},
              {"failure_category": "unknown"}]
    for line, extra in zip(lines, extras):
        line["success"] = False
        line.update(extra)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    result = collect([str(root)], str(tmp_path / "collected"))
    run = result["runs"]["banana"]
    assert run["failures"] == {"object_dropped": 2, "step_limit": 2, "grasp_miss": 1, "unclassified": 1}
    assert run["protocol"] == spec
    assert result["failure_codes"]["grasp_miss"] == {"kind": None, "description": None}  # declared by no protocol
    assert result["failure_codes"]["step_limit"]["kind"] == "task"


def test_vlaeval_failure_reasons(tmp_path: Path) -> None:
    """vla-eval's episode results (vla_eval.results.collector.EpisodeResult: failure_reason, failure_detail;
    the reasons its orchestrator writes) as evalfleet's codes; an unknown reason is kept as it is."""
    reasons = {"env_start": "env_error", "env_step": "env_error", "model_act": "policy_error",
               "server_unreachable": "server_lost", "connection_closed": "server_lost", "timeout": "server_lost",
               "exception": "exception"}
    recs = [record("libero", i, "error", policy="pi0", failure_reason=reason,
                   failure_detail=f"Traceback (most recent call last): {reason}", metrics={"success": False})
            for i, reason in enumerate(reasons)]
    out = tmp_path / "out"
    write_run(out, "libero", recs, planned=len(recs), policy="pi0", protocol=None)
    result = collect([str(out)], str(out))
    assert result["runs"]["libero"]["failures"] == {"server_lost": 3, "env_error": 2, "exception": 1,
                                                    "policy_error": 1}
    assert result["runs"]["libero"]["protocol"] is None
    assert result["failure_codes"]["server_lost"]["kind"] == "infrastructure"
    assert result["failure_codes"]["exception"] == {"kind": None, "description": None}
    kept = [json.loads(line) for line in (out / "libero" / "episode_results.jsonl").read_text().splitlines()]
    assert kept[0]["failure_detail"].startswith("Traceback")  # the detail stays in the record
