"""A plug-in package's module, found through the `evalfleet.plugins` entry point of a distribution the tests lay
out on PYTHONPATH (tests/plugins/test_backend_and_protocol_plugins.py): a backend with its own settings, and a wire
protocol whose server `evalfleet serve` runs and whose client a Run uses. Neither touches an evalfleet file."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from evalfleet.backend_registry import register_backend
from evalfleet.errors import InfrastructureError
from evalfleet.policies.base import POLICIES, BasePolicy
from evalfleet.serving.bindings import register_served_protocol
from evalfleet.serving.client_options import RemoteClientOptions
from evalfleet.serving.common import validate_options
from evalfleet.serving.protocols import WireProtocol, register_protocol
from evalfleet.serving.server_base import PolicyServer

# ----------------------------------------------------------------------------------------------- the backend
RECEIPT = "toy_backend.json"  # what the toy backend was given and did, in the output folder


class ToySettings(BaseModel):
    """`toy.*`"""

    model_config = ConfigDict(extra="forbid")

    label: str = Field(default="toy", description="written into the receipt")
    shards_per_runner: int = Field(default=1, ge=1, le=64, description="shards one runner process is given")


class ToyBackend:
    """Runs the pending shards here, a few at a time in one `evalfleet runner` process, one after another."""

    name = "toy"
    resume_hint = " --backend toy"
    cheap_shards = False

    def __init__(self, *, settings: ToySettings, workers: int | None = None):
        self.settings = settings

    def check(self) -> None:
        pass

    def check_experiment(self, loaded: Any, out: Path) -> None:
        pass

    def open(self) -> int:
        return 1

    def serve(self, job: Any) -> Any:
        import contextlib

        from evalfleet.layout import EXPERIMENT_FILE

        return contextlib.nullcontext(job.out / EXPERIMENT_FILE)

    def execute(self, job: Any, experiment_file: Path) -> list[Any]:
        from evalfleet.execution.backends import WorkerResult
        from evalfleet.execution.invocation import runner_command

        shards = job.ordered_shards()
        size = self.settings.shards_per_runner
        runners = 0
        for i in range(0, len(shards), size):
            subprocess.run(runner_command(experiment_file, job.out, shards[i:i + size]), check=True,
                           stdin=subprocess.DEVNULL)
            runners += 1
        receipt = {"label": self.settings.label, "shards": len(shards), "runners": runners}
        (job.out / RECEIPT).write_text(json.dumps(receipt))
        return [WorkerResult(0, shards)]

    def close(self) -> None:
        pass

    def submit(self, loaded: Any, **kwargs: Any) -> int:
        raise NotImplementedError  # the spec says it does not submit: never called


register_backend("toy", "evalfleet_toy_plugins:ToyBackend", settings=ToySettings,
                 summary="a plug-in's backend: runner processes here, one after another",
                 executes=True, submits=False, sequential_waves=True, served_policies=False, gpus=False)


# ----------------------------------------------------------------------------------------------- the protocol
# toy-json: one JSON object a line over TCP. Requests {"op": "health"|"reset"|"act", "key": ..., ...}; arrays
# travel as {"__array__": nested lists, "dtype": name}, so float64 state keeps every bit.
PROTOCOL = "toy-json"


def encode(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return {"__array__": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        return value.item()
    return value


def decode(value: Any) -> Any:
    if isinstance(value, dict):
        if "__array__" in value:
            return np.asarray(value["__array__"], dtype=value["dtype"])
        return {k: decode(v) for k, v in value.items()}
    return value


class ToyJsonServer(PolicyServer):
    def __init__(self, policy: Any, *, spec: Any = None, **kwargs: Any):
        super().__init__(policy, **kwargs)
        self.clients = 0

    def active_clients(self) -> int:
        return max(1, self.clients)

    async def _answer(self, message: dict[str, Any]) -> dict[str, Any]:
        if self.api_key and message.get("key") != self.api_key:
            return {"error": "unauthorized"}
        op = message.get("op")
        if op == "health":
            return {"ok": True}
        if op == "reset":
            reset = getattr(self.policy, "reset", None)
            if reset is not None:
                await self.worker.call(reset, int(message["seed"]), int(message["env_id"]))
            return {"ok": True}
        if op == "act":
            action = await self.worker.act(decode(message["observation"]), int(message["env_id"]))
            return {"action": encode(np.asarray(action))}
        return {"error": f"unknown op {op!r}"}

    async def serve(self, stop: asyncio.Event, ready: Any) -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.clients += 1
            try:
                while line := await reader.readline():
                    if len(line) > self.max_message_bytes:
                        break
                    try:
                        answer = await self._answer(json.loads(line))
                    except (ValueError, KeyError, TypeError) as exc:
                        answer = {"error": f"{type(exc).__name__}: {exc}"}
                    writer.write(json.dumps(answer).encode() + b"\n")
                    await writer.drain()
            finally:
                self.clients -= 1
                writer.close()

        server = await asyncio.start_server(handle, self.host, self.port, limit=self.max_message_bytes + 1)
        self.bound_port = server.sockets[0].getsockname()[1]
        ready(self.host, self.bound_port)
        try:
            await stop.wait()
        finally:
            server.close()
            await server.wait_closed()
            await self.worker.aclose()


def _request(sock_file: Any, sock: socket.socket, message: dict[str, Any]) -> dict[str, Any]:
    sock.sendall(json.dumps(encode(message)).encode() + b"\n")
    line = sock_file.readline()
    if not line:
        raise InfrastructureError("the toy-json server closed the connection")
    answer = json.loads(line)
    if "error" in answer:
        raise InfrastructureError(f"toy-json server: {answer['error']}")
    return answer


def toy_healthy(host: str, port: int, *, api_key: str | None = None, timeout_s: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock, sock.makefile("r") as f:
            return bool(_request(f, sock, {"op": "health", "key": api_key}).get("ok"))
    except (OSError, ValueError, InfrastructureError):
        return False


class ToyJsonOptions(RemoteClientOptions):
    port: int = Field(8765, ge=0, le=65535)


class ToyJsonRemote(BasePolicy):
    """The client: one connection for all envs (the runner calls it from one thread)."""

    def __init__(self, options: ToyJsonOptions):
        self.options = options
        deadline = time.monotonic() + options.connect_timeout_s
        while True:
            try:
                self.sock = socket.create_connection((options.host, options.port), timeout=options.request_timeout_s)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise InfrastructureError(f"no toy-json server at {options.host}:{options.port}") from None
                time.sleep(0.05)
        self.file = self.sock.makefile("r")

    def _call(self, message: dict[str, Any]) -> dict[str, Any]:
        return _request(self.file, self.sock, {**message, "key": self.options.api_key})

    def reset(self, episode_seed: int, env_id: int = 0) -> None:
        self._call({"op": "reset", "seed": episode_seed, "env_id": env_id})

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        return decode(self._call({"op": "act", "observation": observation, "env_id": env_id})["action"])

    def close(self) -> None:
        self.file.close()
        self.sock.close()


@POLICIES.register("toyjson_remote", options=ToyJsonOptions, summary="a policy behind a toy-json server")
def make_toyjson_remote(options: Any, context: Any = None) -> ToyJsonRemote:
    return ToyJsonRemote(validate_options(ToyJsonOptions, options))


register_protocol(WireProtocol(name=PROTOCOL, server=ToyJsonServer, client="toyjson_remote", healthy=toy_healthy,
                               default_port=8765, summary="a plug-in's protocol: JSON lines over TCP"))
register_served_protocol(PROTOCOL)
