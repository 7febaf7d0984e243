"""Policies that misbehave on purpose, for fault-tolerance tests. Loaded in runner subprocesses
through EVALFLEET_PLUGINS=evalfleet_test_plugins with this folder on PYTHONPATH."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from evalfleet.policies.base import POLICIES, BasePolicy
from evalfleet.policies.builtin import ExpertOptions, MetaworldExpertPolicy, NoOptions


class FlakyExpert(MetaworldExpertPolicy):
    """The expert, but its first attempt at ~10% of episodes raises mid-episode (an infrastructure fault)."""

    def __init__(self, options: dict, context: Any):
        super().__init__(NoOptions(), context)
        self.rate = float(options.get("rate", 0.1))
        self.attempt_of: dict[int, int] = {}
        self.seed_of: dict[int, int] = {}
        self.steps: dict[int, int] = {}
        self.seen: set[int] = set()

    def reset(self, episode_seed: int, env_id: int = 0) -> None:
        self.seed_of[env_id] = episode_seed
        self.steps[env_id] = 0

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        seed = self.seed_of[env_id]
        self.steps[env_id] += 1
        faulty = (seed % 1000) < self.rate * 1000
        if faulty and seed not in self.seen and self.steps[env_id] == 5:
            self.seen.add(seed)  # fail once per episode per process; the retry succeeds
            raise ConnectionError(f"simulated policy-server hiccup on seed {seed}")
        return super().act(observation, env_id)


class SlowExpert(MetaworldExpertPolicy):
    """The expert, slowed down so a test can interrupt a run midway."""

    def __init__(self, options: dict, context: Any):
        super().__init__(NoOptions(), context)
        self.delay = float(options.get("delay_s", 0.002))

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        time.sleep(self.delay)
        return super().act(observation, env_id)


RELEASE = "release"
_episodes_started = 0  # by this process, at any GatedExpert


@contextlib.contextmanager
def _stop_requests() -> Iterator[threading.Event]:
    """An Event set when this process is asked to stop (SIGTERM/SIGINT) while the block runs: the handler that
    was installed runs as before, then the Event is set; the handlers are put back after the block. Off the main
    thread (no handlers there) the Event is never set."""
    asked_to_stop = threading.Event()
    installed: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(signum)

            def on_signal(num: int, frame: Any, previous: Any = previous) -> None:
                asked_to_stop.set()
                if callable(previous):
                    previous(num, frame)
                elif previous == signal.SIG_DFL:
                    signal.signal(num, signal.SIG_DFL)
                    os.kill(os.getpid(), num)

            installed[signum] = previous
            signal.signal(signum, on_signal)
    try:
        yield asked_to_stop
    finally:
        for signum, previous in installed.items():
            signal.signal(signum, previous)


def wait_at_gate(gate: Path) -> None:
    """Say "this process waits here" (GATE/<pid>.waiting, holding the pid) and block until GATE/release exists,
    or until this process is asked to stop (SIGTERM/SIGINT: the handler that was installed runs as before, then
    the wait ends, so a runner stops as it would after a slow policy call)."""
    release = gate / RELEASE
    if release.exists():
        return
    with _stop_requests() as asked_to_stop:
        tmp = gate / f".{os.getpid()}.tmp"
        tmp.write_text(str(os.getpid()))
        os.replace(tmp, gate / f"{os.getpid()}.waiting")  # only once the handlers above are in place
        while not release.exists() and not asked_to_stop.is_set():
            time.sleep(0.02)


class GatedExpert(MetaworldExpertPolicy):
    """The expert, held at a gate the test controls, so that an interruption always lands while work is pending,
    however fast the machine: each process starts `after_episodes` episodes freely, then waits at the start of
    the next one (`wait_at_gate(options["gate"])`) until the test releases the gate or stops the process. With
    `at_call: K` it waits inside that episode instead, at its K-th policy call (K - 1 steps played)."""

    def __init__(self, options: dict, context: Any):
        super().__init__(ExpertOptions(chunk_size=int(options.get("chunk_size", 1))), context)  # chunks: issue #28
        self.gate = Path(options["gate"])
        self.after = int(options.get("after_episodes", 1))
        self.at_call = int(options["at_call"]) if options.get("at_call") is not None else None
        self.calls: dict[int, int] = {}

    def reset(self, episode_seed: int, env_id: int = 0) -> None:
        global _episodes_started
        _episodes_started += 1
        self.calls[env_id] = 0
        if self.at_call is None and _episodes_started > self.after:
            wait_at_gate(self.gate)
        super().reset(episode_seed, env_id)

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        self.calls[env_id] = self.calls.get(env_id, 0) + 1
        if self.calls[env_id] == self.at_call and _episodes_started > self.after:
            wait_at_gate(self.gate)
        return super().act(observation, env_id)


class HangingPolicy(BasePolicy):
    """Never returns from its first call until its process is asked to stop. It is built, so its runner has
    heartbeat "running" (the startup grace is over) and then never makes a step: only the watchdog's stall
    timeout can end it. Its SIGTERM ends the call (the runner's own handler runs first), so the runner stops as
    after a slow policy call instead of waiting for the SIGKILL after the grace."""

    def __init__(self, options: dict, context: Any):
        self.action_dim = context.action_dim

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        with _stop_requests() as asked_to_stop:
            while not asked_to_stop.wait(0.1):
                pass
        return np.zeros(self.action_dim, dtype=np.float32)


class StopSelfPolicy(MetaworldExpertPolicy):
    """SIGSTOPs its own process once, at the given episode, on the first attempt only (a hang)."""

    def __init__(self, options: dict, context: Any):
        super().__init__(NoOptions(), context)
        self.at = int(options.get("at_episode_calls", 200))
        self.calls = 0

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        self.calls += 1
        if self.calls == self.at and os.environ.get("EVALFLEET_ATTEMPT", "1") == "1":
            os.kill(os.getpid(), signal.SIGSTOP)
        return super().act(observation, env_id)


class KillSelfPolicy(StopSelfPolicy):
    """SIGKILLs its own process once (a crash), on the first attempt only."""

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        self.calls += 1
        if self.calls == self.at and os.environ.get("EVALFLEET_ATTEMPT", "1") == "1":
            os.kill(os.getpid(), signal.SIGKILL)
        return MetaworldExpertPolicy.act(self, observation, env_id)


class UnseededNoisyExpert(MetaworldExpertPolicy):
    """The expert with Gaussian action noise drawn from an unseeded generator: the same episode replayed ends in
    another state (what `evalfleet verify` measures)."""

    def __init__(self, options: dict, context: Any):
        super().__init__(NoOptions(), context)
        self.noise = np.random.default_rng()  # deliberately unseeded
        self.scale = float(options.get("scale", 0.3))

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        action = super().act(observation, env_id)
        return action + self.noise.normal(0.0, self.scale, size=np.shape(action))


POLICIES.register("test_flaky_expert")(FlakyExpert)
POLICIES.register("test_unseeded_noisy_expert")(UnseededNoisyExpert)
POLICIES.register("test_slow_expert")(SlowExpert)
POLICIES.register("test_gated_expert")(GatedExpert)
POLICIES.register("test_hanging")(HangingPolicy)
POLICIES.register("test_stop_self")(StopSelfPolicy)
POLICIES.register("test_kill_self")(KillSelfPolicy)
