"""The watchdog: supervise a runner process, restart it when it stalls or dies, stop it cleanly.

    evalfleet watchdog [--startup-timeout S] [--stall-timeout S] [--max-restarts N] [--heartbeat FILE]
                       [--poll S] [--term-grace S] [--backoff S] [--backoff-max S] [--status-file FILE]
                       [--liveness-from-files GLOB ...] -- CMD ...

CMD runs in its own process group (a new session) with its output going where the watchdog's goes. It learns the
heartbeat path from the environment variable EVALFLEET_HEARTBEAT and its attempt number (1, 2, ...) from
EVALFLEET_ATTEMPT; it reports progress there with `evalfleet.rollout.heartbeat.HeartbeatWriter`.

Liveness is progress, not output:
  * startup: from launch until the first heartbeat of this attempt whose state is not "starting" or whose steps or
    episodes are above 0. Longer than --startup-timeout → the attempt is stopped ("no_heartbeat" when nothing was
    read at all, "startup_timeout" when only "starting" heartbeats came).
  * running: progress is any change of (steps, episodes, state) between two heartbeat readings. No change for
    --stall-timeout (on the watchdog's own clock, from when it saw the last change) → "stalled". A heartbeat
    rewritten with the same numbers is not progress; bytes of output are not progress.
  A heartbeat file left by an earlier attempt is deleted before each launch and ignored if it reappears (its
  "attempt" differs, or, without one, it was written before the launch).

A stopped attempt gets SIGTERM (and SIGCONT, so a SIGSTOPped process can act on it) to its whole group, then
SIGKILL after --term-grace. When the group leader exits, any process left in its group is killed. A child that
stalled, never started, exited non-zero or died from a signal is relaunched with the same command (the runner
resumes from its log: completed episodes are kept, nothing is wiped) after a backoff of --backoff seconds,
doubling per restart up to --backoff-max, at most --max-restarts times. Exit 0 of the child means done.

Exit codes:
  0    the child completed (exited 0)
  1    gave up: the last allowed attempt stalled / never heartbeat / exited non-zero / was killed
  2    bad usage (a one-line message names the flag)
  130  stopped by SIGINT (the child group was stopped: SIGTERM, then SIGKILL after --term-grace)
  143  stopped by SIGTERM (same)

--status-file FILE gets, atomically, {"state": "running|completed|failed|stopped", "reason", "restarts",
"attempts": [...]} whenever the state changes (see docs/watchdog.md for the attempt fields).

--liveness-from-files GLOB (repeatable) is for a child that writes no heartbeat, such as Isaac Lab Arena's own
runner: the watchdog makes the heartbeat itself from the files matching the globs (records, videos, logs), with
steps = their total size and episodes = how many are not empty, state "running" once any byte exists. Here growth
of output IS progress. "{attempt}" in a glob is this attempt's number (Python format: "{attempt:03d}"), so files
of earlier attempts never count.

From Python (e.g. a local backend running shards in threads): `supervise(cmd, heartbeat_path, config, ...)`
returns a `WatchdogResult`; set the `stop_event` you passed to stop everything.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Sequence, Union

from evalfleet.errors import UserError
from evalfleet.rollout.heartbeat import (
    ATTEMPT_ENV,
    HEARTBEAT_ENV,
    read_heartbeat,
    write_json_atomic,
)

EXIT_COMPLETED = 0
EXIT_GAVE_UP = 1
EXIT_USAGE = 2

# Without an "attempt" field, a heartbeat written this long before the launch is taken as left over.
STALE_HEARTBEAT_SLACK_S = 1.0


# --------------------------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class WatchdogConfig:
    """Timeouts in seconds. `max_restarts` relaunches at most (so at most max_restarts + 1 attempts)."""

    startup_timeout: float = 600.0
    stall_timeout: float = 180.0
    max_restarts: int = 3
    poll: float = 1.0
    term_grace: float = 10.0
    backoff: float = 5.0
    backoff_max: float = 300.0
    backoff_factor: float = 2.0

    def __post_init__(self) -> None:
        # Checked here so every caller (the CLI, `evalfleet run`, a Ray task) refuses a bad value before
        # anything is written, with the flag the user typed.
        for name, problem in config_problems(self):
            raise UserError(problem, where="command line", key=_FLAGS.get(name, name))

    @classmethod
    def local(cls, **changes: Any) -> "WatchdogConfig":
        """The preset for runners evalfleet starts and watches itself (the local and Ray backends): their Python
        starts in seconds, so the startup grace is shorter and polling and restarts quicker than a cluster
        task's defaults above."""
        return dataclasses.replace(cls(startup_timeout=300.0, poll=0.5, term_grace=5.0, backoff=1.0,
                                       backoff_max=30.0), **changes)

    def backoff_delay(self, restart: int) -> float:
        """Seconds to wait before relaunch number `restart` (1-based)."""
        try:
            return min(self.backoff * self.backoff_factor ** max(restart - 1, 0), self.backoff_max)
        except OverflowError:  # factor ** restart beyond a float: long past backoff_max
            return self.backoff_max


