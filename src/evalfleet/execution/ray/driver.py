"""The driver side of a Ray evaluation (`RayRun`): every pending shard as a Ray task, the policy servers of
served Runs in placement groups, the record lines the tasks push drained from the sink into OUT/<run>/parts/."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from evalfleet.execution.backends import WorkerResult, ordered_shards
from evalfleet.execution.ray.common import append_text, import_ray
from evalfleet.execution.ray.policy_server import PolicyServer
from evalfleet.execution.ray.shard_task import run_shard_on_worker
from evalfleet.execution.ray.sink import RecordSink
from evalfleet.execution.watchdog import WatchdogConfig, WatchdogResult
from evalfleet.experiment.plan import Plan, Shard
from evalfleet.layout import internal_dir, part_path, ray_task_log, server_log_path

SHARD_TASK_RETRIES = 3  # Ray relaunches a shard task whose worker process or node died
CANCEL_GRACE_S = 15.0  # after Ctrl-C, how long tasks get to stop their runners before they are killed


def existing_lines(out: Path, run: str) -> list[str]:
    """Every record line a Run's logs hold now (merged file first, then the parts)."""
    from evalfleet.rollout.runner import run_log_files

    lines: list[str] = []
    for path in run_log_files(out, run):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        lines += [line for line in text.splitlines() if line.strip()]
    return lines


@dataclasses.dataclass
class RayRun:
    plan: Plan
    out: Path
    watchdog: WatchdogConfig
    stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    results: list[WorkerResult] = dataclasses.field(default_factory=list)
    crash: BaseException | None = None
    servers: dict[str, Any] = dataclasses.field(default_factory=dict)  # server id → PolicyServer actor
    server_runs: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # server id → its Runs
    server_groups: dict[str, Any] = dataclasses.field(default_factory=dict)  # server id → placement group
    # (run, shard id) → (placement group id, [host, port] of the server the task used) as the task reported them
    placements: dict[tuple[str, str], Any] = dataclasses.field(default_factory=dict)

    def execute(self) -> None:
        try:
            self._execute()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            self.crash = exc

    def _execute(self) -> None:
        ray = import_ray()
        internal_dir(self.out).mkdir(parents=True, exist_ok=True)
        sink = _sink_class(ray).remote({name: existing_lines(self.out, name) for name in self.plan.runs})
        document = self.plan.experiment.resolved_document()
        shards = ordered_shards(self.plan)
        pending: dict[Any, tuple[int, Shard]] = {}
        left_per_run = {name: sum(1 for s in shards if s.run == name) for name in self.plan.runs}
        config = dataclasses.asdict(self.watchdog)
        task = _shard_task(ray)
        try:
            served = self._start_servers(ray, shards)  # Run → (placement group, ref of the server's host/port)
            for index, shard in enumerate(shards):
                options: dict[str, Any] = {}
                group, address = served.get(shard.run, (None, None))
                if group is not None:
                    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

                    options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(placement_group=group)
                # The task's Experiment holds this Run alone: its stopping rule (which names other Runs) stays
                # with the driver; its num_episodes already is the cap (experiment/stopping.py).
                alone = {k: v for k, v in document["runs"][shard.run].items() if k != "stopping"}
                run_doc = yaml.safe_dump({**document, "runs": {shard.run: alone}}, sort_keys=False)
                # `address` is an ObjectRef: Ray starts the task once the server answered where it listens.
                ref = task.options(**options).remote(run_doc, shard.run, shard.start, shard.stop, sink, config,
                                                     address)
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
                    result = self.results[index]
                    try:
                        answer = ray.get(ref)
                        result.result = WatchdogResult(**answer["watchdog"])
                        self.placements[(shard.run, shard.id)] = (answer.get("placement_group"), answer.get("server"))
                        if answer.get("log_tail") and result.result.state != "completed":
                            append_text(ray_task_log(self.out, shard.run, shard.id), answer["log_tail"])
                    except Exception as exc:  # noqa: BLE001 - a task that failed for good fails its Run
                        first = (str(exc).splitlines() or [""])[0]
                        result.error = f"Ray task failed: {type(exc).__name__}: {first}"
                    left_per_run[shard.run] -= 1
                    for key, runs in list(self.server_runs.items()):
                        if all(left_per_run[r] == 0 for r in runs):
                            self._stop_server(ray, key)
            self._drain(ray, sink)
        finally:
            for key in list(self.servers):
                self._stop_server(ray, key)
            ray.kill(sink)

    def _start_servers(self, ray: Any, shards: list[Shard]) -> dict[str, tuple[Any, Any]]:
        """Create a placement group per planned server (bundle 0: the server, then room for runner tasks) and
        start the server actor in it, without waiting: a group waits for resources (e.g. until an earlier
        Run's group is removed) and the shard tasks wait for their server's address. Run → (group, address)."""
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from evalfleet.serving.planning import plan_server_groups

        exp = self.plan.experiment.experiment
        served: dict[str, tuple[Any, Any]] = {}
        server_plans = plan_server_groups({n: rp.run for n, rp in self.plan.runs.items()}, exp.server_sharing,
                                          exp.seed)
        cluster_cpus = ray.cluster_resources().get("CPU", 1)
        for sp in server_plans:
            res = sp.binding.resources(sp.options)
            server_bundle: dict[str, float] = {"CPU": float(res.cpus)}
            if res.gpus:
                server_bundle["GPU"] = float(res.gpus)
            its_shards = sum(1 for s in shards if s.run in sp.runs)
            runner_bundles = max(1, min(its_shards, int(cluster_cpus - res.cpus)))
            group = placement_group([server_bundle] + [{"CPU": 1.0}] * runner_bundles, strategy="PACK",
                                    name=f"evalfleet-{sp.id}")
            self.server_groups[sp.id] = group
            self.server_runs[sp.id] = list(sp.runs)
            actor = _server_class(ray).options(
                num_cpus=float(res.cpus), num_gpus=float(res.gpus),
                scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=group,
                                                                     placement_group_bundle_index=0),
            ).remote(sp.binding.policy_type, sp.options, dataclasses.asdict(sp.context))
            self.servers[sp.id] = actor
            address = actor.start.remote()
            for name in sp.runs:
                served[name] = (group, address)
        return served

    def _stop_server(self, ray: Any, key: str) -> None:
        """Stop a server, keep its log beside its first Run's records (as the local backend does), free its group."""
        from ray.util.placement_group import remove_placement_group

        actor = self.servers.pop(key, None)
        runs = self.server_runs.pop(key, [])
        if actor is not None:
            try:
                log = ray.get(actor.stop.remote(), timeout=60)
                if runs and log:
                    append_text(server_log_path(self.out, runs[0]), log)
            except Exception:  # noqa: BLE001 - the actor is killed below anyway
                pass
            ray.kill(actor)
        group = self.server_groups.pop(key, None)
        if group is not None:
            remove_placement_group(group)

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
        batches: dict[tuple[str, str], list[str]] = {}
        for run, shard_id, line in ray.get(sink.drain.remote()):
            batches.setdefault((run, shard_id), []).append(line)
        for (run, shard_id), lines in batches.items():
            path = part_path(self.out, run, shard_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines))
                f.flush()


# Made per run, not cached: a remote class or function made for one Ray session does not outlive it.
def _sink_class(ray: Any) -> Any:
    return ray.remote(num_cpus=0)(RecordSink)


def _server_class(ray: Any) -> Any:
    return ray.remote(max_restarts=0)(PolicyServer)


def _shard_task(ray: Any) -> Any:
    return ray.remote(num_cpus=1, max_retries=SHARD_TASK_RETRIES)(run_shard_on_worker)
