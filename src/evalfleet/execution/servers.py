"""Policy server lifecycle, shared by every backend.

`ServerSupervisor` owns one server process: start it (on a free port of `host`), wait until it is
healthy, keep it alive (a server that dies is restarted on the same port, so clients reconnect; episodes
hit by the outage are infrastructure errors and are retried), wire a client's options to it, stop it.
The local backend runs one supervisor per planned server (`LocalServers`); the Ray backend runs one
inside each server actor.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from evalfleet.errors import UserError
from evalfleet.layout import server_log_path
from evalfleet.serving.planning import ServerPlan, plan_server_groups

HEALTH_TIMEOUT_S = 120.0
CHECK_INTERVAL_S = 0.5


class ServerSupervisor:
    def __init__(self, binding: Any, options: dict[str, Any], context: Any, log_path: Path, *,
                 host: str | None = None, health_timeout_s: float = HEALTH_TIMEOUT_S,
                 log: Callable[[str], None] = lambda line: None, name: str = "server"):
        self.binding = binding
        self.options = options
        self.context = context
        self.log_path = log_path
        self.host_override = host
        self.health_timeout_s = health_timeout_s
        self.log = log
        self.name = name
        self.process: Any = None  # evalfleet.serving.process.ServerProcess
        self.restarts = 0
        self._stopping = threading.Event()
        self._keeper: threading.Thread | None = None

    @property
    def host(self) -> str:
        return self.process.host

    @property
    def port(self) -> int:
        return int(self.process.port)

    def launch(self) -> None:
        """Start the process; `wait_healthy` then waits for it (several servers start in parallel)."""
        from evalfleet.serving.bindings import server_process

        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        kwargs = {"host": self.host_override} if self.host_override else {}
        self.process = server_process(self.binding, self.options, self.context, self.log_path, **kwargs)
        self.process.start()

    def wait_healthy(self) -> None:
        self.process.wait_healthy(self.health_timeout_s)

    def start(self) -> tuple[str, int]:
        """Launch, wait until healthy, keep alive; (host, port)."""
        self.launch()
        self.wait_healthy()
        self.keep_alive()
        return self.host, self.port

    def keep_alive(self) -> None:
        self._keeper = threading.Thread(target=self._watch, daemon=True, name=f"{self.name}-keepalive")
        self._keeper.start()

    def _watch(self) -> None:
        while not self._stopping.wait(CHECK_INTERVAL_S):
            if self.process.is_alive():
                continue
            self.restarts += 1
            self.log(f"{self.name} died; restarting it on port {self.process.port} (restart {self.restarts})")
            try:
                self.process.restart(self.health_timeout_s)
            except Exception as exc:  # noqa: BLE001 - tried again on the next tick; the runners record errors
                self.log(f"{self.name} did not come back: {exc}")

    def wire(self, policy_options: dict[str, Any]) -> dict[str, Any]:
        """A client's policy options pointed at this server."""
        return self.binding.wire_client(dict(policy_options), self.host, self.port)

    def stop(self) -> None:
        self._stopping.set()
        if self._keeper is not None:
            self._keeper.join(timeout=5)
        if self.process is not None:
            try:
                self.process.stop()
            except Exception:  # noqa: BLE001 - stopping is best effort
                pass


@dataclass
class RunningServer:
    plan: ServerPlan
    supervisor: ServerSupervisor

    @property
    def process(self) -> Any:
        return self.supervisor.process


class LocalServers:
    """Every server a plan needs, on loopback of this machine, logs in `<run>/server.log`."""

    def __init__(self, runs: dict[str, Any], sharing: str, out: Path, seed: int = 0,
                 log: Callable[[str], None] = print):
        self.plans = plan_server_groups(runs, sharing, seed)
        self.out = out
        self.log = log
        self.servers: list[RunningServer] = []

    def __bool__(self) -> bool:
        return bool(self.plans)

    def start(self) -> None:
        for plan in self.plans:
            log_path = server_log_path(self.out, plan.runs[0])
            supervisor = ServerSupervisor(plan.binding, plan.options, plan.context, log_path, log=self.log,
                                          name=f"server {plan.id}")
            self.servers.append(RunningServer(plan, supervisor))
            supervisor.launch()
            self.log(f"server {plan.id} ({plan.binding.protocol}) for {', '.join(plan.runs)} on "
                     f"{supervisor.host}:{supervisor.port}, log {log_path}")
        pending = list(self.servers)
        deadline = time.monotonic() + max(s.supervisor.health_timeout_s for s in pending) if pending else 0.0
        while pending:  # all at once: one that exits is reported at once, not after another's timeout
            for server in list(pending):
                proc = server.supervisor.process
                try:
                    proc.raise_if_exited()
                    if proc.healthy(timeout_s=0.5):
                        pending.remove(server)
                    elif time.monotonic() >= deadline:
                        raise proc.not_ready_error(server.supervisor.health_timeout_s)
                except Exception as exc:  # noqa: BLE001 - a server that cannot start is the user's to fix
                    self.stop()
                    raise UserError(f"the policy server for {', '.join(server.plan.runs)} did not become healthy:"
                                    f" {exc}", where=str(server.supervisor.log_path)) from None
            if pending:
                time.sleep(CHECK_INTERVAL_S / 5)
        for server in self.servers:
            server.supervisor.keep_alive()

    def wired_document(self, document: dict[str, Any]) -> dict[str, Any]:
        """The resolved Experiment with every served Run's client pointed at its server."""
        runs = dict(document["runs"])
        for server in self.servers:
            for name in server.plan.runs:
                run = dict(runs[name])
                run["policy"] = server.supervisor.wire(run["policy"])
                runs[name] = run
        return {**document, "runs": runs}

    def stop(self) -> None:
        for server in self.servers:
            server.supervisor.stop()
