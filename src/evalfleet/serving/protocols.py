"""The wire protocols evalfleet speaks, one registry entry each: its server, the remote-client policy type that
talks to it, its health check and its default port. Each protocol module registers its own (`openpi`,
`gr00t`, `vlaeval`); `evalfleet serve`, `process` (health checks, servers in a thread) and the server bindings
look them up here instead of asking "which protocol is this?".

    PROTOCOLS.register("openpi", summary=...)(lambda: WireProtocol(...))   # via register_protocol
    wire_protocol("openpi").server(policy, host=..., port=..., api_key=..., max_batch=..., ...)

Every server takes the same keywords (host, port, api_key, max_batch, max_wait_ms, max_message_bytes and
`spec`, the served policy's declared spec, which each protocol announces its own way or not at all) and has
`async serve(stop, ready)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from evalfleet.registry import Registry


@dataclass(frozen=True)
class WireProtocol:
    name: str
    server: Callable[..., Any]  # (policy, *, host, port, api_key, max_batch, max_wait_ms, max_message_bytes, spec)
    client: str  # the registered remote-client policy type that speaks it
    healthy: Callable[..., bool]  # (host, port, *, api_key, timeout_s) -> one health probe answered
    default_port: int
    summary: str = ""


PROTOCOLS: Registry[WireProtocol] = Registry("wire protocol")


def register_protocol(protocol: WireProtocol) -> WireProtocol:
    PROTOCOLS.register(protocol.name, summary=protocol.summary)(lambda p=protocol: p)
    return protocol


def wire_protocol(name: str) -> WireProtocol:
    """The registered protocol `name`; a ValueError naming the known ones otherwise."""
    entry = PROTOCOLS.get(name)
    if entry is None:
        raise ValueError(f"unknown protocol {name!r} (known: {', '.join(PROTOCOLS.names())})")
    return entry.factory()
