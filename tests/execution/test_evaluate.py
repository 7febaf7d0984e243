"""`evalfleet.evaluate`: an in-process policy served from the calling process, as a training loop calls it."""

from __future__ import annotations

import importlib.util
import json
import os
import threading
import time

import pytest

import evalfleet
from evalfleet_testkit import ROOT

QUICKSTART = str(ROOT / "examples" / "quickstart.yaml")
RUNS = ["push_expert", "pick_place_expert"]
SMALL = ["shared.rollout_limit.num_episodes=3"]


def _example():
    spec = importlib.util.spec_from_file_location("evaluate_during_training",
                                                  ROOT / "examples" / "evaluate_during_training.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _children() -> list[int]:
    """Live child processes of this process."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z":
            found.append(int(entry))
    return found


def _outcomes(result: evalfleet.ExperimentResult) -> dict:
    """Per-episode results, without what depends on the clock."""
    out = {}
    for name in result.runs:
        for line in (result.output / name / "episode_results.jsonl").read_text().splitlines():
            rec = json.loads(line)
            out[(name, rec["episode"])] = (rec["seed"], rec["status"], rec["episode_length"], rec["policy"])
    return out


def _settled(before: set, timeout_s: float = 10.0) -> tuple[list, list]:
    deadline = time.monotonic() + timeout_s
    while True:
        threads = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        children = _children()
        if (not threads and not children) or time.monotonic() > deadline:
            return threads, children
        time.sleep(0.1)


def test_three_calls_like_a_training_loop(tmp_path):
    """The example script's loop: identical calls give identical results, better "weights" score higher,
    and nothing the calls started is left running."""
    example = _example()
    before = set(threading.enumerate())
    results = example.train(steps=3, episodes=3, output_root=tmp_path, workers=2)
    again = evalfleet.evaluate(example.NoisyExpert(1.5 * (1 - 0 / 2)), QUICKSTART, runs=RUNS, workers=2,
                               overrides=SMALL, output=tmp_path / "again", log=lambda line: None)
    threads, children = _settled(before)
    assert not threads, threads
    assert not children, children

    assert _outcomes(again) == _outcomes(results[0])  # the same policy and Experiment: the same episodes
    assert [list(r.runs) for r in results] == [RUNS] * 3
    assert all(r.runs[n].policy == "noisy_expert" for r in results for n in RUNS)
    first, last = (sum(r.runs[n].successes for n in RUNS) for r in (results[0], results[-1]))
    assert last == 6 and first < last  # noise 0 is the expert itself
    assert all(r.ok for r in results)


def test_results_identical_across_worker_counts_and_a_plain_callable(tmp_path):
    example = _example()
    expert = example.NoisyExpert(0.0)

    def act(observation):  # a plain function is a policy too
        return expert.act_batch([observation], [0])[0]

    one = evalfleet.evaluate(expert, QUICKSTART, runs=["push_expert"], workers=1, overrides=SMALL,
                             output=tmp_path / "one", log=lambda line: None)
    expert.reset(0, 0)
    two = evalfleet.evaluate(act, QUICKSTART, runs=["push_expert"], workers=2, overrides=SMALL,
                             output=tmp_path / "two", policy_name="noisy_expert", log=lambda line: None)
    assert _outcomes(one) == _outcomes(two)


def test_a_policy_that_raises_gives_error_records_not_a_crash(tmp_path):
    class Broken:
        def act(self, observation):
            raise RuntimeError("the policy has a bug")

    before = set(threading.enumerate())
    result = evalfleet.evaluate(Broken(), QUICKSTART, runs=["push_expert"], workers=1,
                                overrides=[*SMALL, "runs.push_expert.max_attempts=1"], output=tmp_path / "out",
                                log=lambda line: None)
    run = result.runs["push_expert"]
    assert run.errors == 3 and run.decided == 0 and run.status == "partial" and not result.ok
    records = [json.loads(line) for line in (tmp_path / "out" / "push_expert" / "episode_results.jsonl")
               .read_text().splitlines()]
    assert {r["status"] for r in records} == {"error"} and all(r.get("error") for r in records)
    threads, children = _settled(before)
    assert not threads and not children


def test_something_that_is_not_a_policy_is_a_user_error(tmp_path):
    with pytest.raises(evalfleet.UserError, match="act_batch"):
        evalfleet.evaluate(42, QUICKSTART, output=tmp_path / "out")
    with pytest.raises(evalfleet.UserError, match="no Run named"):
        evalfleet.evaluate(lambda obs: obs, QUICKSTART, runs=["nope"], output=tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.fixture
def hang_guard():
    """A safety net only: a call that hangs ends the test session with every thread's traceback."""
    import faulthandler

    faulthandler.dump_traceback_later(180, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


ONE_SHORT_EPISODE = ["shared.rollout_limit.num_episodes=2", "runs.push_expert.max_attempts=2",
                     "runs.push_expert.episode_timeout_s=1"]


def _error_records(out) -> list[dict]:
    """Every attempt's record (the parts), not only those that count."""
    records = [json.loads(line) for part in sorted((out / "push_expert" / "parts").glob("*.jsonl"))
               for line in part.read_text().splitlines()]
    assert {r["status"] for r in records} == {"error"}, records
    return records


def test_a_blocked_policy_times_out_at_episode_timeout_and_no_thread_is_left(tmp_path, hang_guard):
    """The policy blocks in its first call: that call fails at the Run's episode_timeout_s, every later call
    fails at once (not one deadline per episode), and evaluate() returns with every thread it started
    stopped except the policy's own daemon thread, which ends as soon as the blocked call returns."""
    release, entered = threading.Event(), threading.Event()

    def blocking(observation):
        entered.set()
        release.wait(120)
        return [0.0, 0.0, 0.0, 0.0]

    before = set(threading.enumerate())
    result = evalfleet.evaluate(blocking, QUICKSTART, runs=["push_expert"], workers=1, overrides=ONE_SHORT_EPISODE,
                                output=tmp_path / "out", log=lambda line: None)
    assert entered.is_set()
    run = result.runs["push_expert"]
    assert run.errors == 2 and run.decided == 0 and not result.ok
    records = _error_records(tmp_path / "out")
    assert len(records) == 4  # two episodes, two attempts each
    errors = " ".join(r["error"] for r in records)
    assert "did not return within 1 s" in errors and "still blocked" in errors
    left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert [t.name for t in left] == ["evalfleet-policy"] and left[0].daemon, left  # no server, no policy_0
    release.set()
    threads, children = _settled(before, timeout_s=60)
    assert not threads and not children


def test_sys_exit_in_the_policy_is_an_error_of_the_policy_at_once(tmp_path, hang_guard):
    import sys

    def exits(observation):
        sys.exit(3)

    before = set(threading.enumerate())
    result = evalfleet.evaluate(exits, QUICKSTART, runs=["push_expert"], workers=1, output=tmp_path / "out",
                                overrides=["shared.rollout_limit.num_episodes=2", "runs.push_expert.max_attempts=1"],
                                log=lambda line: None)
    assert result.runs["push_expert"].errors == 2 and not result.ok
    assert all("raised SystemExit: 3" in r["error"] for r in _error_records(tmp_path / "out"))
    left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert not left, left  # joined before evaluate() returned, not later
    assert not _children()
