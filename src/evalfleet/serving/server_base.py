"""What every policy server (openpi, vla-eval, GR00T) is made of: the policy, where it binds, the key clients
must send, the bound on one message, and the `PolicyWorker` that runs (and batches) the policy's calls.
A server's constructor takes the keywords `protocols.WireProtocol.server` documents; `serve(stop, ready)`
runs until `stop` is set, calls `ready(host, port)` once it listens and closes the worker at the end."""

from __future__ import annotations

from typing import Any

from evalfleet.serving.batching import PolicyWorker
from evalfleet.serving.common import DEFAULT_MAX_MESSAGE_MB


class PolicyServer:
    def __init__(
        self,
        policy: Any,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        max_batch: int = 1,
        max_wait_ms: float = 0.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_MB * 2**20,
    ):
        self.policy = policy
        self.host, self.port, self.api_key = host, port, api_key
        self.max_batch, self.max_message_bytes = max_batch, max_message_bytes
        self.worker = PolicyWorker(policy, max_batch=max_batch, max_wait_ms=max_wait_ms)
        self.worker.active_clients = self.active_clients
        self.bound_port: int | None = None

    def active_clients(self) -> int:
        """How many clients a batch may wait for (the worker stops waiting once that many are in)."""
        raise NotImplementedError
