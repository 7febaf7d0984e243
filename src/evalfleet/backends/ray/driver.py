"""The driver side of a Ray evaluation (`RayRun`, issue #57): worker tasks that each start one runner and take
shards from the shard queue actor until their pool is done (`worker_task.run_worker`), a pool of workers per policy
server in that server's placement group and one for the unserved Runs; the record lines the tasks push drained
from the sink into OUT/<run>/parts/ (after the files of their episodes, into OUT/<run>/). The sink and the
servers belong to the serve around it (`serving.RayServing`).

The queue gets every shard of the plan at once, or, under sequential stopping, each look as the driver's
releaser puts it in the job's feed (execution/waves.py); a pool is closed once none of its Runs needs more. A
pool that has shards waiting gets workers, up to its room (its group's runner bundles; the workers the plan was
made for), its server started again if it was stopped. While a server's group waits for room, idle workers end
and the servers no worker uses are stopped (serving.py), so a small cluster never waits on idle workers."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from evalfleet.backends.ray.common import append_text, import_ray, write_episode_file, write_timings
from evalfleet.backends.ray.serving import RayServing
from evalfleet.backends.ray.shard_queue import UNSERVED, ShardQueue
from evalfleet.backends.ray.worker_task import run_worker
from evalfleet.execution.backends import WorkerResult, ordered_shards
from evalfleet.execution.shard_feed import ShardFeed
from evalfleet.execution.watchdog import WatchdogConfig, WatchdogResult
from evalfleet.experiment.plan import Plan, Shard
from evalfleet.layout import part_path, ray_task_log

WORKER_TASK_RETRIES = 3  # Ray runs a worker task again when its worker process or node died
CANCEL_GRACE_S = 15.0  # after Ctrl-C, how long tasks get to stop their runners before they are killed
POLL_S = 0.25  # how often the driver drains the sink, feeds the queue and looks at its workers


@dataclasses.dataclass
class RayRun:
    plan: Plan  # the whole plan: the shards of a fixed one, or every shard the feed may release
    out: Path
    watchdog: WatchdogConfig
    serving: RayServing  # the sink and the servers, opened by the backend's serve
    workers: int  # the room of the unserved pool: the workers the plan was made for
    feed: ShardFeed | None = None  # sequential stopping's looks, as the releaser puts them in
    stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    results: list[WorkerResult] = dataclasses.field(default_factory=list)
    crash: BaseException | None = None
    _yielding: bool = False  # what the queue was last told: idle workers end (a group waits for room)

    def execute(self) -> None:
        try:
            self._execute()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            self.crash = exc

    def _pools(self) -> dict[str, str]:
        """Run → its pool: the id of its server, or UNSERVED."""
        pool_of = {name: UNSERVED for name in self.plan.runs}
        for key, sp in self.serving.plans.items():
            for run in sp.runs:
                pool_of[run] = key
        return pool_of

    def _documents(self, pool_of: dict[str, str]) -> dict[str, str]:
        """Pool → the Experiment its workers load: its Runs alone, each without its stopping rule (which names
        other Runs and stays with the driver; its num_episodes already is the cap, experiment/stopping.py)."""
        document = self.plan.experiment.resolved_document()
        docs = {}
        for pool in set(pool_of.values()):
            runs = {name: {k: v for k, v in document["runs"][name].items() if k != "stopping"}
                    for name in self.plan.runs if pool_of[name] == pool}
            docs[pool] = yaml.safe_dump({**document, "runs": runs}, sort_keys=False)
        return docs

    def _execute(self) -> None:
        ray = import_ray()
        serving, sink = self.serving, self.serving.sink
        pool_of = self._pools()
        documents = self._documents(pool_of)
        queue = ray.remote(num_cpus=0)(ShardQueue).remote(pool_of)
        fed = 0  # shards of the feed already put in the queue
        if self.feed is None:
            ray.get(queue.put.remote([(s.run, s.start, s.stop) for s in ordered_shards(self.plan)]))
            ray.get(queue.close.remote())
        room = {pool: serving.bundles.get(pool, self.workers) for pool in documents}
        live: dict[Any, tuple[int, str]] = {}  # task ref → (worker, pool)
        config = dataclasses.asdict(self.watchdog)
        task = ray.remote(num_cpus=1, max_retries=WORKER_TASK_RETRIES)(run_worker)
        closed: set[str] = set()
        next_worker = 0
        while True:
            if self.stop.is_set():
                self._cancel(ray, sink, list(live))
                break
            if self.feed is not None:
                # What is finished is read before what was released: a shard released before a Run's end is put.
                finished = set(pool_of) if self.feed.closed else self.feed.finished_runs
                done = {pool for pool in documents if all(r in finished for r, p in pool_of.items() if p == pool)}
                released = self.feed.shards
                if released[fed:]:
                    ray.get(queue.put.remote([(s.run, s.start, s.stop) for s in released[fed:]]))
                fed = len(released)
                if done - closed:
                    ray.get(queue.close.remote(sorted(done - closed)))
                    closed |= done
            state = ray.get(queue.state.remote())
            if all(closed_ and not waiting for waiting, closed_ in state.values()) and not live:
                break
            for pool, (waiting, _) in state.items():
                busy = sum(1 for _, p in live.values() if p == pool)
                for _ in range(min(waiting, room[pool] - busy)):
                    if pool != UNSERVED and pool not in serving.servers:
                        serving.start_server(ray, pool)  # stopped to make room, or after a worker gave up
                    group, address = serving.served_by(pool)
                    options: dict[str, Any] = {}
                    if group is not None:
                        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

                        options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(placement_group=group)
                    # `address` is an ObjectRef: Ray starts the task once the server answered where it listens.
                    ref = task.options(**options).remote(documents[pool], pool, next_worker, queue, sink, config,
                                                         address)
                    live[ref] = (next_worker, pool)
                    next_worker += 1
            done_refs, _ = ray.wait(list(live), num_returns=len(live), timeout=POLL_S) if live else ([], [])
            if not live:
                time.sleep(POLL_S)
            self._drain(ray, sink)
            for ref in done_refs:
                worker, pool = live.pop(ref)
                result = self._finished(ray, ref, queue, worker)
                if result is not None:
                    self.results.append(result)
                    if result.problem and self.feed is not None:
                        self.feed.close()  # its shard will not finish: nothing more is released
            self._release_servers(ray, queue, state, live)
        self._drain(ray, sink)

    def _finished(self, ray: Any, ref: Any, queue: Any, worker: int) -> WorkerResult | None:
        """How a worker task ended (None: it found nothing to run and started no runner)."""
        result = WorkerResult(worker, [])
        try:
            answer = ray.get(ref)
            if answer["watchdog"] is None:
                return None
            result.shards = [Shard(*s) for s in answer["shards"]]
            result.result = WatchdogResult(**answer["watchdog"])
            for shard in result.shards:
                self.serving.placements[(shard.run, shard.id)] = (answer.get("placement_group"), answer.get("server"))
            if answer.get("log_tail") and result.result.state != "completed":
                append_text(ray_task_log(self.out, result.shards[-1].run, result.shards[-1].id), answer["log_tail"])
            for run, files in (answer.get("timings") or {}).items():
                write_timings(self.out, run, files)
        except Exception as exc:  # noqa: BLE001 - a task that failed for good fails its Runs
            first = (str(exc).splitlines() or [""])[0]
            result.shards = [Shard(*s) for s in ray.get(queue.resume.remote(worker))]
            result.error = f"Ray task failed: {type(exc).__name__}: {first}"
        return result

    def _release_servers(self, ray: Any, queue: Any, state: dict[str, tuple[int, bool]],
                         live: dict[Any, tuple[int, str]]) -> None:
        """Stop each server whose pool is done and has no worker left. While a running server's group waits for
        room, idle workers end (the queue answers them "done") and the servers of pools without workers and
        without waiting shards are stopped; a later look that needs one starts it again."""
        serving = self.serving
        busy = {pool for _, pool in live.values()}
        for key in list(serving.servers):
            waiting, closed = state.get(key, (0, True))
            if closed and not waiting and key not in busy:
                serving.stop_server(ray, key)
        crowded = serving.waiting_groups(ray, [r for key in serving.servers for r in serving.server_runs[key]])
        if crowded != self._yielding:  # told the queue only when it changes, not at every poll
            ray.get(queue.set_yielding.remote(crowded))
            self._yielding = crowded
        if crowded:
            for key in list(serving.servers):
                if key not in busy and not state.get(key, (0, True))[0]:
                    serving.stop_server(ray, key)

    def _cancel(self, ray: Any, sink: Any, refs: list[Any]) -> None:
        """Interrupt every task (each stops its runner and pushes what it finished), keep their last records,
        then force-kill what has not ended after CANCEL_GRACE_S."""
        for ref in refs:
            ray.cancel(ref)
        deadline = time.monotonic() + CANCEL_GRACE_S
        left = refs
        while left and time.monotonic() < deadline:
            _, left = ray.wait(left, num_returns=len(left), timeout=0.5)
            self._drain(ray, sink)
        for ref in left:
            ray.cancel(ref, force=True)
        self._drain(ray, sink)

    def _drain(self, ray: Any, sink: Any) -> None:
        """The episode files the tasks pushed into OUT/<run>/ (trajectories: the task's folder is removed), then
        the record lines into OUT/<run>/parts/: a record written here always has its files."""
        files, lines = ray.get(sink.drain.remote())
        for run, rel, data in files:
            write_episode_file(self.out, run, rel, data)
        batches: dict[tuple[str, str], list[str]] = {}
        for run, shard_id, line in lines:
            batches.setdefault((run, shard_id), []).append(line)
        for (run, shard_id), lines in batches.items():
            path = part_path(self.out, run, shard_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines))
                f.flush()
