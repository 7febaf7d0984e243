"""The watchdog's decisions, pure: `WatchdogStateMachine` turns (clock, exit code, heartbeat) into one `Action`
(Launch, Terminate, Kill, Wait, Finish) for a driver to carry out, and keeps an `AttemptRecord` per launch. No
processes, files or clocks of its own: tests drive it with a fake clock."""

from __future__ import annotations

import dataclasses
import signal
from dataclasses import dataclass, field
from typing import Any, Callable, Union

from evalfleet.execution.watchdog.config import WatchdogConfig


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
        key = (beat.get("steps", 0), beat.get("episodes", 0), beat.get("state"),
               # a runner waiting for the driver's next shards has no progress to show: each rewrite is its sign
               beat.get("time") if beat.get("state") == "waiting" else None)
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
