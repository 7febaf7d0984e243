"""The policy server actor of a served Run: the server process on the actor's node, restarted on its port."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from evalfleet.layout import SERVER_LOG

SERVER_START_TIMEOUT_S = 300.0


class PolicyServer:
    """A policy server process on this actor's node, kept alive (restarted on the same port) until stop()."""

    def __init__(self, policy_type: str, options: dict[str, Any], context: dict[str, Any]):
        self.policy_type = policy_type
        self.options = options
        self.context = context
        self.supervisor: Any = None  # execution.servers.ServerSupervisor
        self.log_dir = Path(tempfile.mkdtemp(prefix="evalfleet-ray-server-"))

    def start(self) -> tuple[str, int]:
        import ray

        from evalfleet.execution.servers import ServerSupervisor
        from evalfleet.plugins import load_registries
        from evalfleet.policies.base import PolicyContext
        from evalfleet.serving.bindings import binding_for

        load_registries()
        self.supervisor = ServerSupervisor(binding_for(self.policy_type), self.options, PolicyContext(**self.context),
                                           self.log_dir / SERVER_LOG, host=ray.util.get_node_ip_address(),
                                           health_timeout_s=SERVER_START_TIMEOUT_S)
        return self.supervisor.start()

    def pid(self) -> int | None:
        return self.supervisor.process.pid if self.supervisor else None

    def info(self) -> dict[str, Any]:
        import ray

        running = self.supervisor is not None
        return {"pid": self.pid(), "host": self.supervisor.host if running else None,
                "port": self.supervisor.port if running else None,
                "restarts": self.supervisor.restarts if running else 0,
                "node": ray.get_runtime_context().get_node_id(),
                "placement_group": ray.get_runtime_context().get_placement_group_id()}

    def stop(self) -> str:
        """Stop the server for good; its log."""
        if self.supervisor:
            self.supervisor.stop()
        try:
            return (self.log_dir / SERVER_LOG).read_text(errors="replace")
        except OSError:
            return ""
        finally:
            shutil.rmtree(self.log_dir, ignore_errors=True)