MAX_WATCHDOG_SECONDS = 30 * 24 * 3600.0  # far beyond any timeout, far below threading.TIMEOUT_MAX
MAX_RESTARTS = 10_000


def config_problems(cfg: Any) -> list[tuple[str, str]]:
    """(field, problem) for every bad value in anything shaped like a WatchdogConfig: every number finite,
    of the right kind, within bounds (NaN compares false to everything, so each test is written to fail on it)."""
    out = []

    def seconds(name: str, *, zero_ok: bool) -> None:
        value = getattr(cfg, name)
        kind = "zero or more" if zero_ok else "a positive number of"
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            (0 <= value if zero_ok else 0 < value) and value <= MAX_WATCHDOG_SECONDS
        ):
            out.append((name, f"must be {kind} seconds, at most {MAX_WATCHDOG_SECONDS:.0f} (30 days), got {value!r}"))

    for name in ("startup_timeout", "stall_timeout", "poll"):
        seconds(name, zero_ok=False)
    for name in ("term_grace", "backoff", "backoff_max"):
        seconds(name, zero_ok=True)
    restarts = cfg.max_restarts
    if isinstance(restarts, bool) or not isinstance(restarts, int) or not 0 <= restarts <= MAX_RESTARTS:
        out.append(("max_restarts", f"must be a whole number from 0 to {MAX_RESTARTS}, got {restarts!r}"))
    factor = cfg.backoff_factor
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 1 <= factor <= 100:
        out.append(("backoff_factor", f"must be a number from 1 to 100, got {factor!r}"))
    return out


# ---------------------------------------------------------------------------------------------- the machine


@dataclass(frozen=True)
class Launch:
    attempt: int


@dataclass(frozen=True)
class Terminate:
    """Send SIGTERM (then SIGCONT) to the child's group."""

    outcome: str
    reason: str


@dataclass(frozen=True)
class Kill:
    """Send SIGKILL to the child's group."""


@dataclass(frozen=True)
class Wait:
    """Nothing to do before `until` (machine clock); come back no later than that, or sooner to poll."""

    until: float | None = None


@dataclass(frozen=True)
class Finish:
    state: str  # completed | failed | stopped
    reason: str | None


Action = Union[Launch, Terminate, Kill, Wait, Finish]


@dataclass
class AttemptRecord:
    """One launch of the command. Times are on the machine's clock (the driver converts them to wall time)."""

    attempt: int
    started_at: float
    pid: int | None = None
    first_heartbeat_at: float | None = None
    running_at: float | None = None
    last_progress_at: float | None = None
    steps: int = 0
    episodes: int = 0
    terminate_at: float | None = None
    kill_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    # completed | stalled | no_heartbeat | startup_timeout | exit_code | signal | launch_error | stopped
    outcome: str | None = None
    reason: str | None = None
    _last_key: tuple | None = field(default=None, repr=False)

    def to_dict(self, to_wall: Callable[[float], float] = lambda t: t) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name.startswith("_"):
                continue
            value = getattr(self, f.name)
            if f.name.endswith("_at") and value is not None:
                value = to_wall(value)
            out[f.name] = value
        return out


