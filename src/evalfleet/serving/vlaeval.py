"""vla-eval's websocket protocol, both sides (as spoken by the `vla-eval` package 0.8: its
`vla_eval.connection.Connection` client and its `vla_eval.model_servers.serve` model servers).

Wire protocol:

* One websocket per client; every frame is binary msgpack, an envelope ``{type, payload, seq,
  timestamp}`` with ``type`` one of ``hello``, ``observation``, ``action``, ``episode_start``,
  ``episode_end``, ``error``. The client numbers its messages (``seq`` 1, 2, ...); a reply echoes the
  ``seq`` of the message it answers.
* Arrays travel as ``{"__ndarray__": true, data, dtype, shape}`` (bool/int/uint/float only); HWC uint8
  images (1, 3 or 4 channels) as ``{"__image__": true, format: png|raw|jpeg, data, shape}`` — PNG by
  default. Keys are strings. The codec (`vlaeval_codec`) decodes a frame within its size limit: an image's
  declared size is checked before its pixels are decoded.
* The client sends HELLO first (``harness_version``, ``protocol_version: 1``); the server answers HELLO
  with ``model_server``, ``capabilities`` and optionally ``action_spec`` / ``observation_spec``
  (``{component: {name, dims, format, range?}}``) and ``observation_params``.
* ``episode_start`` (``{"task": {...}}``) and ``episode_end`` (``{...result}``) frame each episode;
  every ``observation`` (``{"images": {camera: HWC}, "state": [...], "task_description": str}``) is
  answered by one ``action`` (``{"actions": (A,) or (H, A)}``) or one ``error`` (``{"error": str}``; the
  connection stays open).
* ``GET /health`` on the same port answers ``200 {"status": "ok"}``.

evalfleet's additions, invisible to a plain peer: the HELLO reply may carry ``spec`` (a
`policies.base.PolicySpec` mapping), and ``episode_start`` carries the episode's ``seed``.
Each connection is one env on the server side, so concurrent connections are batched into one
`act_batch` call, and `vlaeval_remote` opens one connection per env.
"""

from __future__ import annotations

import http
import json
import logging
import time
from typing import Any

import numpy as np
from pydantic import Field

from evalfleet.errors import InfrastructureError, UserError
from evalfleet.policies.base import GRIPPER_CONVENTIONS, POLICIES, SPEC_KEY, BasePolicy, PolicySpec, SpecMismatchError
from evalfleet.serving import websocket
from evalfleet.serving.bindings import (
    ServerBinding,
    ServerCommand,
    evalfleet_resources,
    evalfleet_serve_command,
    evalfleet_server_options,
    register_binding,
)
from evalfleet.serving.client_options import RemoteClientOptions
from evalfleet.serving.common import AuthenticationError, RemotePolicyError, validate_options
from evalfleet.serving.protocols import WireProtocol, register_protocol, wire_protocol
from evalfleet.serving.reconnect import ReconnectPolicy
from evalfleet.serving.vlaeval_codec import MESSAGE_TYPES, WireFormatError, pack, unpack  # noqa: F401 - the codec
from evalfleet.serving.websocket import WebsocketServer

log = logging.getLogger(__name__)

PROTOCOL_VERSION = 1
HARNESS_VERSION = "evalfleet"
HEALTH_PATH = "/health"
DEFAULT_PORT = 8000
# vla-eval's gripper formats -> evalfleet's gripper conventions
GRIPPER_FORMATS = {"binary_close_positive": "positive_closes", "binary_close_negative": "positive_opens"}


# ===================================================================== observation shapes


def to_vlaeval_observation(observation: dict[str, Any]) -> dict[str, Any]:
    """evalfleet's vocabulary -> vla-eval's recommended keys (images by camera, state, task_description).
    Other keys pass through under their own names."""
    out: dict[str, Any] = {}
    images: dict[str, Any] = {}
    for key, value in observation.items():
        if key.startswith("observation/images/"):
            images[key.removeprefix("observation/images/")] = value
        elif key == "observation/state":
            out["state"] = value
        elif key == "prompt":
            out["task_description"] = value
        elif key != "observation/image":  # the first camera again; vla-eval names every camera
            out[key] = value
    if not images and "observation/image" in observation:
        images["image"] = observation["observation/image"]
    if images:
        out["images"] = images
    return out


