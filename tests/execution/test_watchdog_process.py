"""The watchdog with real processes and real signals: tests/execution/fake_runner.py is the supervised child.

No wall-clock assertions: the tests check outcomes, recorded reasons, the order of recorded events and the runner's
log. Waits have generous limits that only guard against a hang.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from evalfleet.execution.watchdog import EXIT_GAVE_UP, WatchdogConfig, supervise
from evalfleet.cli.watchdog import add_watchdog_parser, command_from_args, main, watchdog_command

FAKE_RUNNER = Path(__file__).with_name("fake_runner.py")
GUARD_S = 60.0  # only a hang guard, never an expectation


def runner_cmd(log: Path, *extra: str, episodes: int = 6) -> list[str]:
    return [sys.executable, str(FAKE_RUNNER), "--episodes", str(episodes), "--log", str(log), *extra]


def read_log(log: Path) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def wait_for(predicate, what: str, guard: float = GUARD_S) -> None:
    end = time.monotonic() + guard
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.02)
    pytest.fail(f"gave up waiting for {what}")


def gone(pid: int, within_s: float = 5.0) -> bool:
    """No such process, or only a zombie left (dead, waiting for its reaper), within a short while: a
    SIGKILL sent to a group is delivered asynchronously."""
    deadline = time.monotonic() + within_s
    while not _gone_now(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _gone_now(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def start_cli(tmp_path: Path, *flags: str, cmd: list[str]) -> tuple[subprocess.Popen, Path, Path]:
    out, err = tmp_path / "watchdog.out", tmp_path / "watchdog.err"
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen(
            [sys.executable, "-m", "evalfleet.execution.watchdog", *flags, "--", *cmd], stdout=fo, stderr=fe
        )
    return proc, out, err


def in_thread(fn):
    box: list = []
    thread = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    thread.start()
    return thread, box


FAST = dict(startup_timeout=30.0, stall_timeout=10.0, max_restarts=2, poll=0.1, term_grace=1.0, backoff=0.05)


def test_sigkill_of_the_group_mid_run_relaunches_and_resumes(tmp_path):
    """(a) SIGKILL to the runner's whole group mid-shard: relaunched, the log ends with exactly 0..N-1."""
    log, marker = tmp_path / "log.jsonl", tmp_path / "marker.json"
    cmd = runner_cmd(log, "--fault-at", "3", "--spin", "--marker", str(marker))
    lines: list[str] = []
    thread, box = in_thread(
        lambda: supervise(cmd, tmp_path / "hb.json", WatchdogConfig(**FAST), status_file=tmp_path / "status.json",
                          log=lines.append)
    )
    wait_for(marker.exists, "the runner to reach episode 3")
    pid = json.loads(marker.read_text())["pid"]
    assert os.getpgid(pid) == pid  # the child leads its own process group
    os.killpg(pid, signal.SIGKILL)
    thread.join(GUARD_S)
    result = box[0]

    assert result.state == "completed" and result.restarts == 1 and result.exit_code == 0
    first, second = result.attempts
    assert first["pid"] == pid and first["outcome"] == "signal" and first["reason"] == "killed by SIGKILL"
    assert second["outcome"] == "completed"
    episodes = read_log(log)
    assert [e["episode"] for e in episodes] == list(range(6))  # none lost, none twice
    assert [e["attempt"] for e in episodes] == [1, 1, 1, 2, 2, 2]  # attempt 1's episodes kept
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["state"] == "completed" and status["restarts"] == 1 and len(status["attempts"]) == 2
    assert any("killed by SIGKILL" in line for line in lines)

    # identical to a clean run of the same shard
    clean_log = tmp_path / "clean.jsonl"
    clean = supervise(runner_cmd(clean_log), tmp_path / "hb2.json", WatchdogConfig(**FAST), log=lambda _: None)
    assert clean.state == "completed" and clean.restarts == 0
    assert [e["episode"] for e in read_log(clean_log)] == [e["episode"] for e in episodes]


@pytest.mark.parametrize("crash,outcome,reason", [("exit", "exit_code", "exit code 3"),
                                                  ("sigkill", "signal", "killed by SIGKILL")])