def describe_exit(code: int) -> tuple[str, str]:
    """(outcome, reason) for a Popen-style return code (negative = killed by that signal)."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return "signal", f"killed by {name}"
    return "exit_code", f"exit code {code}"


class WatchdogStateMachine:
    """The watchdog's decisions, with no processes, files or clocks of its own.

    Call `step(now, exit_code, heartbeat)` repeatedly: `exit_code` is None while the child runs (Popen
    convention otherwise), `heartbeat` is the latest reading of this attempt's heartbeat (or None). It returns
    one `Action` for the driver to carry out. `request_stop()` asks for a clean stop; `launch_failed()` reports
    that a Launch could not start the command. Human-readable lines about transitions collect in `messages`.
    """

    def __init__(self, config: WatchdogConfig):
        self.config = config
        self.phase = "idle"  # idle|starting|running|terminating|killing|backoff|completed|failed|stopped
        self.restarts = 0
        self.attempts: list[AttemptRecord] = []
        self.next_launch_at: float | None = None
        self.stop_reason: str | None = None
        self.result: Finish | None = None
        self.messages: list[str] = []
        self._last_kill_at: float | None = None

    # -- inputs

    @property
    def current(self) -> AttemptRecord | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def finished(self) -> bool:
        return self.result is not None

    def request_stop(self, reason: str = "stop requested") -> None:
        if self.stop_reason is None:
            self.stop_reason = reason

    def launched(self, pid: int) -> None:
        if self.current is not None:
            self.current.pid = pid

    def launch_failed(self, now: float, error: str) -> Action:
        rec = self._require_attempt()
        rec.ended_at = now
        rec.outcome, rec.reason = "launch_error", f"could not start the command: {error}"
        self.messages.append(f"attempt {rec.attempt}: {rec.reason}")
        return self._restart_or_give_up(now)

    def step(self, now: float, exit_code: int | None = None, heartbeat: dict | None = None) -> Action:
        if self.result is not None:
            return self.result
        if self.phase == "idle":
            if self.stop_reason is not None:
                return self._finish("stopped", self.stop_reason)
            return self._launch(now)
        if self.phase == "backoff":
            if self.stop_reason is not None:
                return self._finish("stopped", self.stop_reason)
            assert self.next_launch_at is not None
            if now >= self.next_launch_at:
                return self._launch(now)
            return Wait(self.next_launch_at)

        rec = self._require_attempt()
        if exit_code is not None:
            return self._child_exited(now, rec, exit_code)

        if self.phase in ("starting", "running"):
            if heartbeat is not None:
                self._observe(now, rec, heartbeat)
            if self.stop_reason is not None:
                return self._terminate(now, rec, "stopped", self.stop_reason)
            if self.phase == "starting":
                deadline = rec.started_at + self.config.startup_timeout
                if now >= deadline:
                    if rec.first_heartbeat_at is None:
                        outcome = "no_heartbeat"
                        reason = f"never heartbeat: no heartbeat within {_secs(self.config.startup_timeout)} of launch"
                    else:
                        outcome = "startup_timeout"
                        reason = f"startup timeout: still starting {_secs(self.config.startup_timeout)} after launch"
                    return self._terminate(now, rec, outcome, reason)
                return Wait(deadline)
            assert rec.last_progress_at is not None
            deadline = rec.last_progress_at + self.config.stall_timeout
            if now >= deadline:
                reason = (
                    f"stalled: no progress for {_secs(now - rec.last_progress_at)} "
                    f"(steps={rec.steps}, episodes={rec.episodes})"
                )
                return self._terminate(now, rec, "stalled", reason)
            return Wait(deadline)

        # terminating or killing: waiting for the group leader to exit
        if self._last_kill_at is None:
            assert rec.terminate_at is not None
            deadline = rec.terminate_at + self.config.term_grace
        else:
            deadline = self._last_kill_at + self.config.term_grace
        if now >= deadline:
            if rec.kill_at is None:
                rec.kill_at = now
                self.messages.append(
                    f"attempt {rec.attempt}: still running {_secs(self.config.term_grace)} after SIGTERM; "
                    "sending SIGKILL to its process group"
                )
            self.phase = "killing"
            self._last_kill_at = now
            return Kill()
        return Wait(deadline)

    # -- transitions

    def _require_attempt(self) -> AttemptRecord:
        if self.current is None:
            raise RuntimeError("no attempt has been launched")
        return self.current

    def _launch(self, now: float) -> Launch:
        rec = AttemptRecord(attempt=len(self.attempts) + 1, started_at=now)
        self.attempts.append(rec)
        self.phase = "starting"
        self.next_launch_at = None
        self._last_kill_at = None
        return Launch(rec.attempt)

    def _observe(self, now: float, rec: AttemptRecord, beat: dict) -> None:
        key = (beat.get("steps", 0), beat.get("episodes", 0), beat.get("state"))
        if rec.first_heartbeat_at is None:
            rec.first_heartbeat_at = now
        if key == rec._last_key:
            return
        rec._last_key = key
        rec.steps, rec.episodes = int(key[0]), int(key[1])
        if self.phase == "starting":
            if key[2] != "starting" or key[0] > 0 or key[1] > 0:
                self.phase = "running"
                rec.running_at = rec.last_progress_at = now
        else:
            rec.last_progress_at = now

    def _terminate(self, now: float, rec: AttemptRecord, outcome: str, reason: str) -> Terminate:
        rec.outcome, rec.reason = outcome, reason
        rec.terminate_at = now
        self.phase = "terminating"
        self.messages.append(f"attempt {rec.attempt}: {reason}; sending SIGTERM to its process group")
        return Terminate(outcome, reason)

    def _child_exited(self, now: float, rec: AttemptRecord, code: int) -> Action:
        rec.ended_at = now
        rec.exit_code = code
        if self.phase in ("starting", "running"):
            if code == 0:
                rec.outcome, rec.reason = "completed", "completed"
                self.messages.append(f"attempt {rec.attempt}: completed")
                return self._finish("completed", None)
            rec.outcome, rec.reason = describe_exit(code)
            self.messages.append(f"attempt {rec.attempt}: {rec.reason}")
        if self.stop_reason is not None:
            return self._finish("stopped", self.stop_reason)
        return self._restart_or_give_up(now)

    def _restart_or_give_up(self, now: float) -> Action:
        rec = self._require_attempt()
        if self.restarts >= self.config.max_restarts:
            plural = "restart" if self.restarts == 1 else "restarts"
            return self._finish("failed", f"gave up after {self.restarts} {plural}: {rec.reason}")
        self.restarts += 1
        delay = self.config.backoff_delay(self.restarts)
        self.next_launch_at = now + delay
        self.phase = "backoff"
        self.messages.append(
            f"relaunching in {_secs(delay)} (restart {self.restarts} of {self.config.max_restarts})"
        )
        return Wait(self.next_launch_at)

    def _finish(self, state: str, reason: str | None) -> Finish:
        self.phase = state
        self.result = Finish(state, reason)
        return self.result


def _secs(value: float) -> str:
    return f"{value:.3g} s"


# ---------------------------------------------------------------------------------------------- the driver


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


def files_heartbeat(patterns: Sequence[str], attempt: int) -> dict:
    """A heartbeat made from output files (for a child that writes none): steps = bytes in the files matching
    `patterns` ("{attempt}" filled in; `**` recursive), episodes = how many of them are not empty."""
    size = nonempty = 0
    seen: set[str] = set()
    for pattern in patterns:
        for path in glob.glob(pattern.format(attempt=attempt), recursive=True):
            if path in seen:
                continue
            seen.add(path)
            try:
                st = os.stat(path)
            except OSError:
                continue
            if not os.path.isfile(path):
                continue
            size += st.st_size
            nonempty += st.st_size > 0
    return {"pid": 0, "steps": size, "episodes": nonempty, "time": time.time(),
            "state": "running" if size else "starting", "attempt": attempt}


def heartbeat_is_current(beat: dict, attempt: int, launched_wall: float) -> bool:
    """False for a heartbeat written by another attempt (or, lacking "attempt", written before this launch)."""
    if "attempt" in beat and beat["attempt"] not in (0, attempt):
        return False
    if ("attempt" not in beat or beat["attempt"] == 0) and beat["time"] < launched_wall - STALE_HEARTBEAT_SLACK_S:
        return False
    return True


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
        # A child already forked to run `cmd` (execution/standby.py): the first launch releases it instead of
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
    child forked to run `cmd` (execution/standby.StandbyRunner), released by the first launch."""
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