def from_vlaeval_observation(observation: dict[str, Any]) -> dict[str, Any]:
    """vla-eval's keys -> evalfleet's (the first camera is also `observation/image`)."""
    out: dict[str, Any] = {}
    for key, value in observation.items():
        if key == "images" and isinstance(value, dict):
            for i, (camera, image) in enumerate(value.items()):
                out[f"observation/images/{camera}"] = image
                if i == 0:
                    out["observation/image"] = image
        elif key == "state":
            out["observation/state"] = np.asarray(value)
        elif key == "task_description":
            out["prompt"] = value
        else:
            out[key] = value
    return out


def spec_from_hello(hello: dict[str, Any], source: str) -> PolicySpec | None:
    """What a vla-eval server's HELLO declares: evalfleet's own `spec` if there, else its action and
    observation specs (action size = the components' dims, bounds from their ranges, the gripper
    convention from the `gripper` component's format, state size from `state`)."""
    if hello.get(SPEC_KEY) is not None:
        return PolicySpec.from_mapping(hello[SPEC_KEY], source)
    action_spec = hello.get("action_spec") or {}
    obs_spec = hello.get("observation_spec") or {}
    if not isinstance(action_spec, dict) or not isinstance(obs_spec, dict) or not (action_spec or obs_spec):
        return None
    declared: dict[str, Any] = {}
    components = [c for c in action_spec.values() if isinstance(c, dict)]
    dims = [c.get("dims") for c in components]
    if components and all(type(d) is int and d > 0 for d in dims):
        declared["action_dim"] = sum(dims)
        ranges = [c.get("range") for c in components]
        if all(isinstance(r, (list, tuple)) and len(r) == 2 for r in ranges):
            declared["action_low"] = [float(r[0]) for r, d in zip(ranges, dims) for _ in range(d)]
            declared["action_high"] = [float(r[1]) for r, d in zip(ranges, dims) for _ in range(d)]
    gripper = GRIPPER_FORMATS.get(str((action_spec.get("gripper") or {}).get("format")))
    if gripper in GRIPPER_CONVENTIONS:
        declared["gripper"] = gripper
    state = obs_spec.get("state")
    if isinstance(state, dict) and type(state.get("dims")) is int and state["dims"] > 0:
        declared["state_dim"] = state["dims"]
    return PolicySpec.from_mapping(declared, source) if declared else None


def hello_specs(spec: PolicySpec | None) -> dict[str, Any]:
    """A served policy's spec in vla-eval's HELLO terms (what a vla-eval orchestrator compares)."""
    if spec is None:
        return {}
    out: dict[str, Any] = {SPEC_KEY: spec.to_mapping()}
    if spec.action_dim is not None:
        action: dict[str, Any] = {"name": "actions", "dims": spec.action_dim, "format": "raw"}
        if spec.action_low is not None and spec.action_high is not None:
            action["range"] = [min(spec.action_low), max(spec.action_high)]
        out["action_spec"] = {"actions": action}
    observation: dict[str, Any] = {}
    if spec.state_dim is not None:
        observation["state"] = {"name": "state", "dims": spec.state_dim, "format": "raw"}
    if spec.required_cameras():
        observation["image"] = {"name": "image", "dims": 0, "format": "rgb_hwc_uint8"}
    if observation:
        out["observation_spec"] = observation
    return out


# ===================================================================== server


