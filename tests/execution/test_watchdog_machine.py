"""The watchdog's state machine, driven by a fake clock: every decision without processes or sleeping."""

from __future__ import annotations

import pytest

from evalfleet.errors import UserError

from evalfleet.execution.watchdog import (
    Finish,
    Kill,
    Launch,
    Terminate,
    Wait,
    WatchdogConfig,
    WatchdogStateMachine,
    config_problems,
    describe_exit,
    heartbeat_is_current,
)

CFG = WatchdogConfig(
    startup_timeout=10.0, stall_timeout=4.0, max_restarts=3, poll=0.5, term_grace=2.0, backoff=1.0, backoff_max=5.0
)


def hb(steps: int = 0, episodes: int = 0, state: str = "running") -> dict:
    return {"pid": 1, "steps": steps, "episodes": episodes, "time": 0.0, "state": state, "shard": "s", "attempt": 1}


def started(config: WatchdogConfig = CFG, at: float = 0.0) -> WatchdogStateMachine:
    m = WatchdogStateMachine(config)
    assert m.step(at) == Launch(1)
    m.launched(4242)
    return m


def test_first_step_launches_attempt_one_and_records_it():
    m = started(at=100.0)
    assert m.phase == "starting"
    assert m.current.attempt == 1 and m.current.started_at == 100.0 and m.current.pid == 4242


def test_startup_grace_then_never_heartbeat():
    m = started()
    assert m.step(1.0) == Wait(10.0)
    assert m.step(9.99) == Wait(10.0)
    action = m.step(10.0)
    assert isinstance(action, Terminate) and action.outcome == "no_heartbeat"
    assert "never heartbeat" in action.reason
    assert m.current.terminate_at == 10.0 and m.phase == "terminating"


def test_startup_grace_is_longer_than_stall_timeout():
    m = started()
    # well past the stall timeout but inside the startup grace: nothing happens
    assert isinstance(m.step(CFG.stall_timeout + 1.0), Wait)
    assert m.phase == "starting"


def test_only_starting_heartbeats_end_in_startup_timeout():
    m = started()
    assert isinstance(m.step(1.0, heartbeat=hb(state="starting")), Wait)
    assert m.phase == "starting" and m.current.first_heartbeat_at == 1.0
    action = m.step(10.0, heartbeat=hb(state="starting"))
    assert isinstance(action, Terminate) and action.outcome == "startup_timeout"


def test_first_running_heartbeat_ends_startup_and_starts_the_stall_clock():
    m = started()
    m.step(1.0, heartbeat=hb(state="starting"))
    assert m.step(3.0, heartbeat=hb(steps=1)) == Wait(3.0 + CFG.stall_timeout)
    assert m.phase == "running" and m.current.running_at == 3.0


def test_steps_while_starting_count_as_running():
    m = started()
    m.step(2.0, heartbeat=hb(steps=5, state="starting"))
    assert m.phase == "running"


def test_stall_after_progress():
    m = started()
    m.step(1.0, heartbeat=hb(steps=10))
    # the same numbers rewritten (new time) are not progress
    for t in (2.0, 3.0, 4.9):
        assert m.step(t, heartbeat={**hb(steps=10), "time": t}) == Wait(5.0)
    action = m.step(5.0, heartbeat=hb(steps=10))
    assert isinstance(action, Terminate) and action.outcome == "stalled"
    assert "steps=10" in action.reason and m.current.last_progress_at == 1.0


def test_a_runner_waiting_for_shards_is_alive_while_it_rewrites_its_heartbeat():
    """Between shards a runner waits for the driver (execution/shard_feed.py): no steps, but each rewrite of its
    "waiting" heartbeat is a sign of life; once it stops rewriting (a frozen process) it stalls as any other."""
    m = started()
    m.step(1.0, heartbeat=hb(steps=10))
    for t in (2.0, 4.0, 6.0, 8.0, 10.0):  # waiting far past the stall timeout, rewritten every 2 s
        assert m.step(t, heartbeat={**hb(steps=10, state="waiting"), "time": t}) == Wait(t + CFG.stall_timeout)
    assert m.step(13.9, heartbeat={**hb(steps=10, state="waiting"), "time": 10.0}) == Wait(14.0)
    action = m.step(14.0, heartbeat={**hb(steps=10, state="waiting"), "time": 10.0})
    assert isinstance(action, Terminate) and action.outcome == "stalled"