# ---------------------------------------------------------------------------------------------- command line

_FLAGS = {
    "startup_timeout": "--startup-timeout",
    "stall_timeout": "--stall-timeout",
    "max_restarts": "--max-restarts",
    "poll": "--poll",
    "term_grace": "--term-grace",
    "backoff": "--backoff",
    "backoff_max": "--backoff-max",
}


def add_watchdog_arguments(parser: argparse.ArgumentParser) -> None:
    d = WatchdogConfig()
    parser.add_argument("--startup-timeout", type=float, default=d.startup_timeout, metavar="S",
                        help=f"grace before the first progress heartbeat (default {d.startup_timeout:g})")
    parser.add_argument("--stall-timeout", type=float, default=d.stall_timeout, metavar="S",
                        help=f"restart when steps/episodes do not change for this long (default {d.stall_timeout:g})")
    parser.add_argument("--max-restarts", type=int, default=d.max_restarts, metavar="N",
                        help=f"relaunch at most N times, then give up with exit code 1 (default {d.max_restarts})")
    parser.add_argument("--heartbeat", metavar="FILE", default=None,
                        help="heartbeat file passed to the child as EVALFLEET_HEARTBEAT (default: a temporary file)")
    parser.add_argument("--poll", type=float, default=d.poll, metavar="S",
                        help=f"how often to read the heartbeat (default {d.poll:g})")
    parser.add_argument("--term-grace", type=float, default=d.term_grace, metavar="S",
                        help=f"SIGKILL this long after SIGTERM (default {d.term_grace:g})")
    parser.add_argument("--backoff", type=float, default=d.backoff, metavar="S",
                        help=f"wait before the first relaunch, doubled each time (default {d.backoff:g})")
    parser.add_argument("--backoff-max", type=float, default=d.backoff_max, metavar="S",
                        help=f"longest wait between relaunches (default {d.backoff_max:g})")
    parser.add_argument("--status-file", metavar="FILE", default=None,
                        help="write the watchdog state, reason and attempts here as JSON")
    parser.add_argument("--liveness-from-files", metavar="GLOB", action="append", default=[],
                        help="judge liveness from the growth of files matching GLOB (repeatable; {attempt} is the"
                             " attempt number) instead of a heartbeat the child writes")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ...", help="the command to supervise")