class VlaEvalServer(WebsocketServer):
    """Serve a policy to vla-eval's clients. `await serve(stop)` runs until `stop` is set. The HELLO reply
    carries `spec` (the served policy's), in vla-eval's terms too."""

    health_path = HEALTH_PATH
    serve_options = {"ping_interval": None}

    def __init__(self, policy: Any, *, spec: PolicySpec | None = None, image_format: str = "png", **kwargs: Any):
        super().__init__(policy, **kwargs)
        self.image_format = image_format
        self.hello = {"harness_version": HARNESS_VERSION, "protocol_version": PROTOCOL_VERSION,
                      "model_server": type(policy).__name__,
                      "capabilities": {"evalfleet": {"max_batch": self.max_batch}}, **hello_specs(spec)}

    def health_response(self, connection: Any) -> Any:
        response = connection.respond(http.HTTPStatus.OK, '{"status": "ok"}\n')
        del response.headers["Content-Type"]
        response.headers["Content-Type"] = "application/json"
        return response

    async def converse(self, ws: Any, env_id: int) -> None:
        import websockets

        async def reply(msg_type: str, payload: dict[str, Any], seq: int) -> None:
            await ws.send(pack(msg_type, payload, seq, image_format=self.image_format))

        async for frame in ws:
            try:
                msg_type, payload, seq = unpack(frame, max_bytes=self.max_message_bytes)
            except WireFormatError as exc:
                log.warning("bad frame on connection %d: %s", env_id, exc)
                await reply("error", {"error": f"bad_request: {exc}"}, 0)
                continue
            try:
                if msg_type == "hello":
                    await reply("hello", self.hello, seq)
                elif msg_type == "episode_start":
                    seed = payload.get("seed", (payload.get("task") or {}).get("seed", 0))
                    await self.worker.call(self.policy.reset, int(seed) if type(seed) is int else 0, env_id)
                elif msg_type == "observation":
                    action = await self.worker.act(from_vlaeval_observation(payload), env_id)
                    await reply("action", {"actions": np.asarray(action, dtype=np.float32)}, seq)
            except websockets.ConnectionClosed:
                raise
            except Exception as exc:  # the peer is told, the connection stays (as vla-eval)
                log.exception("policy error on connection %d", env_id)
                what = "observation_failed" if msg_type == "observation" else f"{msg_type}_failed"
                await reply("error", {"error": f"{what}: {type(exc).__name__}: {exc}"}, seq)


def vlaeval_healthy(host: str, port: int, timeout_s: float = 1.0, *, api_key: str | None = None) -> bool:
    """True when `GET /health` answers 200 (no key needed)."""
    return websocket.http_healthy(host, port, HEALTH_PATH, timeout_s)


# ===================================================================== client


class VlaEvalRemoteOptions(RemoteClientOptions):
    image_format: str = Field(
        "png", pattern="^(png|raw)$", description="how images travel: png (vla-eval's default) or raw"
    )
    benchmark: str | None = Field(None, description="the benchmark name sent in HELLO (some servers adapt to it)")
    action_key: str = "actions"
    # A vla-eval model server evalfleet starts itself (`vla-eval serve --config ... --address host:port`)
    vla_eval_config: str | None = Field(None, description="model-server YAML for `vla-eval serve --config`")
    vla_eval_args: dict[str, Any] = Field(default_factory=dict, description="`--arg KEY=VALUE` overrides")


class _Session:
    """One env's connection: its websocket, the next seq, whether an episode is open."""

    def __init__(self, ws: Any):
        self.ws = ws
        self.seq = 0
        self.in_episode = False

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq


