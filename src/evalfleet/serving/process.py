"""Running policy servers: in a background thread (tests, benchmarks, in-process bindings) or as a
subprocess with its own log (`ServerProcess`, what the local backend uses).

    proc = ServerProcess(["evalfleet", "serve", "zero", "--protocol", "openpi", "--port", "{port}"],
                         protocol="openpi", log_path=out / run / "server.log")
    proc.start()                  # picks a free port on 127.0.0.1 unless one is given
    proc.wait_healthy(120)        # InfrastructureError if it exits or the deadline passes
    options = {**policy_options, "host": proc.host, "port": proc.port}
    ...
    if not proc.is_alive(): proc.restart()   # same port, so clients reconnect on their own
    proc.stop()                   # SIGTERM to its process group, SIGKILL after the grace period
"""

from __future__ import annotations

import asyncio
import atexit
import os
import signal
import socket
import subprocess
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Sequence

from evalfleet.errors import InfrastructureError
from evalfleet.interpreter import python_command
from evalfleet.serving.protocols import wire_protocol

LOG_TAIL_LINES = 20
LOG_TAIL_CHARS = 2000


def printable_tail(path: str | os.PathLike[str], *, lines: int = LOG_TAIL_LINES, max_chars: int = LOG_TAIL_CHARS,
                   secrets: Sequence[str | None] = ()) -> str:
    """The last `lines` lines of a log (read from its end, however big it is), at most `max_chars`, with
    non-printable characters (escapes, bidi controls) shown as `?` and secrets masked: safe for an error message."""
    from evalfleet.secrets import mask_text, mask_url

    try:
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            size = log.tell()
            log.seek(max(size - 4 * max_chars, 0))
            raw = log.read()
    except OSError:
        return ""
    decoded = raw.decode("utf-8", errors="replace").replace("\r\n", "\n")
    text = "".join(c if c.isprintable() or c in "\n\t" else "?" for c in decoded)  # no escapes, no bidi tricks
    text = mask_url(mask_text(text, [s for s in secrets if s and len(s) >= 4]))
    tail = "\n".join(text.splitlines()[-lines:])
    return tail if len(tail) <= max_chars else "..." + tail[-max_chars:]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def check_health(protocol: str, host: str, port: int, *, api_key: str | None = None, timeout_s: float = 1.0) -> bool:
    """One health probe, the protocol's own (openpi `GET /healthz`, vla-eval `GET /health`, GR00T `ping`)."""
    connect_host = "127.0.0.1" if host in ("0.0.0.0", "*", "") else host
    return wire_protocol(protocol).healthy(connect_host, port, api_key=api_key, timeout_s=timeout_s)


# ===================================================================== in a thread


class ServerThread:
    """Run a policy server (`OpenpiServer`, `Gr00tServer`, anything with `async serve(stop, ready)`) on its own event
    loop in a daemon thread. `with ServerThread(server) as t: ... t.port`"""

    def __init__(self, server: Any):
        self.server = server
        self.host: str = getattr(server, "host", "127.0.0.1")
        self.port: int | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="policy-server", daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()

            def ready(host: str, port: int) -> None:
                self.host, self.port = host, port
                self._ready.set()

            await self.server.serve(self._stop, ready)

        try:
            asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001 - reported by start()
            self._error = exc
        finally:
            self._ready.set()

    def start(self, timeout_s: float = 10.0) -> "ServerThread":
        self._thread.start()
        if not self._ready.wait(timeout_s) or self.port is None:
            raise InfrastructureError(f"in-process server did not start: {self._error!r}")
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout_s)

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


# ===================================================================== as a subprocess


_LIVE: "weakref.WeakSet[ServerProcess]" = weakref.WeakSet()


@atexit.register
def _stop_leftovers() -> None:
    for proc in list(_LIVE):
        proc.stop(grace_s=2.0)


