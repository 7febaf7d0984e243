"""The watchdog's driver: `Watchdog` runs a command under the `WatchdogStateMachine` with real processes
(a process group per attempt, SIGTERM then SIGKILL, the heartbeat, the status file); `supervise` is its
function form for Python callers and returns a `WatchdogResult`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Sequence, Union

from evalfleet.execution.watchdog.config import WatchdogConfig
from evalfleet.execution.watchdog.heartbeats import files_heartbeat, heartbeat_is_current
from evalfleet.execution.watchdog.machine import Finish, Kill, Launch, Terminate, Wait, WatchdogStateMachine
from evalfleet.rollout.heartbeat import (
    ATTEMPT_ENV,
    HEARTBEAT_ENV,
    SUPERVISOR_ENV,
    read_heartbeat,
    write_json_atomic,
)
from evalfleet.rollout.inflight import RESTART_ENV

EXIT_COMPLETED = 0
EXIT_GAVE_UP = 1


@dataclass
class WatchdogResult:
    state: str  # completed | failed | stopped
    reason: str | None
    restarts: int
    exit_code: int | None  # the last attempt's return code (Popen convention), None if it never ran
    attempts: list[dict[str, Any]]
    signal: int | None = None  # the signal that stopped the watchdog (CLI), if any

    @property
    def watchdog_exit_code(self) -> int:
        if self.state == "completed":
            return EXIT_COMPLETED
        if self.state == "stopped":
            return 128 + (self.signal or signal.SIGTERM)
        return EXIT_GAVE_UP


Output = Union[None, int, IO[Any]]


STOP_LOOK_S = 0.1  # how soon a waiting watchdog sees a stop request


def _wait_for_exit(pid: int, exited: threading.Event) -> None:
    """Block until child `pid` exits, without reaping it (see Watchdog._check_exit), then set `exited`."""
    try:
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    except (ChildProcessError, OSError):
        pass  # already reaped, or not ours: the watchdog's own look decides
    exited.set()


def _has_exited(proc: subprocess.Popen) -> bool:
    """Whether the child has exited, leaving it unreaped."""
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True  # already reaped (by Popen)


class Watchdog:
    """Runs `cmd` under a `WatchdogStateMachine` with real processes. `run()` blocks until done/failed/stopped;
    `stop()` (or setting `stop_event`) from another thread stops the child group and makes `run()` return."""

    def __init__(
        self,
        cmd: Sequence[str],
        heartbeat_path: str | os.PathLike,
        config: WatchdogConfig | None = None,
        *,
        env: dict[str, str] | None = None,
        cwd: str | os.PathLike | None = None,
        stdout: Output = None,
        stderr: Output = None,
        status_file: str | os.PathLike | None = None,
        stop_event: threading.Event | None = None,
        log: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        liveness_files: Sequence[str] = (),
        standby: Any = None,
    ):
        if not cmd:
            raise ValueError("the command to supervise is empty")
        self.cmd = [str(c) for c in cmd]
        self.heartbeat_path = Path(heartbeat_path)
        self.config = config or WatchdogConfig()
        self.env = env
        self.cwd = cwd
        self.stdout = stdout
        self.stderr = stderr
        self.status_file = Path(status_file) if status_file else None
        self.stop_event = stop_event or threading.Event()
        self.log = log or (lambda line: print(f"evalfleet watchdog: {line}", file=sys.stderr, flush=True))
        self.clock = clock
        self.liveness_files = [str(p) for p in liveness_files]  # globs: the heartbeat is made from these files
        # A child already forked to run `cmd` (backends/local/standby.py): the first launch releases it instead of
        # starting a process; later launches start fresh ones.
        self.standby = standby
        self.machine = WatchdogStateMachine(self.config)
        self.stop_signal: int | None = None  # set from a signal handler: plain assignment only
        self._proc: subprocess.Popen | None = None
        self._launched_wall = 0.0
        self._exited = threading.Event()  # set by a thread blocked until the current child exits
        self._wall_offset = time.time() - clock()

    def stop(self) -> None:
        self.stop_event.set()

    # -- the loop

    def run(self) -> WatchdogResult:
        machine = self.machine
        exit_code: int | None = None
        last_phase = None
        try:
            while True:
                if self.stop_signal is not None:
                    machine.request_stop(f"stopped by {signal.Signals(self.stop_signal).name}")
                elif self.stop_event.is_set():
                    machine.request_stop("stop requested")
                now = self.clock()
                beat = None
                if self._proc is not None and exit_code is None:
                    exit_code = self._check_exit(self._proc)
                    if exit_code is None:
                        beat = self._read_heartbeat()
                action = machine.step(now, exit_code, beat)
                if isinstance(action, Launch):
                    exit_code = None
                    error = self._launch(action.attempt)
                    if error is not None:
                        action = machine.launch_failed(self.clock(), error)
                elif isinstance(action, Terminate):
                    self._signal_group(signal.SIGTERM)
                    self._signal_group(signal.SIGCONT)
                elif isinstance(action, Kill):
                    self._signal_group(signal.SIGKILL)
                self._flush_messages()
                if machine.phase != last_phase:
                    last_phase = machine.phase
                    self._write_status()
                if isinstance(action, Finish):
                    break
                if isinstance(action, Wait):
                    timeout = self.config.poll
                    if action.until is not None:
                        timeout = min(timeout, max(action.until - self.clock(), 0.0))
                    if timeout > 0:
                        self._pause(timeout)
        finally:
            if self.standby is not None:  # never launched (stopped first): end it unused
                self.standby.discard()
                self.standby = None
            self._cleanup()
        result = self._result()
        if result.state == "failed":
            self.log(f"{result.reason} ({len(result.attempts)} attempts)")
        elif result.state == "stopped":
            self.log(f"{result.reason}; child process group stopped")
        return result

    def _pause(self, timeout: float) -> None:
        """Wait up to `timeout` for the next look: returns early when the child exits (a finished worker
        is noticed at once, not a poll later) or a stop is requested."""
        if self.stop_event.is_set():
            time.sleep(min(timeout, 0.05))  # stopping: the event no longer blocks
            return
        proc = self._proc
        if proc is None or proc.returncode is not None:
            self.stop_event.wait(timeout)
            return
        deadline = time.monotonic() + timeout
        while not self._exited.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or self.stop_signal is not None or self.stop_event.is_set():
                return
            # Woken at once by the exit; a stop request is seen within STOP_LOOK_S. Not a tighter loop: every
            # wake-up of this process takes a core from a runner for a moment.
            self._exited.wait(min(left, STOP_LOOK_S))

    def _result(self) -> WatchdogResult:
        machine = self.machine
        finish = machine.result or Finish("stopped", machine.stop_reason or "watchdog interrupted")
        last = machine.current
        return WatchdogResult(
            state=finish.state,
            reason=finish.reason,
            restarts=machine.restarts,
            exit_code=last.exit_code if last else None,
            attempts=[a.to_dict(self._to_wall) for a in machine.attempts],
            signal=self.stop_signal,
        )

    def _to_wall(self, t: float) -> float:
        return round(t + self._wall_offset, 6)

    # -- process handling

    def _launch(self, attempt: int) -> str | None:
        self._remove_heartbeat()
        env = dict(os.environ if self.env is None else self.env)
        env[HEARTBEAT_ENV] = str(self.heartbeat_path)
        env[ATTEMPT_ENV] = str(attempt)
        env[SUPERVISOR_ENV] = str(os.getpid())
        env.pop(RESTART_ENV, None)
        ran = [a for a in self.machine.attempts[:-1] if a.pid is not None]
        if ran:  # a relaunch: why the last attempt that ran ended, for the runner to record what it lost
            last = ran[-1]
            code = f":{last.exit_code}" if last.outcome == "exit_code" and last.exit_code is not None else ""
            env[RESTART_ENV] = f"{last.outcome or 'ended'}{code}"  # e.g. stalled, signal, exit_code:75
        self._launched_wall = time.time()
        standby, self.standby = self.standby, None
        if standby is not None:
            try:
                self._proc = standby.release(self.cmd, env, self.cwd)
            except OSError:
                standby = None  # its child is gone: this attempt starts a process as any other
        try:
            if standby is None:
                self._proc = subprocess.Popen(
                    self.cmd,
                    env=env,
                    cwd=self.cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=self.stdout,
                    stderr=self.stderr,
                    start_new_session=True,
                )
        except OSError as exc:
            self._proc = None
            return f"{exc.strerror or exc} ({self.cmd[0]})"
        self._exited = threading.Event()
        threading.Thread(target=_wait_for_exit, args=(self._proc.pid, self._exited), daemon=True,
                         name=f"exit-of-{self._proc.pid}").start()
        self.machine.launched(self._proc.pid)
        how = "forked" if standby is not None else "started"
        self.log(f"attempt {attempt}: {how} pid {self._proc.pid}: {' '.join(self.cmd)}")
        return None

    def _check_exit(self, proc: subprocess.Popen) -> int | None:
        """The leader's return code once it exited (else None). Before reaping it, kill what is left of its group
        (the unreaped leader keeps the group id from being reused)."""
        if not _has_exited(proc):
            return None
        self._signal_group(signal.SIGKILL)
        return proc.wait()

    def _signal_group(self, sig: int) -> None:
        if self._proc is None:
            return
        try:
            os.killpg(self._proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _cleanup(self) -> None:
        """On the way out (also on an exception): make sure the child group is gone."""
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        if self._check_exit(proc) is not None:
            return
        self._signal_group(signal.SIGTERM)
        self._signal_group(signal.SIGCONT)
        deadline = time.monotonic() + self.config.term_grace
        while time.monotonic() < deadline:
            if self._check_exit(proc) is not None:
                return
            time.sleep(min(0.05, self.config.poll))
        self._signal_group(signal.SIGKILL)
        proc.wait()
        self._signal_group(signal.SIGKILL)

    def _read_heartbeat(self) -> dict | None:
        current = self.machine.current
        if self.liveness_files and current is not None:
            beat = files_heartbeat(self.liveness_files, current.attempt)
            write_json_atomic(self.heartbeat_path, beat)  # for whoever looks: what the watchdog judged
            return beat
        beat = read_heartbeat(self.heartbeat_path)
        if beat is None or current is None:
            return None
        if not heartbeat_is_current(beat, current.attempt, self._launched_wall):
            return None
        return beat

    def _remove_heartbeat(self) -> None:
        self.heartbeat_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.heartbeat_path.unlink()
        except FileNotFoundError:
            pass

    # -- reporting

    def _flush_messages(self) -> None:
        while self.machine.messages:
            self.log(self.machine.messages.pop(0))

    def _write_status(self) -> None:
        if self.status_file is None:
            return
        machine = self.machine
        if machine.result is not None:
            state, reason = machine.result.state, machine.result.reason
        else:
            state, reason = "running", None
        last = machine.current
        write_json_atomic(
            self.status_file,
            {
                "state": state,
                "reason": reason,
                "phase": machine.phase,
                "restarts": machine.restarts,
                "max_restarts": self.config.max_restarts,
                "exit_code": last.exit_code if last else None,
                "command": self.cmd,
                "heartbeat": str(self.heartbeat_path),
                "attempts": [a.to_dict(self._to_wall) for a in machine.attempts],
                "time": time.time(),
            },
        )


def supervise(
    cmd: Sequence[str],
    heartbeat_path: str | os.PathLike,
    config: WatchdogConfig | None = None,
    *,
    env: dict[str, str] | None = None,
    stdout: Output = None,
    stderr: Output = None,
    cwd: str | os.PathLike | None = None,
    status_file: str | os.PathLike | None = None,
    stop_event: threading.Event | None = None,
    log: Callable[[str], None] | None = None,
    liveness_files: Sequence[str] = (),
    standby: Any = None,
) -> WatchdogResult:
    """Run `cmd` under the watchdog until it completes, is given up, or `stop_event` is set. Safe to call from a
    thread (no signal handlers are installed). `stdout`/`stderr`: as for Popen (None = inherit). `standby`: a
    child forked to run `cmd` (any object with `release(cmd, env, cwd)` -> a process and `discard()`; the
    local backend's StandbyRunner), released by the first launch."""
    return Watchdog(
        cmd,
        heartbeat_path,
        config,
        env=env,
        cwd=cwd,
        stdout=stdout,
        stderr=stderr,
        status_file=status_file,
        stop_event=stop_event,
        log=log,
        liveness_files=liveness_files,
        standby=standby,
    ).run()


