"""The openpi websocket protocol, both sides.

Wire protocol (as spoken by openpi's `WebsocketPolicyServer` and the `openpi-client` package):

* The client opens a websocket (optionally sending ``Authorization: Api-Key <key>``). The server first
  sends one binary frame: the policy metadata, msgpack in openpi's numpy encoding (see `msgpack_numpy`).
* Each request is one binary frame holding a msgpack observation dict; each reply is one binary frame
  holding a msgpack dict with ``actions`` and ``server_timing`` (``infer_ms``, and ``prev_total_ms`` from
  the second request on). One request in flight per connection.
* If the policy raises, the server sends the traceback as a *text* frame and closes with code 1011. A frame
  that does not decode (not msgpack, not a map, a bogus array) gets a ``bad request: ...`` text frame and
  close code 1007; a frame over the size limit, close code 1009.
* ``GET /healthz`` on the same port answers ``200 OK`` (no key needed: it only says the process is up).

evalfleet extensions, used only when the server's metadata advertises them (so a plain openpi server and
a plain openpi client never see them): metadata carries ``{"evalfleet": {"reset": true, ...}}`` and the
client may send ``{"__evalfleet_reset__": {"episode_seed": N}}`` to reset that connection's env state.
Each connection is one env on the server side (its own ``env_id``), so stateful policies keep state per
client, and concurrent connections are batched into one ``act_batch`` call (see `batching`).

Safe by default: binds 127.0.0.1, bounded message size (64 MiB), API key checked at the handshake
(401 before any frame is exchanged), no pickle.
"""

from __future__ import annotations

import http
import logging
import time
import traceback
from typing import Any

import numpy as np

from evalfleet.errors import InfrastructureError
from evalfleet.policies.base import POLICIES, SPEC_KEY, BasePolicy, PolicySpec, SpecMismatchError
from evalfleet.serving import msgpack_numpy, websocket
from evalfleet.serving.client_options import RemoteClientOptions, with_api_key
from evalfleet.serving.common import AuthenticationError, RemotePolicyError, validate_options
from evalfleet.serving.bindings import register_served_protocol
from evalfleet.serving.protocols import WireProtocol, register_protocol
from evalfleet.serving.reconnect import ReconnectPolicy
from evalfleet.serving.websocket import WebsocketServer

log = logging.getLogger(__name__)

RESET_KEY = "__evalfleet_reset__"
HEALTH_PATH = "/healthz"
DEFAULT_PORT = 8000
CLOSE_BAD_DATA = 1007  # RFC 6455: a message whose data is not what its type promises


# ===================================================================== server


class OpenpiServer(WebsocketServer):
    """Serve a policy over the openpi protocol. `await serve(stop)` runs until `stop` is set. `metadata`
    (default: the policy's own) is the first frame of every connection; a `spec` is added to it under
    `spec`, so clients check it against their Run's environment."""

    health_path = HEALTH_PATH
    serve_options = {"write_limit": 2**20}

    def __init__(self, policy: Any, *, metadata: dict[str, Any] | None = None, spec: PolicySpec | None = None,
                 **kwargs: Any):
        super().__init__(policy, **kwargs)
        base = dict(metadata if metadata is not None else getattr(policy, "metadata", None) or {})
        if spec is not None:
            base[SPEC_KEY] = spec.to_mapping()
        base["evalfleet"] = {"protocol": "openpi", "reset": True, "max_batch": self.max_batch}
        self.metadata = base

    def health_response(self, connection: Any) -> Any:
        return connection.respond(http.HTTPStatus.OK, "OK\n")

    def refused(self, connection: Any) -> None:
        log.warning("refused a connection from %s: missing or wrong API key", connection.remote_address)

    @staticmethod
    def _request(message: Any) -> dict[str, Any]:
        """One decoded request frame. Raises WireFormatError for anything the protocol does not allow."""
        if isinstance(message, str):
            raise msgpack_numpy.WireFormatError("expected a binary msgpack frame, got text")
        request = msgpack_numpy.unpackb(message)
        if not isinstance(request, dict):
            raise msgpack_numpy.WireFormatError(f"an observation must be a msgpack map, got {type(request).__name__}")
        control = request.get(RESET_KEY)
        if control is not None:
            seed = control.get("episode_seed", 0) if isinstance(control, dict) else None
            if type(seed) is not int:
                raise msgpack_numpy.WireFormatError(f"{RESET_KEY} takes {{'episode_seed': int}}")
        return request

    async def converse(self, ws: Any, env_id: int) -> None:
        prev_total_ms: float | None = None
        await ws.send(msgpack_numpy.packb(self.metadata))
        async for message in ws:
            start = time.monotonic()
            try:
                request = self._request(message)
            except msgpack_numpy.WireFormatError as exc:
                # the peer's fault: say what was wrong (no traceback), then close as openpi does on errors
                log.warning("bad request on connection %d: %s", env_id, exc)
                await ws.send(f"bad request: {exc}")
                await ws.close(code=CLOSE_BAD_DATA, reason="bad request")
                return
            try:
                control = request.get(RESET_KEY)
                if control is not None:
                    await self.worker.call(self.policy.reset, control.get("episode_seed", 0), env_id)
                    await ws.send(msgpack_numpy.packb({"ok": True}))
                    continue
                infer_start = time.monotonic()
                action = await self.worker.act(request, env_id)
                timing: dict[str, float] = {"infer_ms": (time.monotonic() - infer_start) * 1000.0}
                if prev_total_ms is not None:
                    timing["prev_total_ms"] = prev_total_ms
                reply = msgpack_numpy.packb({"actions": action, "server_timing": timing})
            except Exception:
                log.exception("policy error on connection %d", env_id)
                await ws.send(traceback.format_exc())
                await ws.close(code=1011, reason="Internal server error")
                return
            await ws.send(reply)
            prev_total_ms = (time.monotonic() - start) * 1000.0


