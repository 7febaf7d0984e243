"""The runner: one shard of one Run → env + policy → one EpisodeRecord line per finished episode.

For each planned episode not already decided in the Run's logs it resets with the episode's seed,
applies its variation values, steps until success or the step limit, and appends a record (flushed).
`num_envs > 1` steps several env instances in lockstep with one batched policy call per step; every
episode is reset from its own seed, so results do not depend on which env ran it or how many there
are. Exceptions in env or policy, and episodes over their wall-clock deadline, are recorded as
`status: error` (infrastructure, excluded from success rates) and retried up to `max_attempts`.

Before a Run's first episode, once its envs and policy exist (a remote policy has connected, so its
server's declaration is known), what the policy declares is checked against what the environment
provides (`policies.base.check_spec`); a mismatch raises SpecMismatchError, and `run_shards` runs
none of that Run's episodes and reports it in `ShardOutcome.spec_mismatch`. An environment its options
cannot build (`sim.spec_checks.EnvironmentOptionsError`: an unknown Gymnasium id, bad kwargs) is handled
the same way, in `ShardOutcome.environment_error`. Every action is checked too, before the env steps it
(`actions.checked_action`: `action_dim` finite values): a wrong size or NaN/inf is a SpecMismatchError of the
Run (its episodes in flight recorded as `spec_mismatch` first), never cut to size, stepped with, or counted as
a failure. Every failed or errored record carries a `failure_code`, every record its Run's `protocol` identity
(`rollout.failures`); a runner the watchdog relaunched records what its predecessor had in flight
(`rollout.inflight`: `runner_crash` / `stall`) before its first shard.
"""

from __future__ import annotations

import collections
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from evalfleet.experiment.plan import RunPlan, Shard
from evalfleet.layout import part_path, timings_path
from evalfleet.policies.base import single_act
from evalfleet.rollout.actions import action_bounds, checked_action, outside
from evalfleet.rollout.failures import (check_records_protocol, describe_error, env_code, policy_code,
                                        recording_code, run_protocol, task_code, write_protocol)
from evalfleet.rollout.garbage import GarbageBound
from evalfleet.rollout.heartbeat import HeartbeatWriter
from evalfleet.rollout.latency import LatencyModel, enqueue
from evalfleet.rollout.inflight import InFlight, runner_in_flight
from evalfleet.rollout.records import (DECISION_FIELDS, EpisodeRecord, RecordWriter, RunRecordsTail, RunScope,
                                      is_decided, run_logs)
from evalfleet.rollout.shard_state import ShardOutcome, ShardProgress, Slot
from evalfleet.rollout.timings import PhaseTimings, worker_name
from evalfleet.rollout.trajectory import EpisodeTrajectory, wanted
from evalfleet.rollout.video import EpisodeVideo, should_record
from evalfleet.sim.base import with_defaults
from evalfleet.sim.protocol import (EPISODE_TIMEOUT, POLICY_ERROR, RECORDING_ERROR, SPEC_MISMATCH,
                                   SUCCESS_AT_RESET)

# An episode whose success holds after its first step: the task was met at reset (or by any first action), so its
# outcome says nothing about the policy; an error record (left out of the rate), its code SUCCESS_AT_RESET.
AT_RESET = "the task's success held at reset or after the first step: no outcome of the policy"


