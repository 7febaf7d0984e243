"""What one `RayBackend.serve(job)` holds for its `execute` (`RayServing`): the record sink and the policy
servers of served Runs, each in its placement group (bundle 0 the server, the others room for the pool of worker
tasks that run its Runs: driver.py). A server (on a cluster: a GPU model loading) starts once and serves every
look of sequential stopping, as the local backend's servers do; it is stopped once its pool is done (its Runs are
fixed-N and run, or decided), or when the serve ends. A kept server never blocks another: while a group cannot
be placed (a small cluster that fits one group at a time), the servers no worker uses are stopped and their groups
removed, and a later look that needs one starts it again (`start_server`). A server that dies meanwhile is
restarted on its port by its actor's `ServerSupervisor`."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterable

from evalfleet.execution.backends import ordered_shards
from evalfleet.backends.ray.common import append_text
from evalfleet.backends.ray.policy_server import PolicyServer
from evalfleet.backends.ray.sink import RecordSink
from evalfleet.experiment.plan import Plan
from evalfleet.layout import internal_dir, server_log_path


def existing_lines(out: Path, run: str) -> list[str]:
    """Every record line a Run's logs hold now (merged file first, then the parts)."""
    from evalfleet.rollout.records import run_logs

    lines: list[str] = []
    for path in run_logs(out, run):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        lines += [line for line in text.splitlines() if line.strip()]
    return lines


@dataclasses.dataclass
class RayServing:
    plan: Plan  # the whole plan: every wave's shards lie in it
    out: Path
    sink: Any = None  # the RecordSink actor
    plans: dict[str, Any] = dataclasses.field(default_factory=dict)  # server id → serving.planning.ServerPlan
    bundles: dict[str, int] = dataclasses.field(default_factory=dict)  # server id → its group's runner bundles
    servers: dict[str, Any] = dataclasses.field(default_factory=dict)  # server id → PolicyServer actor (running)
    server_runs: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # running server id → its Runs
    server_groups: dict[str, Any] = dataclasses.field(default_factory=dict)  # running server id → its group
    addresses: dict[str, Any] = dataclasses.field(default_factory=dict)  # running server id → ref of (host, port)
    started: dict[str, int] = dataclasses.field(default_factory=dict)  # server id → how many times it was started
    # (run, shard id) → (placement group id, [host, port] of the server the task used), over every wave
    placements: dict[tuple[str, str], Any] = dataclasses.field(default_factory=dict)

    def open(self, ray: Any) -> None:
        """The sink (holding every record line already written) and every planned server, without waiting: a
        group waits for resources and the shard tasks wait for their server's address."""
        from evalfleet.serving.planning import plan_server_groups

        internal_dir(self.out).mkdir(parents=True, exist_ok=True)
        self.sink = _sink_class(ray).remote({name: existing_lines(self.out, name) for name in self.plan.runs})
        exp = self.plan.experiment.experiment
        shards = ordered_shards(self.plan)
        cluster_cpus = ray.cluster_resources().get("CPU", 1)
        for sp in plan_server_groups({n: rp.run for n, rp in self.plan.runs.items()}, exp.server_sharing, exp.seed):
            self.plans[sp.id] = sp
            its_shards = sum(1 for s in shards if s.run in sp.runs)
            self.bundles[sp.id] = max(1, min(its_shards, int(cluster_cpus - sp.binding.resources(sp.options).cpus)))
        for key in self.plans:
            self.start_server(ray, key)

    def served_by(self, key: str) -> tuple[Any, Any]:
        """(placement group, ref of the server's host/port) of a running server, else (None, None)."""
        if key not in self.servers:
            return None, None
        return self.server_groups[key], self.addresses[key]

    def waiting_groups(self, ray: Any, runs: Iterable[str]) -> bool:
        """Whether the placement group of a running server of one of these Runs is not placed yet."""
        from ray.util.placement_group import placement_group_table

        wanted = set(runs)
        return any(placement_group_table(self.server_groups[key]).get("state") != "CREATED"
                   for key, its in self.server_runs.items() if wanted.intersection(its))

    def start_server(self, ray: Any, key: str) -> None:
        """A placement group (bundle 0: the server, then room for runner tasks) and the server actor in it."""
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        sp = self.plans[key]
        res = sp.binding.resources(sp.options)
        server_bundle: dict[str, float] = {"CPU": float(res.cpus)}
        if res.gpus:
            server_bundle["GPU"] = float(res.gpus)
        group = placement_group([server_bundle] + [{"CPU": 1.0}] * self.bundles[key], strategy="PACK",
                                name=f"evalfleet-{sp.id}")
        actor = _server_class(ray).options(
            num_cpus=float(res.cpus), num_gpus=float(res.gpus),
            scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=group,
                                                                 placement_group_bundle_index=0),
        ).remote(sp.binding.policy_type, sp.options, dataclasses.asdict(sp.context))
        self.server_groups[key], self.server_runs[key], self.servers[key] = group, list(sp.runs), actor
        self.addresses[key] = actor.start.remote()
        self.started[key] = self.started.get(key, 0) + 1

    def stop_server(self, ray: Any, key: str) -> None:
        """Stop a server, keep its log beside its first Run's records (as the local backend does), free its group."""
        from ray.util.placement_group import remove_placement_group

        actor = self.servers.pop(key, None)
        runs = self.server_runs.pop(key, [])
        self.addresses.pop(key, None)
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

    def close(self, ray: Any) -> None:
        for key in list(self.servers):
            self.stop_server(ray, key)
        if self.sink is not None:
            ray.kill(self.sink)
            self.sink = None


# Made per serve, not cached: a remote class made for one Ray session does not outlive it.
def _sink_class(ray: Any) -> Any:
    return ray.remote(num_cpus=0)(RecordSink)


def _server_class(ray: Any) -> Any:
    return ray.remote(max_restarts=0)(PolicyServer)