def openpi_healthy(host: str, port: int, timeout_s: float = 1.0, *, api_key: str | None = None) -> bool:
    """True when `GET /healthz` answers 200 (no key needed: it only says the process is up)."""
    return websocket.http_healthy(host, port, HEALTH_PATH, timeout_s)


# ===================================================================== client


class OpenpiRemoteOptions(RemoteClientOptions):
    action_key: str = "actions"


class OpenpiRemotePolicy(BasePolicy):
    """A policy behind an openpi-protocol server. One websocket per env_id, so a runner's lockstepped
    envs are in flight together and the server can batch them."""

    def __init__(self, options: OpenpiRemoteOptions):
        from websockets.exceptions import ConnectionClosed, WebSocketException

        options = with_api_key(options)
        self.options = options
        self.uri = websocket.websocket_uri(options.host, options.port)
        self.reconnect = ReconnectPolicy.of(
            options, unreachable=(OSError, TimeoutError, WebSocketException, msgpack_numpy.WireFormatError),
            lost=(TimeoutError, ConnectionClosed, OSError))
        self._connections: dict[int, Any] = {}
        self.server_metadata: dict[str, Any] = {}
        self._connection(0, time.monotonic() + options.connect_timeout_s)  # readiness wait
        self.metadata = dict(self.server_metadata)

    # ---- connections

    def _refused(self, status: int) -> Exception:
        return AuthenticationError(f"openpi server at {self.uri} refused the API key (HTTP {status}); set the"
                                   " server's key", key="policy.api_key")

    def _open(self, deadline: float) -> Any:
        def attempt(remaining: float) -> Any:
            ws = websocket.connect(self.uri, open_timeout=max(min(remaining, 10.0), 0.05),
                                   max_message_mb=self.options.max_message_mb, api_key=self.options.api_key,
                                   refused=self._refused)
            try:
                first = ws.recv(timeout=max(deadline - time.monotonic(), 0.05))
                if isinstance(first, str):
                    raise RemotePolicyError(f"openpi server at {self.uri} sent an error instead of metadata:\n{first}")
                self.server_metadata = msgpack_numpy.unpackb(first) or {}
            except BaseException:
                ws.close()
                raise
            return ws

        return self.reconnect.connect(attempt, deadline=deadline, gave_up=lambda last: InfrastructureError(
            f"openpi server at {self.uri} not reachable within {self.options.connect_timeout_s:g} s"
            f" (last error: {type(last).__name__}: {last})"))

    def _connection(self, env_id: int, deadline: float) -> Any:
        ws = self._connections.get(env_id)
        if ws is None:
            ws = self._open(deadline)
            self._connections[env_id] = ws
        return ws

    def _drop(self, env_id: int) -> None:
        ws = self._connections.pop(env_id, None)
        if ws is not None:
            try:
                ws.close()
            except Exception:  # noqa: BLE001 - it is being thrown away
                pass

    # ---- one request, with retries

    def _decode(self, env_id: int, reply: Any) -> dict[str, Any]:
        if isinstance(reply, str):
            self._drop(env_id)
            raise RemotePolicyError(f"openpi server at {self.uri} reported an error:\n{reply}")
        try:
            message = msgpack_numpy.unpackb(reply)
        except msgpack_numpy.WireFormatError as exc:
            self._drop(env_id)
            raise RemotePolicyError(f"openpi server at {self.uri} sent a reply that does not decode: {exc}") from exc
        if not isinstance(message, dict):
            raise RemotePolicyError(f"openpi server at {self.uri} sent a {type(message).__name__}, not a map")
        return message

    def _roundtrip(self, env_id: int, payload: bytes, failure: BaseException | None = None) -> dict[str, Any]:
        def attempt(deadline: float | None) -> dict[str, Any]:
            ws = self._connection(env_id, deadline or time.monotonic() + self.options.connect_timeout_s)
            ws.send(payload)
            return self._decode(env_id, ws.recv(timeout=self.options.request_timeout_s))

        return self.reconnect.request(
            attempt, failure=failure, on_failure=lambda: self._drop(env_id),
            gave_up=lambda lost, attempts: InfrastructureError(
                f"openpi server at {self.uri} lost: {type(lost).__name__}: {lost} (gave up after {attempts}"
                " attempt(s))"))

    # ---- policy protocol

    def _payload(self, observation: dict[str, Any]) -> bytes:
        mapping = self.options.observation_map
        if mapping:
            observation = {mapping.get(k, k): v for k, v in observation.items()}
        return msgpack_numpy.packb(observation)

    def _action(self, reply: dict[str, Any]) -> np.ndarray:
        if self.options.action_key not in reply:
            raise RemotePolicyError(
                f"openpi server at {self.uri} replied without {self.options.action_key!r} (keys: {sorted(reply)})"
            )
        return np.asarray(reply[self.options.action_key])

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        return self._action(self._roundtrip(env_id, self._payload(observation)))

    def act_batch(self, observations: list[dict[str, Any]], env_ids: list[int]) -> list[np.ndarray]:
        if len(observations) <= 1:
            return [self.act(obs, env_id) for obs, env_id in zip(observations, env_ids)]
        timeout = self.options.connect_timeout_s
        return self.reconnect.together(
            env_ids, [self._payload(obs) for obs in observations],
            send=lambda env_id, payload: self._connection(env_id, time.monotonic() + timeout).send(payload),
            receive=lambda env_id: self._action(self._decode(
                env_id, self._connections[env_id].recv(timeout=self.options.request_timeout_s))),
            retry=lambda env_id, payload, failure: self._action(self._roundtrip(env_id, payload, failure)),
            drop=self._drop)

    def declared_spec(self) -> PolicySpec | None:
        """The served policy's spec, when the server's metadata carries one under `spec`."""
        declared = self.server_metadata.get(SPEC_KEY)
        if declared is None:
            return None
        source = f"openpi server at {self.uri} (metadata)"
        try:
            return PolicySpec.from_mapping(declared, source)
        except ValueError as exc:
            raise SpecMismatchError(f"{source} declares a spec evalfleet cannot read: {exc}") from None

    def reset(self, episode_seed: int, env_id: int = 0) -> None:
        if not (self.server_metadata.get("evalfleet") or {}).get("reset"):
            return  # a plain openpi server has no reset
        reply = self._roundtrip(env_id, msgpack_numpy.packb({RESET_KEY: {"episode_seed": int(episode_seed)}}))
        if not reply.get("ok"):
            raise RemotePolicyError(f"openpi server at {self.uri} did not acknowledge the reset: {reply}")

    def close(self) -> None:
        for env_id in list(self._connections):
            self._drop(env_id)


@POLICIES.register(
    "openpi_remote",
    options=OpenpiRemoteOptions,
    info={"declares_at_connect": "the openpi server's metadata (`spec`)"},
    summary="a policy behind an openpi websocket server (started by evalfleet when `serve` is given)",
)
def make_openpi_remote(options: Any, context: Any = None) -> OpenpiRemotePolicy:
    return OpenpiRemotePolicy(validate_options(OpenpiRemoteOptions, options))


register_protocol(WireProtocol(
    name="openpi", server=OpenpiServer, client="openpi_remote", healthy=openpi_healthy, default_port=DEFAULT_PORT,
    summary="openpi's websocket protocol (msgpack with numpy arrays, metadata frame on connect, GET /healthz)",
))
register_served_protocol("openpi")  # openpi_remote/gr00t_remote with `serve:`: `evalfleet serve ... --protocol openpi`