def test_a_crashing_runner_is_relaunched(tmp_path, crash, outcome, reason):
    log = tmp_path / "log.jsonl"
    result = supervise(runner_cmd(log, "--fault-at", "2", "--crash", crash), tmp_path / "hb.json",
                       WatchdogConfig(**FAST), log=lambda _: None)
    assert result.state == "completed" and result.restarts == 1
    assert result.attempts[0]["outcome"] == outcome and result.attempts[0]["reason"] == reason
    assert [e["episode"] for e in read_log(log)] == list(range(6))


def test_sigstop_hang_is_detected_as_stalled_and_restarted(tmp_path):
    """(b) SIGSTOP of the runner: the watchdog sees no progress, stops the group, relaunches, completes."""
    log, marker, status_file = tmp_path / "log.jsonl", tmp_path / "marker.json", tmp_path / "status.json"
    # Healthy episodes take no time (--step-delay 0) and the spin beats on until the SIGSTOP: only the stop is a
    # stall, however slow a step is on this machine.
    cmd = runner_cmd(log, "--fault-at", "2", "--spin", "--marker", str(marker), "--step-delay", "0", episodes=5)
    proc, out, err = start_cli(
        tmp_path, "--startup-timeout", "30", "--stall-timeout", "2", "--poll", "0.1", "--term-grace", "2",
        "--backoff", "0.05", "--status-file", str(status_file), cmd=cmd,
    )
    wait_for(marker.exists, "the runner to reach episode 2")
    pid = json.loads(marker.read_text())["pid"]
    stopped_at = time.time()
    os.kill(pid, signal.SIGSTOP)
    assert proc.wait(GUARD_S) == 0, err.read_text()

    status = json.loads(status_file.read_text())
    assert status["state"] == "completed" and status["restarts"] == 1
    first, second = status["attempts"]
    assert first["pid"] == pid and first["outcome"] == "stalled" and first["reason"].startswith("stalled")
    # order of events: progress seen, then the stop, then detection, then the end, then the relaunch
    assert first["started_at"] <= first["running_at"] <= first["last_progress_at"] < first["terminate_at"]
    assert stopped_at < first["terminate_at"] <= first["ended_at"] <= second["started_at"]
    assert first["exit_code"] == -signal.SIGTERM  # SIGCONT after SIGTERM let the stopped process die of it
    assert second["outcome"] == "completed"
    assert [e["episode"] for e in read_log(log)] == list(range(5))
    assert [e["attempt"] for e in read_log(log)] == [1, 1, 2, 2, 2]
    assert "stalled: no progress" in err.read_text()
    assert gone(pid)


def test_a_runner_ignoring_sigterm_is_killed_after_the_grace(tmp_path):
    log = tmp_path / "log.jsonl"
    cfg = WatchdogConfig(**{**FAST, "stall_timeout": 1.0, "term_grace": 0.3})
    # The stall is real (the runner sleeps for good at episode 1); healthy episodes take no time (--step-delay 0).
    cmd = runner_cmd(log, "--fault-at", "1", "--hang", "sleep", "--ignore-term", "--step-delay", "0")
    result = supervise(cmd, tmp_path / "hb.json", cfg, log=lambda _: None)
    assert result.state == "completed" and result.restarts == 1
    first = result.attempts[0]
    assert first["outcome"] == "stalled" and first["exit_code"] == -signal.SIGKILL
    assert first["terminate_at"] < first["kill_at"] <= first["ended_at"]
    assert [e["episode"] for e in read_log(log)] == list(range(6))


