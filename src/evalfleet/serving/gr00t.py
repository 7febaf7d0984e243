"""The GR00T ZMQ request/reply protocol, both sides.

Wire protocol (Isaac-GR00T's `PolicyServer`/`PolicyClient`, `gr00t/policy/server_client.py`): a REQ
socket sends one msgpack message ``{"endpoint": str, "data": ..., "api_token": str?}`` (arrays as ``.npy``
bytes, see `msgpack_numpy.gr00t_packb`) and receives one msgpack reply. Endpoints:

* ``ping`` → ``{"status": "ok", "message": "Server is running"}``
* ``get_action`` with ``data = {"observation": {...}, "options": {...}|None}`` → ``[action_dict, info_dict]``
  (GR00T N1.6 and later). The older N1.5 form, ``data = observation`` → ``action_dict``, is answered in
  kind. Our policies' action array travels as ``{"action": array}``.
* ``reset`` with ``data = {"options": {...}|None}`` → ``{}``; evalfleet's client puts ``episode_seed`` in
  the options (a GR00T server ignores it).
* ``get_modality_config`` → the policy's ``metadata["modality_config"]`` (``{}`` if none).
* Any failure → ``{"error": message}``; a missing or wrong token → ``{"error": "Unauthorized: Invalid API
  token"}``.

Our server checks a request in this order, and answers every one: size (over `max_message_bytes` → error;
over twice that, libzmq drops the peer), envelope (a msgpack map, read without decoding any array), token,
endpoint, and only then decodes the data, each array bounded by the bytes that carry it (no .npz, no
pickle, no object dtypes; see `msgpack_numpy`).

Our server binds a ROUTER socket (wire-compatible with REQ clients) so requests from many clients are
in flight at once and can be batched; each client socket is one env on the server side. Unlike the
public client, ours never hangs: every request is polled with a timeout, and after a timeout the REQ
socket (which can then no longer send) is closed with linger 0 and a new one opened.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from typing import Any, Callable, Literal

import numpy as np
from pydantic import Field

from evalfleet.errors import InfrastructureError
from evalfleet.policies.base import POLICIES, BasePolicy, PolicySpec
from evalfleet.serving.client_options import RemoteClientOptions, with_api_key
from evalfleet.serving.common import AuthenticationError, RemotePolicyError, validate_options
from evalfleet.serving.msgpack_numpy import WireFormatError, gr00t_packb, gr00t_unpackb, peek_map
from evalfleet.serving.bindings import register_served_protocol
from evalfleet.serving.protocols import WireProtocol, register_protocol
from evalfleet.serving.reconnect import ReconnectPolicy
from evalfleet.serving.server_base import PolicyServer

log = logging.getLogger(__name__)

UNAUTHORIZED = "Unauthorized: Invalid API token"
ACTION_KEY = "action"
ENDPOINTS = ("ping", "get_action", "reset", "get_modality_config")
DEFAULT_PORT = 5555
_RECENT_CLIENT_S = 2.0
_TRANSPORT_LIMIT_FACTOR = 2


# ===================================================================== server


class Gr00tServer(PolicyServer):
    """Serve a policy over GR00T's ZMQ protocol. `await serve(stop)` runs until `stop` is set. The key travels
    in each request's `api_token` field (GR00T's name for it); `get_modality_config` answers
    `metadata["modality_config"]` (default: the policy's metadata). GR00T's protocol has no place for a
    declared `spec`: it is accepted, like every server's, and not sent."""

    def __init__(self, policy: Any, *, metadata: dict[str, Any] | None = None, spec: PolicySpec | None = None,
                 **kwargs: Any):
        super().__init__(policy, **kwargs)
        self.metadata = dict(metadata if metadata is not None else getattr(policy, "metadata", None) or {})
        self._env_ids: dict[bytes, int] = {}
        self._last_seen: dict[bytes, float] = {}

    def active_clients(self) -> int:
        """Authenticated peers seen in the last few seconds (a REQ client has no connection to count)."""
        now = time.monotonic()
        return max(1, sum(1 for t in self._last_seen.values() if now - t < _RECENT_CLIENT_S))

    def _env_id(self, identity: bytes) -> int:
        if identity not in self._env_ids:
            self._env_ids[identity] = len(self._env_ids)
        return self._env_ids[identity]

    def _admit(self, payload: bytes) -> tuple[str, dict[str, Any] | None]:
        """(endpoint, None) for a request that may be decoded, or ("", error reply). Reads only the envelope:
        nothing the sender controls is decoded before its token is checked."""
        if len(payload) > self.max_message_bytes:
            return "", {"error": f"bad request: a message of {len(payload)} bytes is over this server's limit"
                                 f" of {self.max_message_bytes} bytes"}
        try:
            envelope = peek_map(payload, ("api_token", "endpoint"))
        except WireFormatError as exc:
            return "", {"error": f"bad request: {exc}"}
        if self.api_key is not None:
            token = envelope.get("api_token")
            if not isinstance(token, str) or not hmac.compare_digest(token.encode(), self.api_key.encode()):
                log.warning("refused a request: missing or wrong API token")
                return "", {"error": UNAUTHORIZED}
        endpoint = envelope.get("endpoint", "get_action")
        if not isinstance(endpoint, str):
            return "", {"error": f"bad request: the endpoint must be a string, got {type(endpoint).__name__}"}
        if endpoint not in ENDPOINTS:
            return "", {"error": f"Unknown endpoint: {endpoint[:80]}"}
        return endpoint, None

    async def _answer(self, identity: bytes, payload: bytes) -> Any:
        endpoint, refusal = self._admit(payload)
        if refusal is not None:
            return refusal
        self._last_seen[identity] = time.monotonic()  # only authenticated peers count as clients
        try:
            request = gr00t_unpackb(payload)
        except WireFormatError as exc:
            return {"error": f"bad request: {exc}"}
        if not isinstance(request, dict):  # the envelope itself was an encoded array
            return {"error": "bad request: a request must be a msgpack map"}
        data = request.get("data")
        env_id = self._env_id(identity)
        try:
            if endpoint == "ping":
                return {"status": "ok", "message": "Server is running"}
            if endpoint == "get_modality_config":
                return self.metadata.get("modality_config", {})
            if endpoint == "reset":
                options = data.get("options") if isinstance(data, dict) else None
                options = {} if options is None else options
                seed = options.get("episode_seed", 0) if isinstance(options, dict) else None
                if type(seed) is not int:
                    return {"error": "bad request: reset takes data = {\"options\": {\"episode_seed\": int}}"}
                await self.worker.call(self.policy.reset, seed, env_id)
                return {}
            # get_action
            current = isinstance(data, dict) and isinstance(data.get("observation"), dict)
            observation = data["observation"] if current else data
            if not isinstance(observation, dict):
                return {"error": "bad request: get_action needs an observation map"}
            start = time.monotonic()
            action = await self.worker.act(observation, env_id)
            actions = {ACTION_KEY: action}
            if current:
                return [actions, {"infer_ms": (time.monotonic() - start) * 1000.0}]
            return actions
        except Exception as exc:  # the client gets the error, the server lives on
            log.exception("error in endpoint %s", endpoint)
            return {"error": f"{type(exc).__name__}: {exc}"}

    async def _reply(self, frames: list[bytes]) -> bytes:
        """The encoded reply to one request; whatever goes wrong, an error reply."""
        try:
            if len(frames) != 3 or frames[1]:
                return gr00t_packb({"error": "bad request: expected one message frame after the REQ envelope"})
            reply = await self._answer(frames[0], frames[2])
            try:
                return gr00t_packb(reply)
            except (TypeError, ValueError, OverflowError) as exc:
                return gr00t_packb({"error": f"could not encode the reply: {exc}"})
        except Exception as exc:  # a bug here must still answer, not leave the client waiting
            log.exception("unexpected error answering a request")
            return gr00t_packb({"error": f"internal server error: {type(exc).__name__}"})

    async def serve(self, stop: asyncio.Event, ready: Callable[[str, int], None] | None = None) -> None:
        import zmq
        import zmq.asyncio

        context = zmq.asyncio.Context()
        socket = context.socket(zmq.ROUTER)
        socket.setsockopt(zmq.LINGER, 0)
        # libzmq drops a peer whose frame is over MAXMSGSIZE without a word (its REQ socket then waits out
        # its timeout), so the transport limit is a multiple of ours: a message somewhat over our limit gets
        # an error reply, and memory stays bounded either way.
        socket.setsockopt(zmq.MAXMSGSIZE, _TRANSPORT_LIMIT_FACTOR * self.max_message_bytes)
        if self.port == 0:
            self.bound_port = socket.bind_to_random_port(f"tcp://{self.host}")
        else:
            socket.bind(f"tcp://{self.host}:{self.port}")
            self.bound_port = self.port
        if ready is not None:
            ready(self.host, self.bound_port)
        send_lock = asyncio.Lock()
        pending: set[asyncio.Task] = set()

        async def handle(frames: list[bytes]) -> None:
            data = await self._reply(frames)
            async with send_lock:
                await socket.send_multipart([frames[0], b"", data])

        stopper = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                receiver = asyncio.ensure_future(socket.recv_multipart())
                done, _ = await asyncio.wait({receiver, stopper}, return_when=asyncio.FIRST_COMPLETED)
                if receiver not in done:
                    receiver.cancel()
                    break
                frames = receiver.result()
                if len(frames) < 2:
                    continue  # no payload at all: nothing to answer
                task = asyncio.ensure_future(handle(frames))
                pending.add(task)
                task.add_done_callback(pending.discard)
        finally:
            stopper.cancel()
            for task in pending:
                task.cancel()
            socket.close(linger=0)
            context.term()
            await self.worker.aclose()


# ===================================================================== client


class Gr00tRemoteOptions(RemoteClientOptions):
    port: int = Field(DEFAULT_PORT, ge=0, le=65535)
    # Which action-dict entries make the action, concatenated on the last axis (default: all, in order).
    action_keys: list[str] | None = None
    # "current": data = {"observation", "options"}, reply [action, info] (N1.6+); "legacy": N1.5 form.
    request_style: Literal["current", "legacy"] = "current"


class Gr00tRemotePolicy(BasePolicy):
    """A policy behind a GR00T ZMQ server. One REQ socket per env_id."""

    def __init__(self, options: Gr00tRemoteOptions):
        import zmq

        options = with_api_key(options)
        self.options = options
        self.address = f"tcp://{options.host}:{options.port}"
        self._zmq = zmq
        self.reconnect = ReconnectPolicy.of(options, unreachable=(TimeoutError, zmq.ZMQError),
                                            lost=(TimeoutError, zmq.ZMQError))
        # The process-wide context: it is never terminated by garbage collection, which would block
        # while any socket is still open (a client dropped without close() must not hang anything).
        self._context = zmq.Context.instance()
        self._sockets: dict[int, Any] = {}
        self._wait_ready()
        self.metadata = {"modality_config": self.get_modality_config()}

    # ---- sockets

    def _socket(self, env_id: int) -> Any:
        sock = self._sockets.get(env_id)
        if sock is None:
            zmq = self._zmq
            sock = self._context.socket(zmq.REQ)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.MAXMSGSIZE, int(self.options.max_message_mb * 2**20))
            sock.connect(self.address)
            self._sockets[env_id] = sock
        return sock

    def _drop(self, env_id: int) -> None:
        sock = self._sockets.pop(env_id, None)
        if sock is not None:
            sock.close(linger=0)

    def _request(self, endpoint: str, data: Any = None, *, requires_input: bool = True) -> bytes:
        request: dict[str, Any] = {"endpoint": endpoint}
        if requires_input:
            request["data"] = data
        if self.options.api_key:
            request["api_token"] = self.options.api_key
        return gr00t_packb(request)

    def _receive(self, env_id: int, timeout_s: float) -> Any:
        sock = self._sockets[env_id]
        if not sock.poll(max(int(timeout_s * 1000), 1), self._zmq.POLLIN):
            self._drop(env_id)  # a REQ socket that timed out cannot send again
            raise TimeoutError(f"no reply from {self.address} within {timeout_s:g} s")
        try:
            response = gr00t_unpackb(sock.recv())
        except WireFormatError as exc:
            raise RemotePolicyError(f"GR00T server at {self.address} sent a reply that does not decode: {exc}") from exc
        if isinstance(response, dict) and "error" in response:
            message = str(response["error"])
            if message.startswith("Unauthorized"):
                raise AuthenticationError(
                    f"GR00T server at {self.address} refused the API token ({message})", key="policy.api_key"
                )
            raise RemotePolicyError(f"GR00T server at {self.address} reported an error: {message}")
        return response

    def _call(self, env_id: int, payload: bytes, failure: BaseException | None = None) -> Any:
        def attempt(deadline: float | None) -> Any:
            timeout = self.options.request_timeout_s
            if deadline is not None:  # the server was lost: wait for it only until then
                timeout = min(timeout, max(deadline - time.monotonic(), 0.01))
            self._socket(env_id).send(payload)
            return self._receive(env_id, timeout)

        return self.reconnect.request(
            attempt, failure=failure, on_failure=lambda: self._drop(env_id),
            gave_up=lambda lost, attempts: InfrastructureError(
                f"GR00T server at {self.address} lost: {type(lost).__name__}: {lost} (gave up after {attempts}"
                " attempt(s))"))

    def _wait_ready(self) -> None:
        payload = self._request("ping", requires_input=False)

        def attempt(remaining: float) -> None:
            self._socket(0).send(payload)
            self._receive(0, min(1.0, remaining))

        self.reconnect.connect(attempt, on_failure=lambda: self._drop(0), gave_up=lambda last: InfrastructureError(
            f"GR00T server at {self.address} not ready within {self.options.connect_timeout_s:g} s ({last})"))

    # ---- endpoints

    def ping(self) -> bool:
        try:
            self._call(0, self._request("ping", requires_input=False))
            return True
        except InfrastructureError:
            return False

    def get_modality_config(self) -> Any:
        return self._call(0, self._request("get_modality_config", requires_input=False))

    def _action_payload(self, observation: dict[str, Any]) -> bytes:
        mapping = self.options.observation_map
        if mapping:
            observation = {mapping.get(k, k): v for k, v in observation.items()}
        if self.options.request_style == "legacy":
            return self._request("get_action", observation)
        return self._request("get_action", {"observation": observation, "options": None})

    def _action(self, response: Any) -> np.ndarray:
        actions = response[0] if isinstance(response, (list, tuple)) else response
        if not isinstance(actions, dict) or not actions:
            raise RemotePolicyError(f"GR00T server at {self.address} sent no action map: {type(actions).__name__}")
        keys = self.options.action_keys or list(actions)
        missing = [k for k in keys if k not in actions]
        if missing:
            raise RemotePolicyError(f"GR00T server at {self.address} sent no {missing} (has {sorted(actions)})")
        parts = [np.asarray(actions[k]) for k in keys]
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        return self._action(self._call(env_id, self._action_payload(observation)))

    def act_batch(self, observations: list[dict[str, Any]], env_ids: list[int]) -> list[np.ndarray]:
        if len(observations) <= 1:
            return [self.act(obs, env_id) for obs, env_id in zip(observations, env_ids)]
        return self.reconnect.together(
            env_ids, [self._action_payload(obs) for obs in observations],
            send=lambda env_id, payload: self._socket(env_id).send(payload),
            receive=lambda env_id: self._action(self._receive(env_id, self.options.request_timeout_s)),
            retry=lambda env_id, payload, failure: self._action(self._call(env_id, payload, failure)),
            drop=self._drop)

    def reset(self, episode_seed: int, env_id: int = 0) -> None:
        self._call(env_id, self._request("reset", {"options": {"episode_seed": int(episode_seed)}}))

    def close(self) -> None:
        for env_id in list(self._sockets):
            self._drop(env_id)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