def test_missing_heartbeat_reading_is_not_progress_and_not_a_stall_by_itself():
    m = started()
    m.step(1.0, heartbeat=hb(steps=1))
    assert m.step(2.0, heartbeat=None) == Wait(5.0)
    assert isinstance(m.step(5.0, heartbeat=None), Terminate)


def test_progress_resets_the_stall_timer():
    m = started()
    m.step(1.0, heartbeat=hb(steps=1))
    m.step(4.0, heartbeat=hb(steps=2))  # steps changed
    m.step(7.5, heartbeat=hb(steps=2, episodes=1))  # episodes changed
    assert m.step(11.0, heartbeat=hb(steps=2, episodes=1)) == Wait(11.5)
    m.step(11.2, heartbeat=hb(steps=2, episodes=1, state="done"))  # state changed
    assert m.step(15.1, heartbeat=hb(steps=2, episodes=1, state="done")) == Wait(15.2)
    assert m.phase == "running"


def test_counters_going_down_still_count_as_change():
    m = started()
    m.step(1.0, heartbeat=hb(steps=50))
    m.step(4.0, heartbeat=hb(steps=3))
    assert m.current.last_progress_at == 4.0


@pytest.mark.parametrize("last_progress", [1.0, 1.1, 1.37, 2.49])
def test_stall_is_detected_within_stall_timeout_plus_one_poll(last_progress):
    """A driver polling every `poll` seconds sees Terminate at the first poll at or after the stall deadline."""
    m = started()
    t = 0.0
    terminate_at = None
    while t < 100:
        beat = hb(steps=1 if t >= last_progress else 0, state="running" if t >= last_progress else "starting")
        action = m.step(t, heartbeat=beat)
        if isinstance(action, Terminate):
            terminate_at = t
            break
        t = round(t + CFG.poll, 6)
    seen = m.current.running_at  # first poll that saw the progress
    assert seen is not None and last_progress <= seen < last_progress + CFG.poll
    assert terminate_at is not None
    assert seen + CFG.stall_timeout <= terminate_at < last_progress + CFG.stall_timeout + 2 * CFG.poll
    assert terminate_at < seen + CFG.stall_timeout + CFG.poll


def test_term_then_kill_escalation_and_repeated_kill():
    m = started()
    m.step(1.0, heartbeat=hb(steps=1))
    assert isinstance(m.step(5.0), Terminate)
    assert m.step(5.5) == Wait(7.0)
    assert m.step(6.99) == Wait(7.0)
    assert m.step(7.0) == Kill()
    assert m.current.kill_at == 7.0 and m.phase == "killing"
    assert m.step(8.0) == Wait(9.0)
    assert m.step(9.0) == Kill()  # still not gone: kill again
    assert m.current.kill_at == 7.0
    action = m.step(9.2, exit_code=-9)
    assert isinstance(action, Wait) and m.phase == "backoff"
    rec = m.attempts[0]
    assert rec.outcome == "stalled" and rec.exit_code == -9 and rec.ended_at == 9.2


def test_exit_after_sigterm_keeps_the_stall_reason_and_relaunches():
    m = started()
    m.step(1.0, heartbeat=hb(steps=1))
    m.step(5.0)
    assert m.step(5.1, exit_code=-15) == Wait(6.1)
    assert m.attempts[0].outcome == "stalled" and m.attempts[0].kill_at is None
    assert m.step(6.1) == Launch(2)
    assert m.current.attempt == 2 and m.current.started_at == 6.1 and m.phase == "starting"


def test_exit_zero_after_our_sigterm_is_not_completion():
    m = started()
    m.step(1.0, heartbeat=hb(steps=1))
    m.step(5.0)
    assert isinstance(m.step(5.1, exit_code=0), Wait)
    assert m.phase == "backoff" and m.attempts[0].outcome == "stalled"


