"""Policy servers in the local backend: start the ones the plan needs on free loopback ports, wait
until healthy, log to `<run>/server.log`, restart any that dies (clients reconnect to the same port;
episodes hit by the outage are infrastructure errors and are retried), stop them at the end."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalfleet.errors import UserError
from evalfleet.serving.planning import ServerPlan, plan_server_groups

HEALTH_TIMEOUT_S = 120.0
CHECK_INTERVAL_S = 0.5


@dataclass
class RunningServer:
    plan: ServerPlan
    process: Any  # evalfleet.serving.process.ServerProcess
    restarts: int = 0


class LocalServers:
    def __init__(self, runs: dict[str, Any], sharing: str, out: Path, seed: int = 0, log: Any = print):
        self.plans = plan_server_groups(runs, sharing, seed)
        self.out = out
        self.log = log
        self.servers: list[RunningServer] = []
        self._stop = threading.Event()
        self._monitor: threading.Thread | None = None

    def __bool__(self) -> bool:
        return bool(self.plans)

    def start(self) -> None:
        from evalfleet.serving.bindings import server_process

        for plan in self.plans:
            log_path = self.out / plan.runs[0] / "server.log"
            log_path.parent.mkdir(parents=True, exist_ok=True)
            process = server_process(plan.binding, plan.options, plan.context, log_path)
            self.servers.append(RunningServer(plan, process))
            process.start()
            self.log(f"server {plan.id} ({plan.binding.protocol}) for {', '.join(plan.runs)} on "
                     f"{process.host}:{process.port}, log {log_path}")
        for server in self.servers:
            try:
                server.process.wait_healthy(HEALTH_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - a server that cannot start is the user's to fix
                self.stop()
                raise UserError(f"the policy server for {', '.join(server.plan.runs)} did not become healthy: {exc}",
                                where=str(server.process.log_path)) from None
        self._monitor = threading.Thread(target=self._watch, daemon=True, name="server-monitor")
        self._monitor.start()

    def wired_document(self, document: dict[str, Any]) -> dict[str, Any]:
        """The resolved Experiment with every served Run's client pointed at its server."""
        runs = dict(document["runs"])
        for server in self.servers:
            for name in server.plan.runs:
                run = dict(runs[name])
                run["policy"] = server.plan.binding.wire_client(dict(run["policy"]), server.process.host,
                                                                server.process.port)
                runs[name] = run
        return {**document, "runs": runs}

    def _watch(self) -> None:
        while not self._stop.wait(CHECK_INTERVAL_S):
            for server in self.servers:
                if self._stop.is_set() or server.process.is_alive():
                    continue
                server.restarts += 1
                self.log(f"server {server.plan.id} died; restarting it on port {server.process.port} "
                         f"(restart {server.restarts})")
                try:
                    server.process.restart(HEALTH_TIMEOUT_S)
                except Exception as exc:  # noqa: BLE001 - keep watching; the runners record errors
                    self.log(f"server {server.plan.id} did not come back: {exc}")

    def stop(self) -> None:
        self._stop.set()
        if self._monitor is not None:
            self._monitor.join(timeout=5)
        for server in self.servers:
            try:
                server.process.stop()
            except Exception:  # noqa: BLE001 - stopping is best effort
                pass