def test_a_runner_that_never_heartbeats_is_given_up(tmp_path):
    """(c) No heartbeat ever (a stale file from an earlier run is there): given up after the restarts, exit 1."""
    log, hb, status_file = tmp_path / "log.jsonl", tmp_path / "hb.json", tmp_path / "status.json"
    hb.write_text(json.dumps({"pid": 1, "steps": 50, "episodes": 2, "time": time.time() - 3600,
                              "state": "running", "shard": "s"}))
    cmd = runner_cmd(log, "--no-heartbeat", "--fault-at", "0", "--hang", "sleep", "--fault-attempts", "all")
    proc, out, err = start_cli(
        tmp_path, "--startup-timeout", "0.5", "--stall-timeout", "0.2", "--max-restarts", "2", "--poll", "0.1",
        "--term-grace", "0.5", "--backoff", "0.05", "--heartbeat", str(hb), "--status-file", str(status_file),
        cmd=cmd,
    )
    assert proc.wait(GUARD_S) == EXIT_GAVE_UP

    give_up = [line for line in err.read_text().splitlines() if "gave up" in line]
    assert len(give_up) == 1
    assert give_up[0].startswith("evalfleet watchdog: gave up after 2 restarts: never heartbeat")
    assert "(3 attempts)" in give_up[0]
    status = json.loads(status_file.read_text())
    assert status["state"] == "failed" and status["restarts"] == 2
    assert status["reason"].startswith("gave up after 2 restarts: never heartbeat")
    assert [a["outcome"] for a in status["attempts"]] == ["no_heartbeat"] * 3
    assert all(a["first_heartbeat_at"] is None for a in status["attempts"])
    assert all(gone(a["pid"]) for a in status["attempts"])
    assert read_log(log) == []


@pytest.mark.parametrize("sig,code,runner_flags", [(signal.SIGTERM, 143, ["--ignore-term"]), (signal.SIGINT, 130, [])])
def test_signal_to_the_watchdog_stops_the_child_group(tmp_path, sig, code, runner_flags):
    """(d) SIGTERM/SIGINT to the watchdog: runner and grandchild are gone, documented exit code."""
    log, marker, status_file = tmp_path / "log.jsonl", tmp_path / "marker.json", tmp_path / "status.json"
    cmd = runner_cmd(log, "--fault-at", "1", "--spin", "--grandchild", "--marker", str(marker), *runner_flags)
    proc, out, err = start_cli(
        tmp_path, "--startup-timeout", "30", "--stall-timeout", "10", "--poll", "0.1", "--term-grace", "0.5",
        "--status-file", str(status_file), cmd=cmd,
    )
    wait_for(marker.exists, "the runner to start its grandchild")
    info = json.loads(marker.read_text())
    assert not gone(info["pid"], within_s=0) and not gone(info["grandchild"], within_s=0)
    proc.send_signal(sig)
    assert proc.wait(GUARD_S) == code, err.read_text()

    wait_for(lambda: gone(info["pid"]) and gone(info["grandchild"]), "the child group to be gone", guard=5)
    status = json.loads(status_file.read_text())
    assert status["state"] == "stopped" and status["reason"] == f"stopped by {signal.Signals(sig).name}"
    assert status["restarts"] == 0 and status["attempts"][0]["outcome"] == "stopped"
    if runner_flags:  # the runner ignored SIGTERM: it took a SIGKILL
        assert status["attempts"][0]["kill_at"] is not None
        assert status["attempts"][0]["exit_code"] == -signal.SIGKILL
    assert [e["episode"] for e in read_log(log)] == [0]  # the finished episode stays


def test_stop_event_stops_a_supervised_runner(tmp_path):
    """The local backend's Ctrl-C path: supervise() in a thread, stopped through its Event."""
    log, marker = tmp_path / "log.jsonl", tmp_path / "marker.json"
    stop = threading.Event()
    cmd = runner_cmd(log, "--fault-at", "1", "--spin", "--grandchild", "--marker", str(marker))
    thread, box = in_thread(
        lambda: supervise(cmd, tmp_path / "hb.json", WatchdogConfig(**FAST), stop_event=stop, log=lambda _: None)
    )
    wait_for(marker.exists, "the runner to start")
    info = json.loads(marker.read_text())
    stop.set()
    thread.join(GUARD_S)
    result = box[0]
    assert result.state == "stopped" and result.reason == "stop requested" and result.watchdog_exit_code == 143
    assert gone(info["pid"]) and gone(info["grandchild"])


def test_a_runner_that_finishes_is_noticed_without_waiting_for_the_next_poll(tmp_path):
    """The watchdog wakes when its child exits: with a poll (and every deadline) far longer than the hang
    guard, a runner that completes still ends supervise() well inside the guard."""
    log = tmp_path / "log.jsonl"
    slow_looks = dict(FAST, poll=10 * GUARD_S, startup_timeout=10 * GUARD_S, stall_timeout=10 * GUARD_S)
    thread, box = in_thread(
        lambda: supervise(runner_cmd(log, episodes=2), tmp_path / "hb.json", WatchdogConfig(**slow_looks),
                          log=lambda _: None)
    )
    thread.join(GUARD_S)
    assert not thread.is_alive(), "the watchdog slept through its child's exit"
    assert box[0].state == "completed" and box[0].restarts == 0
    assert sorted(r["episode"] for r in read_log(log)) == [0, 1]