def add_watchdog_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `evalfleet watchdog` on the CLI's subparsers (handler: `watchdog_command`)."""
    parser = subparsers.add_parser(
        "watchdog",
        help="supervise a runner: restart it when it stalls or dies",
        description=(__doc__ or "").split("\n\n")[0],
        epilog="exit codes: 0 completed, 1 gave up, 2 bad usage, 130/143 stopped by SIGINT/SIGTERM",
    )
    add_watchdog_arguments(parser)
    parser.set_defaults(handler=watchdog_command)
    return parser


def config_from_args(args: argparse.Namespace) -> WatchdogConfig:
    values = {name: getattr(args, name) for name in _FLAGS}
    probe = types.SimpleNamespace(**values, backoff_factor=WatchdogConfig.backoff_factor)
    for name, problem in config_problems(probe):
        raise UserError(problem, where="command line", key=_FLAGS.get(name, name))
    return WatchdogConfig(**values)


def command_from_args(args: argparse.Namespace) -> list[str]:
    cmd = list(args.cmd or [])
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UserError("give the command to supervise after --, e.g. `evalfleet watchdog -- evalfleet runner ...`",
                        where="command line")
    exe = cmd[0]
    found = shutil.which(exe) if os.sep not in exe else (exe if os.access(exe, os.X_OK) else None)
    if found is None:
        raise UserError(f"command not found or not executable: {exe!r}", where="command line", key="CMD")
    return cmd


def watchdog_command(args: argparse.Namespace) -> int:
    """Handler of `evalfleet watchdog`. Installs SIGTERM/SIGINT handlers (main thread only)."""
    config = config_from_args(args)
    for pattern in getattr(args, "liveness_from_files", None) or ():
        try:
            pattern.format(attempt=1)
        except (KeyError, IndexError, ValueError) as exc:
            raise UserError(f"{pattern!r} is not a glob with an optional {{attempt}} ({exc}); write literal braces"
                            " as {{ and }}", where="command line", key="--liveness-from-files") from None
    cmd = command_from_args(args)
    tmpdir = None
    if args.heartbeat:
        heartbeat = Path(args.heartbeat)
    else:
        tmpdir = tempfile.mkdtemp(prefix="evalfleet-watchdog-")
        heartbeat = Path(tmpdir) / "heartbeat.json"
    watchdog = Watchdog(cmd, heartbeat, config, status_file=args.status_file,
                        liveness_files=getattr(args, "liveness_from_files", None) or ())

    def on_signal(signum: int, frame: Any) -> None:
        watchdog.stop_signal = signum  # the loop notices within one poll

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, on_signal)
    try:
        result = watchdog.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)
    return result.watchdog_exit_code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m evalfleet.execution.watchdog",
        description=(__doc__ or "").split("\n\n")[0],
    )
    add_watchdog_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return watchdog_command(args)
    except UserError as exc:
        print(f"evalfleet: error: {exc.line()}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
