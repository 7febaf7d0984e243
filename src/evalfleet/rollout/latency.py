"""Simulated policy latency: how a policy's answer enters a slot's action queue (issue #28; docs/realtime.md).

A policy asked at step t, with the observation of step t, answers L = ceil(latency_ms * control_hz / 1000)
control steps later. The env does not wait: it steps t..t+L-1 with the late action (`hold`: the previous action
applied, zeros before the episode's first; `zero`: zeros). The answer is a chunk of H actions meant for steps
t..t+H-1: from step t+L its actions L..H-1 are applied, its first L (stale) skipped, as a real controller
would. A chunk entirely stale (H <= L; a single action is a chunk of one) has only its last action, the newest
it has, applied once at step t+L. The policy is asked again when the queue runs dry, with the observation of
then.

Everything is a function of the plan: a fixed latency, the Run's `policy.latency_ms` variation value, a sampler
drawn from the episode's seed like a variation, or one recorded latency per call drawn from a generator seeded
by the episode's seed; the held actions are queued with the chunk, so records do not depend on workers,
`num_envs` or restarts. `mode: sync` Runs never get here (no timing: their records are as before);
`mode: wall_clock` is rollout/wall_clock.py.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from evalfleet.experiment.plan import EpisodeSpec, sample, variation_rng
from evalfleet.experiment.schema import Run
from evalfleet.experiment.timing import LATENCY_VARIATION
from evalfleet.rollout.wall_clock import WallClockModel, control_rate


def enqueue(queue: collections.deque, action: Any, horizon: int | None, timing: "EpisodeTiming | None") -> None:
    """One policy answer into the slot's queue: a single action (A,), or the first `horizon` actions of a chunk
    (H, A); with a timing, as it arrives after the episode's latency."""
    if timing is None and type(action) is np.ndarray and action.ndim == 1:  # the usual case, once a step
        queue.append(action)
        return
    chunk = np.asarray(action)
    if chunk.ndim == 1:  # one action: the common case, queued as it is
        actions: Any = [chunk]
    elif chunk.ndim != 2 or chunk.shape[0] == 0:
        raise ValueError(f"policy returned an action of shape {np.shape(action)}; expected (A,) or (H, A)")
    else:
        actions = chunk[:horizon] if horizon else chunk
    if timing is None:
        queue.extend(actions)
    else:
        timing.arrive(queue, actions)


def latency_steps(latency_ms: float, control_hz: float) -> int:
    """Control steps a latency spans: ceil(ms * hz / 1000), with a float's last-digit noise ignored (50 ms at
    20 Hz is 1 step, not 2)."""
    return max(0, math.ceil(round(latency_ms * control_hz / 1000.0, 9)))


@dataclass
class LatencyModel:
    """A simulated Run's latency: where each episode's latency comes from, and the control rate."""

    run_name: str
    control_hz: float | None  # the Run's timing.control_hz; None: the env's own
    late_action: str
    fixed_ms: float | None = None
    sampler: dict[str, Any] | None = None
    recorded: list[float] | None = None

    @classmethod
    def of_run(cls, name: str, run: Run) -> "LatencyModel | WallClockModel | None":
        """The Run's timing model; None for sync (no timing: records as before)."""
        timing = run.timing
        if timing is not None and timing.mode == "wall_clock":
            return WallClockModel(name, run)
        if timing is None or timing.mode != "simulated":
            return None
        latency = timing.latency
        return cls(name, timing.control_hz, timing.late_action,
                   fixed_ms=latency.fixed_ms if latency else None, sampler=latency.sampler() if latency else None,
                   recorded=list(latency.recorded) if latency and isinstance(latency.recorded, list) else None)

    def wrap(self, policy: Any, env: Any) -> Any:
        return policy  # simulated: the policy is asked as in sync; `arrive` makes its answer late

    def episode(self, spec: EpisodeSpec, env: Any) -> "EpisodeTiming":
        hz = control_rate(self.run_name, self.control_hz, env)
        if spec.variations.get(LATENCY_VARIATION) is not None:  # the variation's value overrides timing.latency
            fixed: float | None = max(0.0, float(spec.variations[LATENCY_VARIATION]))
        elif self.sampler is not None:
            fixed = max(0.0, float(sample(self.sampler, variation_rng(spec.seed, LATENCY_VARIATION))))
        else:
            fixed = self.fixed_ms
        rng = variation_rng(spec.seed, f"{LATENCY_VARIATION}.recorded") if fixed is None else None
        return EpisodeTiming(float(hz), self.late_action, fixed, self.recorded, rng)


@dataclass
class EpisodeTiming:
    """One episode's latency bookkeeping: what `arrive` queued, and what of it the env stepped."""

    control_hz: float
    late_action: str
    fixed_ms: float | None
    recorded: list[float] | None
    rng: np.random.Generator | None
    held_queued: int = 0  # late actions queued so far
    stale_steps: int = 0  # chunk actions skipped because they arrived after their step
    calls: int = 0
    total_ms: float = 0.0
    total_steps: int = 0
    _last: Any = None  # the last action queued: the one applied last when the queue runs dry
    _fresh_tail: int = 0  # chunk actions queued by the last arrival (after its held ones)

    def _next_ms(self) -> float:
        if self.fixed_ms is not None:
            return self.fixed_ms
        return float(self.recorded[int(self.rng.integers(len(self.recorded)))])

    def arrive(self, queue: collections.deque, actions: Any) -> None:
        ms = self._next_ms()
        steps = latency_steps(ms, self.control_hz)
        self.calls, self.total_ms, self.total_steps = self.calls + 1, self.total_ms + ms, self.total_steps + steps
        if steps:
            if self.late_action == "hold" and self._last is not None:
                late = self._last
            else:
                late = np.zeros_like(np.asarray(actions[0], dtype=np.float64))
            queue.extend([late] * steps)
            self.held_queued += steps
        fresh = actions[steps:] if steps < len(actions) else actions[-1:]  # entirely stale: its newest action
        self.stale_steps += len(actions) - len(fresh)
        queue.extend(fresh)
        self._fresh_tail = len(fresh)
        self._last = fresh[-1]

    def record(self, queue: collections.deque, episode_length: int) -> dict[str, Any]:
        """The record's `timing`: the latency used, and of the late actions queued those the env stepped (an
        episode that ends while the policy "thinks" has the rest of them left in its queue)."""
        unstepped = max(0, len(queue) - self._fresh_tail)
        held = self.held_queued - unstepped
        constant = self.fixed_ms is not None
        return {
            "mode": "simulated",
            "latency_ms": self.fixed_ms if constant else (round(self.total_ms / self.calls, 3) if self.calls else None),
            "latency_steps": (latency_steps(self.fixed_ms, self.control_hz) if constant
                              else round(self.total_steps / self.calls, 3) if self.calls else None),
            "held_steps": held,
            "stale_steps": self.stale_steps,
            "stale_ratio": round(held / episode_length, 6) if episode_length else 0.0,
        }
