"""The driver side of a Ray evaluation (`RayRun`): one `execute` (a wave, under sequential stopping) as Ray tasks,
one per pending shard, scheduled in the placement groups of their Runs' servers, and the record lines the tasks
push drained from the sink into OUT/<run>/parts/ (after the files of their episodes, into OUT/<run>/). The sink
and the servers belong to the serve around it (`serving.RayServing`), so they outlive the wave."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from evalfleet.execution.backends import WorkerResult, ordered_shards
from evalfleet.backends.ray.common import append_text, import_ray, write_episode_file, write_timings
from evalfleet.backends.ray.serving import RayServing
from evalfleet.backends.ray.shard_task import run_shard_on_worker
from evalfleet.execution.watchdog import WatchdogConfig, WatchdogResult
from evalfleet.experiment.plan import Plan, Shard
from evalfleet.layout import part_path, ray_task_log

SHARD_TASK_RETRIES = 3  # Ray relaunches a shard task whose worker process or node died
CANCEL_GRACE_S = 15.0  # after Ctrl-C, how long tasks get to stop their runners before they are killed


@dataclasses.dataclass
class RayRun:
    plan: Plan  # this execute's plan: its shards are this wave's
    out: Path
    watchdog: WatchdogConfig
    serving: RayServing  # the sink and the servers, opened by the backend's serve
    stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    results: list[WorkerResult] = dataclasses.field(default_factory=list)
    crash: BaseException | None = None

    def execute(self) -> None:
        try:
            self._execute()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            self.crash = exc

    def _execute(self) -> None:
        ray = import_ray()
        serving, sink = self.serving, self.serving.sink
        document = self.plan.experiment.resolved_document()
        shards = ordered_shards(self.plan)
        serving.begin_wave(ray, shards)
        pending: dict[Any, tuple[int, Shard]] = {}
        left_per_run = {name: sum(1 for s in shards if s.run == name) for name in self.plan.runs}
        config = dataclasses.asdict(self.watchdog)
        task = _shard_task(ray)
        for index, shard in enumerate(shards):
            options: dict[str, Any] = {}
            group, address = serving.served(shard.run)
            if group is not None:
                from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

                options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(placement_group=group)
            # The task's Experiment holds this Run alone: its stopping rule (which names other Runs) stays
            # with the driver; its num_episodes already is the cap (experiment/stopping.py).
            alone = {k: v for k, v in document["runs"][shard.run].items() if k != "stopping"}
            run_doc = yaml.safe_dump({**document, "runs": {shard.run: alone}}, sort_keys=False)
            # `address` is an ObjectRef: Ray starts the task once the server answered where it listens.
            ref = task.options(**options).remote(run_doc, shard.run, shard.start, shard.stop, sink, config, address)
            pending[ref] = (index, shard)
        self.results = [WorkerResult(i, [s]) for i, s in enumerate(shards)]
        while pending:
            if self.stop.is_set():
                self._cancel(ray, sink, list(pending))
                break
            done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0.5)
            self._drain(ray, sink)
            for ref in done:
                index, shard = pending.pop(ref)
                self._finished(ray, ref, shard, self.results[index])
                left_per_run[shard.run] -= 1
            self._release_servers(ray, left_per_run)
        self._drain(ray, sink)

    def _finished(self, ray: Any, ref: Any, shard: Shard, result: WorkerResult) -> None:
        try:
            answer = ray.get(ref)
            result.result = WatchdogResult(**answer["watchdog"])
            self.serving.placements[(shard.run, shard.id)] = (answer.get("placement_group"), answer.get("server"))
            if answer.get("log_tail") and result.result.state != "completed":
                append_text(ray_task_log(self.out, shard.run, shard.id), answer["log_tail"])
            write_timings(self.out, shard.run, answer.get("timings") or {})
        except Exception as exc:  # noqa: BLE001 - a task that failed for good fails its Run
            first = (str(exc).splitlines() or [""])[0]
            result.error = f"Ray task failed: {type(exc).__name__}: {first}"

    def _release_servers(self, ray: Any, left_per_run: dict[str, int]) -> None:
        """Stop each server whose Runs' shards of this wave are done, unless a later wave may need it; a kept
        one is stopped too while another server's group of this wave waits for room (serving.py)."""
        serving = self.serving
        idle = [key for key, runs in serving.server_runs.items() if all(left_per_run[r] == 0 for r in runs)]
        kept = [key for key in idle if serving.may_return(key)]
        for key in idle:
            if key not in kept:
                serving.stop_server(ray, key)
        if kept and serving.waiting_groups(ray, [r for r, left in left_per_run.items() if left]):
            for key in kept:
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


# Made per run, not cached: a remote function made for one Ray session does not outlive it.
def _shard_task(ray: Any) -> Any:
    return ray.remote(num_cpus=1, max_retries=SHARD_TASK_RETRIES)(run_shard_on_worker)