class ServerProcess:
    """A policy server subprocess with a health check, a log file, a stable port and a clean stop.

    `argv` may contain `{host}` and `{port}` placeholders. A leading `evalfleet` runs this Python's
    evalfleet (`python -m evalfleet.cli`), so it works without the console script on PATH.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        protocol: str,
        log_path: str | os.PathLike[str],
        host: str = "127.0.0.1",
        port: int | None = None,
        env: dict[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        api_key: str | None = None,
        name: str = "policy server",
    ):
        wire_protocol(protocol)  # a ValueError for an unknown one
        self.argv_template = list(argv)
        self.protocol = protocol
        self.log_path = Path(log_path)
        self.host = host
        self.port = port
        self.env = dict(env or {})
        self.cwd = cwd
        self.api_key = api_key
        self.name = name
        self.starts = 0
        self._proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc else None

    def argv(self) -> list[str]:
        argv = [a.replace("{host}", self.host).replace("{port}", str(self.port)) for a in self.argv_template]
        if argv and argv[0] == "evalfleet":  # never with the current folder on its sys.path
            argv = [*python_command(), "-m", "evalfleet.cli", *argv[1:]]
        return argv

    def start(self) -> "ServerProcess":
        if self.is_alive():
            return self
        if self.port is None:
            self.port = free_port(self.host if self.host not in ("0.0.0.0", "*") else "127.0.0.1")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = self.argv()
        with open(self.log_path, "ab") as log:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            log.write(f"=== {stamp} starting {self.name} ({self.protocol}) on {self.host}:{self.port}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.cwd,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
                start_new_session=True,  # its own process group: stop() reaches its children too
            )
        self.starts += 1
        _LIVE.add(self)
        return self

    def is_alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def healthy(self, timeout_s: float = 1.0) -> bool:
        return self.is_alive() and check_health(
            self.protocol, self.host, int(self.port or 0), api_key=self.api_key, timeout_s=timeout_s
        )

    def log_tail(self, lines: int = LOG_TAIL_LINES, max_chars: int = LOG_TAIL_CHARS) -> str:
        """The end of the log as an error message may show it: the last `lines` lines, at most `max_chars`,
        non-printable characters replaced, the server's key and URL credentials masked (whatever the server printed)."""
        from evalfleet.secrets import looks_secret

        return printable_tail(self.log_path, lines=lines, max_chars=max_chars,
                              secrets=[self.api_key, *(v for k, v in self.env.items() if looks_secret(k))])

    def raise_if_exited(self) -> None:
        """InfrastructureError at once when the process has ended (it will never be ready), with its log's end."""
        if self._proc is None:
            raise InfrastructureError(f"{self.name} was never started")
        code = self._proc.poll()
        if code is not None:
            raise InfrastructureError(f"{self.name} exited with code {code} before it was ready; the end of its log"
                                      f" {self.log_path}:\n{self.log_tail()}")

    def not_ready_error(self, timeout_s: float) -> InfrastructureError:
        return InfrastructureError(f"{self.name} on {self.host}:{self.port} not healthy within {timeout_s:g} s;"
                                   f" the end of its log {self.log_path}:\n{self.log_tail()}")

    def wait_healthy(self, timeout_s: float = 120.0, poll_s: float = 0.1) -> None:
        """Until the health probe answers; an InfrastructureError as soon as the process exits, or at the deadline."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.raise_if_exited()
            remaining = deadline - time.monotonic()
            if self.healthy(timeout_s=max(min(1.0, remaining), 0.05)):
                return
            if remaining <= 0:
                raise self.not_ready_error(timeout_s)
            time.sleep(min(poll_s, max(remaining, 0)))

    def stop(self, grace_s: float = 10.0) -> int | None:
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                proc.wait()
        _LIVE.discard(self)
        return proc.returncode

    def kill(self) -> None:
        """SIGKILL now (what a crash looks like; used by tests)."""
        if self.is_alive():
            self._signal(signal.SIGKILL)
            assert self._proc is not None
            self._proc.wait()

    def _signal(self, sig: int) -> None:
        assert self._proc is not None
        try:
            os.killpg(self._proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            try:
                self._proc.send_signal(sig)
            except ProcessLookupError:
                pass

    def restart(self, timeout_s: float = 120.0) -> None:
        """Stop (if needed) and start again on the same port, then wait for health."""
        self.stop()
        self.start()
        self.wait_healthy(timeout_s)

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def server_for(protocol: str, policy: Any, **kwargs: Any) -> Any:
    """The protocol's server (`OpenpiServer`, `VlaEvalServer`, `Gr00tServer`, ...) for `policy`
    (kwargs: host, port, api_key, max_batch, max_wait_ms, max_message_bytes, spec, ...)."""
    return wire_protocol(protocol).server(policy, **kwargs)


ReadyCallback = Callable[[str, int], None]