class ShardRunner:
    def __init__(
        self,
        plan: RunPlan,
        out_dir: str | Path,
        *,
        make_env: Callable[[], Any],
        make_policy: Callable[[], Any],
        heartbeat: HeartbeatWriter | None = None,
        stop: threading.Event | None = None,
        on_record: Callable[[dict[str, Any]], None] | None = None,
        in_flight: InFlight | None = None,
        garbage: GarbageBound | None = None,
    ):
        self.plan = plan
        self.run = plan.run
        self.out_dir = Path(out_dir)
        self.make_env = make_env
        self.make_policy = make_policy
        self.heartbeat = heartbeat or HeartbeatWriter(None, "")
        self.stop = stop or threading.Event()
        self.on_record = on_record
        self.in_flight = in_flight or InFlight(None)  # rollout/inflight.py: what a restarted runner accounts for
        self.garbage = garbage  # rollout/garbage.py: a runner process's old cyclic garbage, collected
        self.protocol = run_protocol(self.run)  # sim/protocol.py: its identity on every record
        self._hold_steps = getattr(getattr(self.run, "success", None), "hold_steps", 1)
        self._identity = self.protocol.identity  # a SHA-256 of its canonical JSON (~0.1 ms): once, not per record
        self._protocol_checked = False
        self._envs: list[Any] = []
        self._policy: Any = None
        self.timings = PhaseTimings()  # aggregated in memory, written once per shard (rollout/timings.py)
        # Per-step phases: one append a step, folded into the timings once an episode (a call per step costs more).
        self._sim_s, self._policy_s = self.timings.series("sim_step"), self.timings.series("policy")
        self._act_one: Callable[[Any, int], Any] | None = None  # the policy's `act`, where act_batch only loops over it
        self._built_at: float | None = None  # perf_counter when the envs were built, until the first record
        self.latency = LatencyModel.of_run(plan.name, plan.run)  # None: the world waits for the policy (sync)
        # What decides this Run's episodes, read on from the logs before each shard (only the new lines).
        self._decisions = RunRecordsTail(RunScope(plan.name, plan.num_episodes),
                                         lambda: run_logs(self.out_dir, plan.name), keep=DECISION_FIELDS)

    # -- what to run ---------------------------------------------------------------------------
    def _pending(self, shard: Shard) -> collections.deque:
        """(episode, attempt) of every episode of the shard that is not decided yet."""
        if shard.stop is None:
            return collections.deque()
        done, max_attempts, todo = self._decisions.refresh(), self.run.max_attempts, collections.deque()
        for i in shard.indices():
            rec = done.get(i)
            if rec is None or not is_decided(rec, max_attempts):
                todo.append((i, 1 if rec is None else int(rec.get("attempt", 1)) + 1))
        return todo

    def _budget_steps_done(self) -> tuple[int, int]:
        done = self._decisions.refresh()
        steps = sum(int(r.get("episode_length", 0)) for _, r in done.winners() if r.get("status") != "error")
        return steps, (max(ep for ep, _ in done.winners()) + 1 if len(done) else 0)

    # -- running -------------------------------------------------------------------------------
    def _ensure_instances(self, n: int) -> None:
        built = len(self._envs) < n or self._policy is None
        while len(self._envs) < n:
            self._built_at = self._built_at or time.perf_counter()
            with self.timings.phase("env_build"):  # every optional member of the protocol readable, declared or not
                self._envs.append(with_defaults(self.make_env()))
        if self._policy is None:
            with self.timings.phase("policy_connect"):
                self._policy = self.make_policy()
                self._policy = self.latency.wrap(self._policy, self._envs[0]) if self.latency else self._policy
            self._act_one = single_act(self._policy)
        if built and self.garbage is not None:
            self.garbage.settle()

    def run_shard(self, shard: Shard) -> ShardOutcome:
        """Every episode of the shard that is not decided yet (or, for a `num_steps` Run, new episodes until its
        step budget is spent), `num_envs` at a time, one record line each; stops early when `stop` is set."""
        if not self._protocol_checked:  # the Run's records are of this protocol; protocol.json says which it is
            check_records_protocol(run_logs(self.out_dir, self.plan.name), self.protocol)
            write_protocol(self.out_dir, self.plan.name, self.protocol)
            self._protocol_checked = True
        queue, budget, next_index = self._todo(shard)
        if not queue and not budget:
            return ShardOutcome(self.plan.name, shard.id)
        slots = self._open_slots(shard, len(queue), bounded=budget is None)
        progress = ShardProgress(ShardOutcome(self.plan.name, shard.id),
                                  RecordWriter(part_path(self.out_dir, self.plan.name, shard.id)),
                                  queue, budget, next_index)
        try:
            self._play(slots, progress)
            progress.outcome.stopped = self.stop.is_set()
            if not progress.outcome.stopped:  # stopped: what was in flight stays, for a restart to account for
                self.in_flight.clear()
        finally:
            for slot in slots:  # an episode left unfinished (stopped, a full disk) keeps no half-written file
                if slot.trajectory is not None:
                    slot.trajectory.discard()
                    slot.trajectory = None
            progress.writer.close()
            self.timings.flush(timings_path(self.out_dir, self.plan.name, shard.id, worker_name()),
                               run=self.plan.name, shard=shard.id)
        return progress.outcome

    def _todo(self, shard: Shard) -> tuple[collections.deque, int | None, int]:
        """(the pending (episode, attempt) queue, the step budget left or None, the next new episode index)."""
        if shard.stop is not None:
            return self._pending(shard), None, 0
        steps_done, next_index = self._budget_steps_done()
        return self._pending(shard), max(0, (self.plan.num_steps or 0) - steps_done), next_index

    def _open_slots(self, shard: Shard, pending: int, *, bounded: bool) -> list[Slot]:
        """The shard's env instances (built on first use) and policy, and the heartbeat saying it runs."""
        n_envs = self.run.environment_builder.num_envs
        if bounded:
            n_envs = min(n_envs, pending)
        self._ensure_instances(n_envs)
        self.heartbeat.shard = f"{self.plan.name}/{shard.id}"
        self.heartbeat.beat(state="running", force=True)
        return [Slot(i, self._envs[i]) for i in range(n_envs)]

    def _play(self, slots: list[Slot], progress: ShardProgress) -> None:
        """Step every env in lockstep, one batched policy call for those whose action queue is empty, until no
        episode is left or `stop` is set."""
        from evalfleet.policies.base import SpecMismatchError

        for slot in slots:
            self._start(slot, progress)
        try:
            if len(slots) == 1:
                self._play_one(slots[0], progress)
            else:
                self._play_lockstep(slots, progress)
        except SpecMismatchError as exc:  # the Run stops: its episodes in flight are recorded first
            for slot in (s for s in slots if s.spec is not None):
                self._finish(slot, progress, error=exc.line(), code=SPEC_MISMATCH.code, retry=False)
            raise

    def _play_lockstep(self, slots: list[Slot], progress: ShardProgress) -> None:
        while not self.stop.is_set():
            active = [s for s in slots if s.spec is not None]
            if not active:
                break
            self._refill_actions([s for s in active if not s.queue], progress)
            stepped = sum(self._step(slot, progress) for slot in active)
            progress.outcome.steps += stepped
            self.heartbeat.advance(steps=stepped)

    def _play_one(self, slot: Slot, progress: ShardProgress) -> None:
        """`_play_lockstep` for a single env (`num_envs: 1`, the usual case), without the lists of slots it builds
        each step: with a fast simulator (Meta-World's steps take 0.3–0.6 ms) the runner's own work is ~5–10 % of
        the time."""
        stop, heartbeat, outcome, one = self.stop, self.heartbeat, progress.outcome, (slot,)
        while slot.spec is not None and not stop.is_set():
            if not slot.queue:
                self._refill_actions(one, progress)
            stepped = self._step(slot, progress)
            outcome.steps += stepped
            heartbeat.advance(steps=stepped)

    def _step(self, slot: Slot, progress: ShardProgress) -> int:
        """One step of the slot's episode (1 if the env stepped, else 0); an episode that ends is recorded and
        the slot starts the next."""
        if slot.spec is None or not slot.queue:
            if slot.spec is None:
                self._start(slot, progress)
            return 0
        # SpecMismatchError (not `action_dim` finite numbers): the Run stops
        action = checked_action(slot.queue.popleft(), slot.env, self.run, self.plan, slot.steps, slot.spec)
        if slot.bounds is not None and outside(action, slot.bounds):
            slot.clipped += 1
        stage = env_code  # what failed, for the record's code: the env's step, or the video's frame
        try:
            t0 = time.perf_counter()  # not timings.phase(): a context manager per step costs more than the append
            result = slot.env.step(action)
            now = time.perf_counter()
            self._sim_s.append(now - t0)
            stage = recording_code
            if slot.video is not None:
                with self.timings.phase("render"):
                    slot.video.add(slot.env, result.observation)
            ends, succeeded = self._ending(slot, result.success, result.done)
            if slot.trajectory is not None:
                slot.trajectory.step(action, result.success, ends, result.info)
        except Exception as exc:  # noqa: BLE001 - an environment's error is this episode's error record
            self._finish(slot, progress, error=describe_error(exc), code=stage(exc))
            self._start(slot, progress)
            return 0
        slot.steps += 1
        slot.observation = result.observation
        slot.progress = result.info.get("progress", slot.progress)
        timeout = self.run.episode_timeout_s
        if result.success and slot.steps == 1:  # the start already met the task: no policy outcome (#55)
            self._finish(slot, progress, error=AT_RESET, code=SUCCESS_AT_RESET.code)
            self._start(slot, progress)
        elif ends:
            self._finish(slot, progress, success=succeeded)
            self._start(slot, progress)
        elif now - slot.started > timeout:
            self._finish(slot, progress, error=f"episode exceeded its {timeout:g} s deadline after {slot.steps} steps",
                         code=EPISODE_TIMEOUT.code)
            self._start(slot, progress)
        elif slot.trajectory is not None:  # the observation the next action answers
            try:
                slot.trajectory.observe(slot.env, result.observation)
            except Exception as exc:  # noqa: BLE001 - a frame that cannot be kept is this episode's error record
                self._finish(slot, progress, error=f"recording failed: {describe_error(exc)}",
                             code=RECORDING_ERROR.code)
                self._start(slot, progress)
        return 1

    def _ending(self, slot: Slot, success: bool, done: bool) -> tuple[bool, bool]:
        """(the episode ends at this step, it succeeded), from the env's success and done after the step. Where the
        Run holds success for `success.hold_steps` > 1 steps, a success that has not held that long goes on, and
        at the step limit it is a failure. Counts the steps success has held and notes the first."""
        if success:
            slot.held += 1
            if slot.first_success is None:
                slot.first_success = slot.steps + 1
        else:
            slot.held = 0
        if not done or not success or slot.held >= self._hold_steps:
            return done, success
        return slot.steps + 1 >= slot.env.max_steps, False

    def _start(self, slot: Slot, progress: ShardProgress) -> None:
        """Reset the slot's env and the policy for the shard's next episode (none left: the slot goes idle). A
        reset that fails is that episode's error record, and the slot tries the next."""
        recording = getattr(self.run, "recording", None)
        while True:
            item = progress.next_episode()
            if item is None:
                slot.spec = None
                return
            index, attempt = item
            spec = self.plan.episode(index)
            slot.spec, slot.attempt, slot.steps, slot.latency_s, slot.calls = spec, attempt, 0, 0.0, 0
            slot.bounds, slot.clipped = action_bounds(slot.env), 0
            slot.held, slot.first_success = 0, None
            slot.progress = None
            slot.queue.clear()
            slot.timing = self.latency.episode(spec, slot.env) if self.latency else None
            slot.started = time.perf_counter()
            self.in_flight.started(slot.env_id, self.plan.name, progress.outcome.shard, index, attempt)
            stage = env_code  # what failed, for the record's code: the env's reset, the policy's, the video
            try:
                # An env whose episodes differ by index, not only seed (LIBERO's fixed initial states).
                # A replayed condition set gives the initial state it was exported with.
                start = spec.index if spec.initial_state is None else spec.initial_state
                by_index = {"episode": start} if slot.env.reset_takes_episode else {}
                with self.timings.phase("reset"):
                    slot.observation = slot.env.reset(spec.seed, spec.variations, **by_index)
                    stage = policy_code
                    self._policy.reset(spec.seed, slot.env_id)
                stage = recording_code
                if should_record(recording, spec.index):
                    slot.video = EpisodeVideo(self.out_dir / self.plan.name, spec.index, recording,
                                              slot.env.control_hz)
                    slot.video.add(slot.env, slot.observation)
                trajectories = getattr(recording, "trajectories", None)
                if wanted(trajectories, spec.index, spec.seed):
                    slot.trajectory = EpisodeTrajectory(self.out_dir / self.plan.name, spec.index, spec.seed,
                                                        attempt, trajectories, slot.env, slot.bounds)
                    slot.trajectory.observe(slot.env, slot.observation)
                return
            except Exception as exc:  # noqa: BLE001 - infrastructure error, recorded and retried
                self._finish(slot, progress, error=describe_error(exc), code=stage(exc))

    def _finish(self, slot: Slot, progress: ShardProgress, success: bool | None = None,
                error: str | None = None, code: str | None = None, retry: bool = True) -> None:
        """Record the slot's episode (an error, with its failure code, is queued again while it has attempts
        left); the slot goes idle."""
        spec = slot.spec
        assert spec is not None
        status = "error" if error else ("success" if success else "failure")
        video = None
        if slot.video is not None:
            try:
                video = slot.video.close()
            except Exception as exc:  # noqa: BLE001 - a broken video is reported, not fatal
                if not error:
                    error, code = f"recording failed: {describe_error(exc)}", RECORDING_ERROR.code
                status = "error"
            slot.video = None
        kept = None
        if slot.trajectory is not None:
            trajectory, slot.trajectory = slot.trajectory, None
            try:
                kept = trajectory.close(status=status)
            except Exception as exc:  # noqa: BLE001 - a trajectory that cannot be written is reported, not fatal
                trajectory.discard()
                if not error:
                    error, code = f"recording failed: {describe_error(exc)}", RECORDING_ERROR.code
                status = "error"
        if status == "failure":
            code = task_code(slot.env, self.protocol)  # UndeclaredFailureCode: the adapter's bug
        record = EpisodeRecord(
            run=self.plan.name,
            task=self.plan.task,
            policy=self.plan.policy,
            episode=spec.index,
            seed=spec.seed,
            status=status,
            success=None if error else bool(success),
            episode_length=slot.steps,
            duration_s=round(time.perf_counter() - slot.started, 4),
            variations=spec.variations,
            attempt=slot.attempt,
            error=error,
            video=video,
            policy_latency_ms=round(1000 * slot.latency_s / slot.calls, 3) if slot.calls else None,
            progress=None if error else slot.progress,
            policy_provenance=getattr(self._policy, "provenance", None),
            timing=slot.timing.record(slot.queue, slot.steps) if slot.timing else None,
            clipped_actions=None if slot.bounds is None else slot.clipped,
            trajectory=kept,
            first_success_step=slot.first_success,
            success_at_reset=True if code == SUCCESS_AT_RESET.code else None,
            final_state=None if error else final_state(slot.env, slot.observation),
            failure_code=None if status == "success" else (code or POLICY_ERROR.code),
            protocol=self._identity,
        )
        with self.timings.phase("write"):
            progress.writer.append(record)
        self.timings.fold()  # this episode's per-step timings
        if self._built_at is not None:  # a Run's first record: from its envs' build to here
            self.timings.add("first_episode", time.perf_counter() - self._built_at)
            self._built_at = None
        progress.recorded(slot, error, retry=retry and slot.attempt < self.run.max_attempts)
        self.heartbeat.advance(episodes=1)
        if self.on_record:
            self.on_record(record.to_json())
        slot.spec = None
        if self.garbage is not None:
            self.garbage.between_episodes()

    def _refill_actions(self, slots: "list[Slot] | tuple[Slot, ...]", progress: ShardProgress) -> None:
        """One batched policy call for every env whose action queue is empty."""
        if not slots:
            return
        horizon = self.run.policy.open_loop_horizon
        try:
            self._call_policy(slots, horizon)
        except Exception as exc:  # noqa: BLE001 - a policy's error is its episodes' error records
            if len(slots) == 1:
                self._finish(slots[0], progress, error=describe_error(exc), code=policy_code(exc))
                return
            # Find which env's call failed: ask each on its own; only those episodes become errors.
            for slot in slots:
                try:
                    self._call_policy([slot], horizon)
                except Exception as exc:  # noqa: BLE001 - a policy's error is this episode's error record
                    self._finish(slot, progress, error=describe_error(exc), code=policy_code(exc))

    def _call_policy(self, slots: "list[Slot] | tuple[Slot, ...]", horizon: int | None) -> None:
        t0 = time.perf_counter()
        if len(slots) == 1 and self._act_one is not None:
            actions: Any = (self._act_one(slots[0].observation, slots[0].env_id),)
        else:
            actions = self._policy.act_batch([s.observation for s in slots], [s.env_id for s in slots])
        elapsed = time.perf_counter() - t0
        self._policy_s.append(elapsed)
        if len(actions) != len(slots):
            raise RuntimeError(f"policy returned {len(actions)} actions for {len(slots)} observations")
        for slot, action in zip(slots, actions):
            enqueue(slot.queue, action, horizon, slot.timing)  # a simulated latency: late (rollout/latency.py)
            slot.latency_s += elapsed
            slot.calls += 1

    def close(self) -> None:
        if self.garbage is not None:
            self.garbage.release()
        for env in self._envs:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        if self._policy is not None and hasattr(self._policy, "close"):
            self._policy.close()


