"""`timing: {mode: wall_clock}` (issue #28; docs/realtime.md): the env steps at `control_hz` in real time while
the policy computes on a thread, as on a robot and as vla-eval's live mode does. Not reproducible: what is late
depends on the machine, so every record says `reproducible: false`.

`PacedPolicy` wraps the Run's policy and hands the runner one action per call, each after waiting for its tick:
the next action of the last chunk while it lasts; when none is left it asks the policy (on its thread) with the
observation of now and, until the answer comes, gives the late action (`hold`: the last action applied, zeros
before the first; `zero`). An answer that arrives k steps after its question has its first k actions skipped
(stale), as in mode: simulated; one entirely stale gives its newest action. One env per runner (num_envs: 1).
"""

from __future__ import annotations

import collections
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np


def control_rate(run_name: str, control_hz: float | None, env: Any) -> float:
    """The Run's timing.control_hz, else the env's own; an env that has none: the Run fails (a UserError)."""
    hz = control_hz or getattr(env, "control_hz", None)
    if not hz:
        from evalfleet.sim.spec_checks import EnvironmentOptionsError

        raise EnvironmentOptionsError(
            "latency is counted in control steps, and this environment does not say its control rate: set "
            "timing.control_hz (steps per second)", where=f"Run {run_name!r}", key="timing.control_hz")
    return float(hz)


class PacedPolicy:
    def __init__(self, policy: Any, control_hz: float, late_action: str, action_dim: int, horizon: int | None):
        self.policy, self.period, self.late_action = policy, 1.0 / control_hz, late_action
        self.action_dim, self.horizon = action_dim, horizon
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evalfleet-policy")
        self._future: Future | None = None
        self.episode = WallClockEpisode(self)

    def __getattr__(self, name: str) -> Any:  # provenance, declared_spec, ...: the policy's own
        return getattr(self.policy, name)

    def reset(self, episode_seed: int, env_id: int = 0) -> None:
        """(The runner has made this episode's `WallClockEpisode` already: `WallClockModel.episode`.)"""
        if self._future is not None:  # the last episode's question: its answer is not this episode's
            self._future.exception()
        self._future = None
        self.policy.reset(episode_seed, env_id)

    def act_batch(self, observations: list[dict[str, Any]], env_ids: list[int]) -> list[np.ndarray]:
        ep = self.episode
        ep.wait_for_tick()
        if self._future is not None and self._future.done():
            chunk = np.asarray(self._future.result()[0])
            chunk = chunk[None] if chunk.ndim == 1 else (chunk[: self.horizon] if self.horizon else chunk)
            late = ep.tick - ep.asked_at
            fresh = chunk[late:] if late < len(chunk) else chunk[-1:]
            ep.answered(late, time.monotonic() - ep.asked_time, len(chunk) - len(fresh))
            ep.buffer.extend(fresh)
            self._future = None
        if not ep.buffer and self._future is None:
            ep.asked_at, ep.asked_time = ep.tick, time.monotonic()
            self._future = self._pool.submit(self.policy.act_batch, observations, env_ids)
        if ep.buffer:
            ep.last = ep.buffer.popleft()
            action = ep.last
        else:
            ep.held += 1
            hold = ep.last if self.late_action == "hold" and ep.last is not None else None
            action = hold if hold is not None else np.zeros(self.action_dim, dtype=np.float64)
        ep.tick += 1
        return [action]

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        if hasattr(self.policy, "close"):
            self.policy.close()


class WallClockEpisode:
    """One episode's clock and counts (the record's `timing`)."""

    def __init__(self, paced: PacedPolicy):
        self.paced = paced
        self.buffer: collections.deque = collections.deque()
        self.tick = self.asked_at = self.held = self.stale = self.answers = self.late_steps = 0
        self.asked_time = self.seconds = 0.0
        self.last: Any = None
        self._deadline: float | None = None

    def wait_for_tick(self) -> None:
        """Until this tick's time (the first at once; a late one at once, no catching up, as vla-eval paces)."""
        now = time.monotonic()
        start = now if self._deadline is None else max(now, self._deadline)
        if start > now:
            time.sleep(start - now)
        self._deadline = start + self.paced.period

    def answered(self, late_steps: int, seconds: float, stale: int) -> None:
        self.answers, self.late_steps = self.answers + 1, self.late_steps + late_steps
        self.seconds, self.stale = self.seconds + seconds, self.stale + stale

    def arrive(self, queue: collections.deque, actions: Any) -> None:
        queue.extend(actions)  # PacedPolicy already decided what is late

    def record(self, queue: collections.deque, episode_length: int) -> dict[str, Any]:
        n = self.answers
        return {
            "mode": "wall_clock",
            "latency_ms": round(1000 * self.seconds / n, 3) if n else None,
            "latency_steps": round(self.late_steps / n, 3) if n else None,
            "held_steps": self.held,
            "stale_steps": self.stale,
            "stale_ratio": round(self.held / episode_length, 6) if episode_length else 0.0,
            "reproducible": False,
        }


class WallClockModel:
    """A wall-clock Run's timing, as the runner sees it (rollout/latency.LatencyModel's counterpart)."""

    def __init__(self, name: str, run: Any):
        self.run_name, self.run = name, run
        self.paced: PacedPolicy | None = None

    def wrap(self, policy: Any, env: Any) -> PacedPolicy:
        timing = self.run.timing
        hz = control_rate(self.run_name, timing.control_hz, env)
        self.paced = PacedPolicy(policy, hz, timing.late_action, env.action_dim or 4,
                                 self.run.policy.open_loop_horizon)
        return self.paced

    def episode(self, spec: Any, env: Any) -> WallClockEpisode:
        self.paced.episode = WallClockEpisode(self.paced)
        return self.paced.episode