def test_cli_forwards_output_and_passes_heartbeat_and_attempt(tmp_path):
    script = (
        "import os, sys; print('out', os.environ['EVALFLEET_ATTEMPT'], os.environ['EVALFLEET_HEARTBEAT']);"
        "print('err line', file=sys.stderr)"
    )
    proc, out, err = start_cli(tmp_path, "--poll", "0.1", cmd=[sys.executable, "-c", script])
    assert proc.wait(GUARD_S) == 0
    words = out.read_text().split()
    assert words[:2] == ["out", "1"] and words[2].endswith("heartbeat.json")
    assert not Path(words[2]).parent.exists()  # the temporary heartbeat folder is cleaned up
    assert "err line" in err.read_text()


def test_a_command_that_cannot_start_is_given_up(tmp_path):
    missing = tmp_path / "not-there"
    result = supervise([str(missing)], tmp_path / "hb.json", WatchdogConfig(**{**FAST, "max_restarts": 1}),
                       log=lambda _: None)
    assert result.state == "failed" and result.exit_code is None
    assert [a["outcome"] for a in result.attempts] == ["launch_error", "launch_error"]
    assert "could not start the command" in result.reason


@pytest.mark.parametrize(
    "argv,message",
    [
        ([], "give the command to supervise after --"),
        (["--"], "give the command to supervise after --"),
        (["--stall-timeout", "0", "--", "true"], "--stall-timeout: must be a positive number"),
        (["--max-restarts", "-1", "--", "true"], "--max-restarts: must be a whole number"),
        (["--term-grace", "-2", "--", "true"], "--term-grace"),
        (["--", "definitely-not-a-command-xyz"], "command not found"),
    ],
)
def test_bad_usage_exits_2_with_one_line(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("evalfleet: error: command line") and message in err[0]


def test_bad_flag_type_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--poll", "soon", "--", "true"])
    assert exc.value.code == 2


def test_add_watchdog_parser_registers_the_subcommand(tmp_path):
    parser = argparse.ArgumentParser(prog="evalfleet")
    sub = parser.add_subparsers(dest="command")
    add_watchdog_parser(sub)
    args = parser.parse_args(
        ["watchdog", "--stall-timeout", "2", "--poll", "0.1", "--",
         sys.executable, "-c", "pass", "--stall-timeout", "9"]
    )
    assert args.handler is watchdog_command and args.stall_timeout == 2.0
    assert command_from_args(args) == [sys.executable, "-c", "pass", "--stall-timeout", "9"]
    before = signal.getsignal(signal.SIGTERM)
    assert args.handler(args) == 0
    assert signal.getsignal(signal.SIGTERM) is before  # handlers restored


def test_the_rollout_runners_heartbeat_writer_is_understood(tmp_path):
    """The runner's way of beating (running totals through `advance`) is seen as progress, and when it stops
    making progress the attempt is `stalled`, not `no_heartbeat`."""
    script = (
        "import os, time\n"
        "from evalfleet.rollout.heartbeat import HeartbeatWriter\n"
        "hb = HeartbeatWriter(os.environ['EVALFLEET_HEARTBEAT'], 'run/0', min_interval=0.05)\n"
        "hb.beat(state='starting')\n"
        "hb.advance(steps=1)\n"  # written with the state change below: 'running' is first seen with steps > 0
        "hb.beat(state='running')\n"
        "for _ in range(20):\n"
        "    hb.advance(steps=1); time.sleep(0.02)\n"
        "hb.advance(episodes=1)\n"
        "time.sleep(3600)\n"
    )
    cfg = WatchdogConfig(startup_timeout=30, stall_timeout=1.0, max_restarts=0, poll=0.1, term_grace=1, backoff=0)
    result = supervise([sys.executable, "-c", script], tmp_path / "hb.json", cfg, log=lambda _: None)
    assert result.state == "failed"
    attempt = result.attempts[0]
    assert attempt["outcome"] == "stalled" and attempt["running_at"] is not None and attempt["steps"] > 0
