"""What the two websocket protocols (openpi, vla-eval) share, both sides.

Server: `WebsocketServer` binds, answers its health path without a key, checks the key at the handshake (401
before any frame is exchanged), bounds every message (`max_message_bytes`), counts connections (one env
each, its own `env_id`) and stops cleanly; a protocol writes only `converse(ws, env_id)` (one connection's
frames) and `health_response`. Client: `connect` (the same websocket options on every websockets version,
never through a proxy, the key in `Authorization: Api-Key <key>`) and `http_healthy` (one GET of a health
path). websockets itself is imported only when a server or client runs.
"""

from __future__ import annotations

import asyncio
import hmac
import http
import http.client
import itertools
from typing import Any, Callable

from evalfleet.serving.server_base import PolicyServer


def api_key_header(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Api-Key {api_key}"}


def key_accepted(request: Any, api_key: str) -> bool:
    """Exactly one Authorization header, equal to `Api-Key <key>` (compared in constant time). More than one
    is a refusal, not a crash."""
    sent = request.headers.get_all("Authorization")
    expected = f"Api-Key {api_key}".encode()
    return len(sent) == 1 and hmac.compare_digest(sent[0].encode("utf-8", "replace"), expected)


class WebsocketServer(PolicyServer):
    """A policy server on one websocket port. Subclasses set `health_path` and `serve_options` (more keywords
    for websockets' `serve`) and write `health_response(connection)` and `async converse(ws, env_id)`."""

    health_path = "/health"
    serve_options: dict[str, Any] = {}

    def __init__(self, policy: Any, **kwargs: Any):
        super().__init__(policy, **kwargs)
        self._env_ids = itertools.count()
        self._connections = 0

    def active_clients(self) -> int:
        return self._connections

    def health_response(self, connection: Any) -> Any:
        raise NotImplementedError

    def refused(self, connection: Any) -> None:
        """Called when a handshake is refused for its key (before the 401 goes out)."""

    async def converse(self, ws: Any, env_id: int) -> None:
        raise NotImplementedError

    def _process_request(self, connection: Any, request: Any) -> Any:
        if request.path.split("?", 1)[0] == self.health_path:
            return self.health_response(connection)
        if self.api_key and not key_accepted(request, self.api_key):
            self.refused(connection)
            return connection.respond(http.HTTPStatus.UNAUTHORIZED, "missing or wrong API key\n")
        return None

    async def _handle(self, ws: Any) -> None:
        import websockets

        env_id = next(self._env_ids)
        self._connections += 1
        try:
            await self.converse(ws, env_id)
        except websockets.ConnectionClosed:
            pass
        finally:
            self._connections -= 1

    async def serve(self, stop: asyncio.Event, ready: Callable[[str, int], None] | None = None) -> None:
        from websockets.asyncio.server import serve

        async with serve(self._handle, self.host, self.port, process_request=self._process_request,
                         compression=None, max_size=self.max_message_bytes, **self.serve_options) as server:
            self.bound_port = server.sockets[0].getsockname()[1]
            if ready is not None:
                ready(self.host, self.bound_port)
            await stop.wait()
            server.close()
            await server.wait_closed()
        await self.worker.aclose()


def http_healthy(host: str, port: int, path: str, timeout_s: float = 1.0) -> bool:
    """True when `GET path` answers 200."""
    try:
        conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
        try:
            conn.request("GET", path)
            return conn.getresponse().status == 200
        finally:
            conn.close()
    except (OSError, http.client.HTTPException):
        return False


# ===================================================================== client


def websocket_uri(host: str, port: int) -> str:
    scheme = "" if host.startswith(("ws://", "wss://")) else "ws://"
    return f"{scheme}{host}:{port}"


def _connect_compat(connect: Any) -> dict[str, Any]:
    """Keyword arguments that keep `websockets.sync.client.connect` returning a plain connection and
    never going through a proxy, across websockets versions (proxy: 15+, legacy: 17+)."""
    import inspect

    params = inspect.signature(connect).parameters
    extra: dict[str, Any] = {}
    if "proxy" in params:
        extra["proxy"] = None
    if "legacy" in params:
        extra["legacy"] = True
    return extra


def connect(uri: str, *, open_timeout: float, max_message_mb: float, api_key: str | None,
            refused: Callable[[int], Exception], **options: Any) -> Any:
    """A synchronous websocket to `uri` (no compression, messages up to `max_message_mb`, the key sent when
    given; `options`: more keywords for websockets' `connect`). A handshake the server refuses for the key
    (HTTP 401 or 403) raises `refused(status)`: a configuration problem, never retried."""
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    try:
        return connect(uri, **_connect_compat(connect), open_timeout=open_timeout, compression=None,
                       max_size=int(max_message_mb * 2**20),
                       additional_headers=api_key_header(api_key) if api_key else None, **options)
    except InvalidStatus as exc:
        if exc.response.status_code in (401, 403):
            raise refused(exc.response.status_code) from None
        raise