def final_state(env: Any, observation: dict[str, Any] | None) -> str | None:
    """The digest of the state an episode ended in (`EpisodeRecord.final_state`)."""
    import hashlib

    import numpy as np

    digest = with_defaults(env).state_digest()
    if digest is not None:
        return digest
    state = (observation or {}).get("observation/state")
    if state is None:
        return None
    return hashlib.sha256(np.ascontiguousarray(np.asarray(state, dtype=np.float64)).tobytes()).hexdigest()[:16]


def build_shard_runner(plan: RunPlan, out_dir: str | Path, **kwargs: Any) -> ShardRunner:
    """A runner whose env and policy come from the registries."""
    from evalfleet.plugins import load_registries
    from evalfleet.policies.base import POLICIES, PolicyContext, check_spec, policy_spec
    from evalfleet.sim.base import ENVIRONMENTS, environment_spec

    load_registries()
    run = plan.run
    env_entry = ENVIRONMENTS.get(run.environment.type)
    policy_entry = POLICIES.get(run.policy.type)
    if env_entry is None or policy_entry is None:
        missing = run.environment.type if env_entry is None else run.policy.type
        raise RuntimeError(f"Run {plan.name!r}: type {missing!r} is not installed")
    builder = run.environment_builder.model_dump()

    def make_env() -> Any:
        return env_entry.factory(run.environment.options(), builder)

    def make_policy() -> Any:
        # Called after the envs exist, so the policy learns the action size from a real one.
        context = PolicyContext(
            run=plan.name, task=plan.task, env_type=run.environment.type, env_options=run.environment.options(),
            action_dim=4 if runner._envs[0].action_dim is None else runner._envs[0].action_dim, seed=plan.base_seed,
        )
        policy = policy_entry.factory(run.policy.options(), context)
        try:  # before the first reset: a mismatch fails the Run at once, not as N error records
            env_spec = environment_spec(run.environment.type, run.environment.options(), runner._envs[0])
            check_spec(policy_spec(policy, run.policy.type, run.policy.options(), context), env_spec,
                       run=plan.name)
        except BaseException:
            if hasattr(policy, "close"):
                policy.close()
            raise
        return policy

    runner = ShardRunner(plan, out_dir, make_env=make_env, make_policy=make_policy, **kwargs)
    return runner