class VlaEvalRemotePolicy(BasePolicy):
    """A policy behind a vla-eval model server: one connection per env (so the server batches them),
    HELLO on connect, `episode_start` at every reset, `episode_end` before the next one and at close.
    An error frame or a lost connection raises an InfrastructureError: that episode is recorded as
    `status: error` and retried by the runner, which resets (a fresh connection if the old one is gone)."""

    def __init__(self, options: VlaEvalRemoteOptions, context: Any = None):
        from websockets.exceptions import WebSocketException

        self.options = options
        self.uri = websocket.websocket_uri(options.host, options.port)
        # Connecting waits for the server; a request is never re-sent (a lost one fails the episode's attempt).
        self.reconnect = ReconnectPolicy.of(options, unreachable=(OSError, TimeoutError, WebSocketException,
                                                                  WireFormatError), lost=())
        self.task = getattr(context, "task", "") or ""
        self._sessions: dict[int, _Session] = {}
        self.server_info: dict[str, Any] = {}
        self._session(0)  # readiness wait + HELLO
        self.metadata = dict(self.server_info)

    def _refused(self, status: int) -> Exception:
        return AuthenticationError(f"vla-eval server at {self.uri} refused the API key (HTTP {status})",
                                   key="policy.api_key")

    def _open(self) -> _Session:
        opts = self.options
        deadline = time.monotonic() + opts.connect_timeout_s

        def attempt(remaining: float) -> _Session:
            ws = websocket.connect(self.uri, open_timeout=max(min(remaining, 10.0), 0.05),
                                   max_message_mb=opts.max_message_mb, api_key=opts.api_key, refused=self._refused,
                                   ping_interval=None)
            try:
                session = _Session(ws)
                hello: dict[str, Any] = {"harness_version": HARNESS_VERSION, "protocol_version": PROTOCOL_VERSION}
                if opts.benchmark:
                    hello["benchmark"] = opts.benchmark
                ws.send(pack("hello", hello, session.next_seq()))
                msg_type, payload, _ = unpack(ws.recv(timeout=max(deadline - time.monotonic(), 0.05)),
                                              max_bytes=int(opts.max_message_mb * 2**20))
                if msg_type != "hello":
                    raise RemotePolicyError(f"vla-eval server at {self.uri} answered HELLO with {msg_type}: {payload}")
            except BaseException:
                ws.close()
                raise
            self.server_info = payload
            return session

        return self.reconnect.connect(attempt, deadline=deadline, gave_up=lambda last: InfrastructureError(
            f"vla-eval server at {self.uri} not reachable within {opts.connect_timeout_s:g} s"
            f" (last error: {type(last).__name__}: {last})"))

    def _session(self, env_id: int) -> _Session:
        session = self._sessions.get(env_id)
        if session is None:
            session = self._sessions[env_id] = self._open()
        return session

    def _drop(self, env_id: int) -> None:
        session = self._sessions.pop(env_id, None)
        if session is not None:
            try:
                session.ws.close()
            except Exception:  # noqa: BLE001 - it is being thrown away
                pass

    def _send(self, env_id: int, msg_type: str, payload: dict[str, Any]) -> int:
        from websockets.exceptions import ConnectionClosed

        session = self._session(env_id)
        seq = session.next_seq()
        try:
            session.ws.send(pack(msg_type, payload, seq, image_format=self.options.image_format))
        except (ConnectionClosed, OSError) as exc:
            self._drop(env_id)
            raise InfrastructureError(f"vla-eval server at {self.uri} lost: {type(exc).__name__}: {exc}") from exc
        return seq

    def _receive(self, env_id: int, seq: int) -> np.ndarray:
        from websockets.exceptions import ConnectionClosed

        session = self._sessions.get(env_id)
        if session is None:
            raise InfrastructureError(f"vla-eval server at {self.uri}: connection {env_id} was lost")
        try:
            msg_type, payload, got = unpack(session.ws.recv(timeout=self.options.request_timeout_s),
                                            max_bytes=int(self.options.max_message_mb * 2**20))
        except (ConnectionClosed, OSError, TimeoutError) as exc:
            self._drop(env_id)
            raise InfrastructureError(f"vla-eval server at {self.uri} lost: {type(exc).__name__}: {exc}") from exc
        except WireFormatError as exc:
            self._drop(env_id)
            raise RemotePolicyError(f"vla-eval server at {self.uri} sent a frame that does not decode: {exc}") from exc
        if msg_type == "error":
            raise RemotePolicyError(f"vla-eval server at {self.uri} reported an error: {payload.get('error', payload)}")
        if msg_type != "action" or got != seq:
            self._drop(env_id)  # out of step: start afresh rather than pair the wrong replies
            raise RemotePolicyError(
                f"vla-eval server at {self.uri} sent {msg_type} seq {got} for observation seq {seq}"
            )
        if self.options.action_key not in payload:
            raise RemotePolicyError(f"vla-eval server at {self.uri} replied without {self.options.action_key!r}"
                                    f" (keys: {sorted(payload)})")
        return np.asarray(payload[self.options.action_key])

    def _observation(self, observation: dict[str, Any]) -> dict[str, Any]:
        mapping = self.options.observation_map
        if mapping:
            observation = {mapping.get(k, k): v for k, v in observation.items()}
        return to_vlaeval_observation(observation)

    # ---- policy protocol

    def declared_spec(self) -> PolicySpec | None:
        source = f"vla-eval server at {self.uri} (HELLO)"
        try:
            return spec_from_hello(self.server_info, source)
        except ValueError as exc:
            raise SpecMismatchError(f"{source} declares a spec evalfleet cannot read: {exc}") from None

    def reset(self, episode_seed: int, env_id: int = 0) -> None:
        session = self._sessions.get(env_id)
        if session is not None and session.in_episode:
            self._send(env_id, "episode_end", {})
        self._send(env_id, "episode_start", {"task": {"name": self.task}, "seed": int(episode_seed)})
        self._sessions[env_id].in_episode = True

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        return self.act_batch([observation], [env_id])[0]

    def act_batch(self, observations: list[dict[str, Any]], env_ids: list[int]) -> list[np.ndarray]:
        seqs = [self._send(env_id, "observation", self._observation(obs)) for obs, env_id in zip(observations, env_ids)]
        results = []
        try:
            for env_id, seq in zip(env_ids, seqs):  # all sent first: the server sees them together
                results.append(self._receive(env_id, seq))
        except BaseException:
            for env_id in env_ids[len(results) + 1:]:  # replies still owed on these connections
                self._drop(env_id)
            raise
        return results

    def close(self) -> None:
        for env_id in list(self._sessions):
            session = self._sessions[env_id]
            if session.in_episode:
                try:
                    self._send(env_id, "episode_end", {})
                except InfrastructureError:
                    pass
            self._drop(env_id)