@POLICIES.register(
    "gr00t_remote",
    options=Gr00tRemoteOptions,
    summary="a policy behind a GR00T ZMQ server (started by evalfleet when `serve` is given)",
)
def make_gr00t_remote(options: Any, context: Any = None) -> Gr00tRemotePolicy:
    return Gr00tRemotePolicy(validate_options(Gr00tRemoteOptions, options))


def gr00t_ping(host: str, port: int, *, api_key: str | None = None, timeout_s: float = 1.0) -> bool:
    """One `ping` on a fresh REQ socket: True when the server answers `status: ok` within `timeout_s`."""
    import zmq

    context = zmq.Context.instance()
    sock = context.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(f"tcp://{host}:{port}")
        request: dict[str, Any] = {"endpoint": "ping"}
        if api_key:
            request["api_token"] = api_key
        sock.send(gr00t_packb(request))
        if not sock.poll(max(int(timeout_s * 1000), 1), zmq.POLLIN):
            return False
        reply = gr00t_unpackb(sock.recv())
        return isinstance(reply, dict) and reply.get("status") == "ok"
    except (zmq.ZMQError, WireFormatError):
        return False
    finally:
        sock.close(linger=0)


register_protocol(WireProtocol(
    name="gr00t", server=Gr00tServer, client="gr00t_remote", healthy=gr00t_ping, default_port=DEFAULT_PORT,
    summary="Isaac-GR00T's ZMQ request/reply protocol (msgpack, arrays as .npy bytes, `ping`)",
))
register_served_protocol("gr00t")  # openpi_remote/gr00t_remote with `serve:`: `evalfleet serve ... --protocol gr00t`