def test_clean_exit_is_completed_and_final():
    m = started()
    m.step(1.0, heartbeat=hb(steps=1))
    action = m.step(2.0, exit_code=0)
    assert action == Finish("completed", None)
    assert m.attempts[0].outcome == "completed" and m.restarts == 0
    assert m.step(3.0) == Finish("completed", None)
    assert m.step(4.0, exit_code=1) == Finish("completed", None)


def test_exit_before_any_heartbeat_is_fine_when_zero():
    m = started()
    assert m.step(0.5, exit_code=0) == Finish("completed", None)


@pytest.mark.parametrize(
    "code,outcome,text",
    [(3, "exit_code", "exit code 3"), (-9, "signal", "killed by SIGKILL"), (-11, "signal", "SIGSEGV")],
)
def test_crash_exit_is_recorded_and_relaunched(code, outcome, text):
    m = started()
    m.step(1.0, heartbeat=hb(steps=1))
    action = m.step(2.0, exit_code=code)
    assert action == Wait(3.0)
    assert m.attempts[0].outcome == outcome and text in m.attempts[0].reason
    assert m.step(3.0) == Launch(2)


def test_backoff_grows_exponentially_and_is_capped():
    m = started()
    now = 0.0
    delays = []
    for attempt in range(2, 5):
        action = m.step(now + 1.0, exit_code=1)
        assert isinstance(action, Wait)
        delays.append(action.until - (now + 1.0))
        # not before the backoff is over
        assert isinstance(m.step(action.until - 0.01), Wait)
        assert m.step(action.until) == Launch(attempt)
        now = action.until
    assert delays == [1.0, 2.0, 4.0]
    assert [CFG.backoff_delay(k) for k in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_gives_up_after_max_restarts_with_the_last_reason():
    m = started()
    now = 0.0
    for _ in range(CFG.max_restarts):
        action = m.step(now + CFG.startup_timeout)
        assert isinstance(action, Terminate) and action.outcome == "no_heartbeat"
        action = m.step(now + CFG.startup_timeout + 0.1, exit_code=-15)
        assert isinstance(action, Wait)
        now = action.until
        assert isinstance(m.step(now), Launch)
    assert m.restarts == CFG.max_restarts
    m.step(now + CFG.startup_timeout)
    action = m.step(now + CFG.startup_timeout + 0.1, exit_code=-15)
    assert isinstance(action, Finish) and action.state == "failed"
    assert action.reason.startswith("gave up after 3 restarts: never heartbeat")
    assert len(m.attempts) == CFG.max_restarts + 1
    assert all(a.outcome == "no_heartbeat" for a in m.attempts)
    assert m.step(now + 1000) == action


def test_zero_restarts_gives_up_on_first_failure():
    cfg = WatchdogConfig(startup_timeout=10, stall_timeout=4, max_restarts=0, poll=0.5, term_grace=2, backoff=1)
    m = started(cfg)
    action = m.step(1.0, exit_code=7)
    assert action == Finish("failed", "gave up after 0 restarts: exit code 7")
    assert len(m.attempts) == 1


def test_one_restart_message_is_singular():
    cfg = WatchdogConfig(startup_timeout=10, stall_timeout=4, max_restarts=1, poll=0.5, term_grace=2, backoff=1)
    m = started(cfg)
    until = m.step(1.0, exit_code=7).until
    m.step(until)
    assert m.step(until + 1, exit_code=-9).reason == "gave up after 1 restart: killed by SIGKILL"


def test_stop_while_running_terminates_and_finishes_stopped():
    m = started()
    m.step(1.0, heartbeat=hb(steps=1))
    m.request_stop("stopped by SIGTERM")
    action = m.step(1.5, heartbeat=hb(steps=2))
    assert isinstance(action, Terminate) and action.outcome == "stopped"
    assert m.step(3.5) == Kill()
    assert m.step(3.6, exit_code=-9) == Finish("stopped", "stopped by SIGTERM")
    assert m.restarts == 0 and len(m.attempts) == 1


def test_stop_during_stall_termination_does_not_relaunch():
    m = started()
    m.step(1.0, heartbeat=hb(steps=1))
    assert isinstance(m.step(5.0), Terminate)
    m.request_stop("stopped by SIGINT")
    assert m.step(5.1, exit_code=-15) == Finish("stopped", "stopped by SIGINT")
    assert m.attempts[0].outcome == "stalled"


def test_stop_during_backoff_and_before_launch():
    m = started()
    m.step(1.0, exit_code=1)
    m.request_stop()
    assert m.step(1.1) == Finish("stopped", "stop requested")
    idle = WatchdogStateMachine(CFG)
    idle.request_stop("early")
    assert idle.step(0.0) == Finish("stopped", "early") and idle.attempts == []


def test_first_stop_reason_wins():
    m = started()
    m.request_stop("stopped by SIGTERM")
    m.request_stop("stopped by SIGINT")
    assert m.stop_reason == "stopped by SIGTERM"


def test_launch_failure_is_retried_then_given_up():
    cfg = WatchdogConfig(startup_timeout=10, stall_timeout=4, max_restarts=1, poll=0.5, term_grace=2, backoff=1)
    m = WatchdogStateMachine(cfg)
    assert m.step(0.0) == Launch(1)
    action = m.launch_failed(0.0, "No such file or directory (nope)")
    assert action == Wait(1.0) and m.attempts[0].outcome == "launch_error"
    assert m.step(1.0) == Launch(2)
    action = m.launch_failed(1.0, "No such file or directory (nope)")
    assert isinstance(action, Finish) and action.state == "failed"
    assert "could not start the command" in action.reason


def test_heartbeats_are_ignored_while_terminating():
    m = started()
    m.step(1.0, heartbeat=hb(steps=1))
    m.step(5.0)
    assert m.step(5.5, heartbeat=hb(steps=99)) == Wait(7.0)
    assert m.current.steps == 1


def test_messages_describe_transitions():
    m = started()
    m.step(1.0, heartbeat=hb(steps=1))
    m.step(5.0)
    m.step(7.0)
    m.step(7.1, exit_code=-9)
    text = "\n".join(m.messages)
    assert "stalled" in text and "SIGTERM" in text and "SIGKILL" in text and "relaunching in 1 s" in text


def test_attempt_record_dict_converts_times_to_wall_clock():
    m = started(at=5.0)
    m.step(6.0, heartbeat=hb(steps=1))
    d = m.current.to_dict(lambda t: t + 1000.0)
    assert d["started_at"] == 1005.0 and d["running_at"] == 1006.0 and d["ended_at"] is None
    assert d["attempt"] == 1 and d["pid"] == 4242 and "_last_key" not in d


def test_describe_exit():
    assert describe_exit(2) == ("exit_code", "exit code 2")
    assert describe_exit(-15) == ("signal", "killed by SIGTERM")
    assert describe_exit(-200)[1] == "killed by signal 200"


def test_config_validation():
    # A UserError naming the flag, so `evalfleet run` can build the config before writing anything.
    with pytest.raises(UserError, match="--stall-timeout"):
        WatchdogConfig(stall_timeout=0)
    with pytest.raises(UserError, match="--stall-timeout"):
        WatchdogConfig(stall_timeout=float("nan"))
    with pytest.raises(UserError, match="--startup-timeout"):
        WatchdogConfig(startup_timeout=float("inf"))
    with pytest.raises(UserError, match="--max-restarts"):
        WatchdogConfig(max_restarts=-1)
    with pytest.raises(UserError, match="--term-grace"):
        WatchdogConfig(term_grace=-1)
    assert config_problems(WatchdogConfig()) == []


def test_stale_heartbeat_filter():
    beat = hb(steps=3)
    assert heartbeat_is_current({**beat, "attempt": 2}, 2, 100.0)
    assert not heartbeat_is_current({**beat, "attempt": 1}, 2, 100.0)
    no_attempt = {k: v for k, v in beat.items() if k != "attempt"}
    assert heartbeat_is_current({**no_attempt, "time": 100.5}, 2, 100.0)
    assert not heartbeat_is_current({**no_attempt, "time": 50.0}, 2, 100.0)
    assert not heartbeat_is_current({**beat, "attempt": 0, "time": 50.0}, 2, 100.0)
