"""What one shard of a Run has left and has recorded, and the episode each env slot is playing: the runner's
(`rollout.runner.ShardRunner`) bookkeeping, apart from how it plays episodes."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

from evalfleet.experiment.plan import EpisodeSpec
from evalfleet.rollout.records import RecordWriter


@dataclass
class ShardOutcome:
    run: str
    shard: str
    recorded: int = 0
    errors: int = 0
    steps: int = 0
    stopped: bool = False
    spec_mismatch: str | None = None  # the Run did not start: its policy does not fit its environment
    environment_error: str | None = None  # the Run did not start: its environment cannot be built from its options


@dataclass
class Slot:
    """One env instance and the episode it is playing."""

    env_id: int
    env: Any
    spec: EpisodeSpec | None = None
    attempt: int = 1
    observation: dict[str, Any] | None = None
    queue: collections.deque = field(default_factory=collections.deque)  # pending actions of a chunk
    steps: int = 0
    started: float = 0.0
    latency_s: float = 0.0
    calls: int = 0
    video: Any = None  # EpisodeVideo while this episode is being recorded
    trajectory: Any = None  # EpisodeTrajectory while this episode keeps its frames (rollout/trajectory.py)
    progress: Any = None  # the env's progress for this episode (StepResult.info["progress"]), if it reports one
    timing: Any = None  # a simulated-latency Run's latency.EpisodeTiming of this episode
    bounds: Any = None  # the env's declared action bounds (low, high), None when it declares none
    clipped: int = 0  # steps of this episode whose action lay outside them (the env clipped it)
    held: int = 0  # consecutive steps, up to this one, at which the env reported success
    first_success: int | None = None  # the first step at which it did


@dataclass
class ShardProgress:
    """What is left of one shard and what it has recorded: the queue of (episode, attempt) to run, and for a
    `num_steps` Run the step budget left and the next new episode index."""

    outcome: ShardOutcome
    writer: RecordWriter
    queue: collections.deque
    budget_left: int | None  # None: the shard's episodes are a fixed range
    next_index: int

    def next_episode(self) -> tuple[int, int] | None:
        """(episode, attempt) to start next, or None when nothing is left."""
        if self.queue:
            return self.queue.popleft()
        if self.budget_left is not None and self.budget_left > 0:
            self.next_index += 1
            return (self.next_index - 1, 1)
        return None

    def recorded(self, slot: Slot, error: str | None, *, retry: bool) -> None:
        """Count the record just written for the slot's episode; an error is queued again when `retry`."""
        self.outcome.recorded += 1
        if self.budget_left is not None and not error:
            self.budget_left -= slot.steps
        if error:
            self.outcome.errors += 1
            if retry:
                self.queue.append((slot.spec.index, slot.attempt + 1))
