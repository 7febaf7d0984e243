"""A runner stops when its supervisor is gone (execution/worker.py `_stop_when_orphaned`): also one started, or
released, after the supervisor died, whose parent is already init or a subreaper — `evalfleet run` killed between a
standby's release and the runner's first look at its parent once left such a runner running to the end."""

from __future__ import annotations

import os
import subprocess
import threading

from evalfleet.execution import worker


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()  # exited and reaped: nothing has this pid now
    return proc.pid


def _watch(monkeypatch, supervisor: str | None) -> threading.Event:
    if supervisor is None:
        monkeypatch.delenv("EVALFLEET_SUPERVISOR_PID", raising=False)
    else:
        monkeypatch.setenv("EVALFLEET_SUPERVISOR_PID", supervisor)
    stop = threading.Event()
    worker._stop_when_orphaned(stop)
    return stop


def test_a_runner_whose_named_supervisor_is_already_gone_stops(monkeypatch):
    stop = _watch(monkeypatch, str(_dead_pid()))
    assert stop.wait(30), "the runner went on without its supervisor"


def test_a_runner_whose_supervisor_lives_goes_on(monkeypatch):
    # Its parent, as under the watchdog; or another live process, as under a wrapper between them.
    for supervisor in (str(os.getppid()), str(os.getpid())):
        stop = _watch(monkeypatch, supervisor)
        # Two of its looks (every 0.5 s): a correct check never fires here, however fast or slow the machine.
        assert not stop.wait(1.1), supervisor
        stop.set()  # ends its thread


def test_only_a_plain_positive_pid_names_a_supervisor(monkeypatch):
    for value, pid in (("4242", 4242), ("", None), ("not a pid", None), ("0", None), ("-5", None), ("9" * 30, None)):
        monkeypatch.setenv("EVALFLEET_SUPERVISOR_PID", value)
        assert worker._supervisor_pid() == pid, value