@POLICIES.register(
    "vlaeval_remote",
    options=VlaEvalRemoteOptions,
    info={"declares_at_connect": "the vla-eval server's HELLO (action/observation specs)"},
    summary="a policy behind a vla-eval model server (websocket; started by evalfleet when `serve` is given)",
)
def make_vlaeval_remote(options: Any, context: Any = None) -> VlaEvalRemotePolicy:
    return VlaEvalRemotePolicy(validate_options(VlaEvalRemoteOptions, options), context)



register_protocol(WireProtocol(
    name="vla-eval", server=VlaEvalServer, client="vlaeval_remote", healthy=vlaeval_healthy,
    default_port=DEFAULT_PORT, summary="vla-eval's websocket protocol (msgpack envelopes, HELLO, GET /health)",
))


# The server binding of `vlaeval_remote`: evalfleet's own server, or one of vla-eval's model servers.


def _vlaeval_command(options: dict[str, Any], host: str, port: int, context: Any) -> ServerCommand:
    """`evalfleet serve ... --protocol vla-eval` for `serve:`, or vla-eval's own launcher for a model-server
    YAML (`vla-eval serve --config CFG --address HOST:PORT --arg KEY=VALUE ...`, which runs the YAML's
    script through `uv run` in its own environment)."""
    config = options.get("vla_eval_config")
    if config and options.get("serve"):
        raise UserError("give either `serve` (an evalfleet policy) or `vla_eval_config` (a vla-eval model"
                        " server), not both", key="policy.vla_eval_config")
    if not config:
        return evalfleet_serve_command("vla-eval")(options, host, port, context)
    argv = ["vla-eval", "serve", "--config", str(config), "--address", f"{host}:{port}"]
    for key, value in sorted((options.get("vla_eval_args") or {}).items()):
        argv += ["--arg", f"{key}={json.dumps(value) if not isinstance(value, str) else value}"]
    return ServerCommand(argv=argv)


def _vlaeval_server_options(options: dict[str, Any]) -> dict[str, Any]:
    return {**evalfleet_server_options(options), "vla_eval_config": options.get("vla_eval_config"),
            "vla_eval_args": options.get("vla_eval_args") or {}}


register_binding(ServerBinding(
    policy_type=wire_protocol("vla-eval").client,
    protocol="vla-eval",
    api_key_field="api_key",
    command_builder=_vlaeval_command,
    server_options=_vlaeval_server_options,
    resources=evalfleet_resources,
    needs_server=lambda options: bool(options.get("serve") or options.get("vla_eval_config")),
    context_keys=("env_type", "action_dim"),
    summary="`evalfleet serve <serve.type> --protocol vla-eval`, or `vla-eval serve --config <vla_eval_config>`",
))