# How many Runs' envs and policies a worker keeps open. Shards come earliest-episodes-first across Runs
# (A0 B0 C0 D0 A100 ...), so a worker that kept only the current Run's would rebuild an env at nearly
# every shard; keeping a few bounds memory and builds each env about once per worker.
KEEP_RUNNERS = 4


def run_shards(
    plans: dict[str, RunPlan], shards: Iterable[Shard], out_dir: str | Path, *, keep_runners: int = KEEP_RUNNERS,
    **kwargs: Any,
) -> list[ShardOutcome]:
    """Run shards in order, reusing one env/policy set per Run (the common worker loop); the sets of the
    `keep_runners` most recently used Runs stay open, older ones are closed."""
    from evalfleet.policies.base import SpecMismatchError
    from evalfleet.sim.spec_checks import EnvironmentOptionsError

    outcomes = []
    runners: dict[str, ShardRunner] = {}  # least recently used first
    refused: dict[str, str] = {}  # Run -> why its policy does not fit its environment
    unbuildable: dict[str, str] = {}  # Run -> why its environment cannot be built from its options
    stop: threading.Event | None = kwargs.get("stop")
    kwargs["in_flight"] = runner_in_flight(kwargs.get("heartbeat"), plans, Path(out_dir))  # rollout/inflight.py
    try:
        for shard in shards:
            if stop is not None and stop.is_set():
                break
            if shard.run in refused:
                outcomes.append(ShardOutcome(shard.run, shard.id, spec_mismatch=refused[shard.run]))
                continue
            if shard.run in unbuildable:
                outcomes.append(ShardOutcome(shard.run, shard.id, environment_error=unbuildable[shard.run]))
                continue
            runner = runners.pop(shard.run, None)
            if runner is None:
                while len(runners) >= max(1, keep_runners):
                    runners.pop(next(iter(runners))).close()
                runner = build_shard_runner(plans[shard.run], out_dir, **kwargs)
            runners[shard.run] = runner  # now the most recently used
            try:
                outcomes.append(runner.run_shard(shard))
            except SpecMismatchError as exc:
                refused[shard.run] = exc.line()
                runners.pop(shard.run).close()
                outcomes.append(ShardOutcome(shard.run, shard.id, spec_mismatch=refused[shard.run]))
            except EnvironmentOptionsError as exc:  # the Experiment's fault: retrying would fail the same way
                unbuildable[shard.run] = f"Run {shard.run!r}: {exc.line()}"
                runners.pop(shard.run).close()
                outcomes.append(ShardOutcome(shard.run, shard.id, environment_error=unbuildable[shard.run]))
    finally:
        for runner in runners.values():
            runner.close()
    return outcomes
