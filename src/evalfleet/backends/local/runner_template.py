"""A template process for `evalfleet run`'s forked runners: forked by the local backend as soon as it is given the
Experiment (its `check_experiment`, before the output folder is prepared), it imports the Runs' simulators while
`run` prepares the folder, plans and starts servers, and the local backend's standby runners (standby.py) are then
forked from it instead of from `run`.

A standby forked from `run` itself imports its simulator before its first episode (Meta-World and MuJoCo:
~0.45 s of CPU, in every runner, while `run` preloads the report's modules). The template does that once,
on a core `run`'s own start leaves idle: the modules each Run's environment type lists in
`EnvironmentInfo.preload` (its adapter and simulator; never a GL module: a renderer is made in the process
that renders). When the backend asks for standbys, the template forks one per worker and exits; `run`, a
child subreaper meanwhile (Linux's PR_SET_CHILD_SUBREAPER), becomes their parent, so its watchdog waits for
and signals them as it does any standby. The template writes nothing, not even a line: whatever fails in it
fails again, reported, in the runner. Where it cannot serve (it died, the system has no subreapers), `run`
forks its standbys itself, as where no Run lists anything to preload.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import json
import os
import signal
import socket
import threading
from pathlib import Path
from typing import Any, Iterator, Sequence

from evalfleet.backends.local.standby import EvalfleetMain, StandbyRunner, can_fork, run_evalfleet, run_when_released
from evalfleet.forking import flush_std_streams, reap

PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37
MAX_STANDBYS = 250  # fds one request carries (SCM_RIGHTS takes at most 253)


class RunnerTemplate:
    """The template process, forked now (call where `standby.can_fork()` holds). `standbys(log_paths)` gets
    the forked standbys, once; `close()` ends the template if it was never asked (always call it)."""

    def __init__(self, main: EvalfleetMain, modules: Sequence[str]):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        flush_std_streams()
        pid = os.fork()
        if pid == 0:  # never returns
            ours.close()
            _serve(theirs, main, modules)
        theirs.close()
        self.pid = pid
        self._socket: socket.socket | None = ours

    def standbys(self, log_paths: Sequence[str | os.PathLike[str]], timeout: float | None = None
                 ) -> list[StandbyRunner] | None:
        """One standby per log path, forked by the template (which waits for its imports first, up to
        `timeout` seconds) and this process's children from now; None where the template cannot give them
        (then fork them here). The template exits either way."""
        if self._socket is None or not 0 < len(log_paths) <= MAX_STANDBYS:
            self.close()
            return None
        pipes = [os.pipe() for _ in log_paths]
        unsent = [read_end for read_end, _ in pipes]  # the template has its own copies once they are sent
        pids: list[int] = []
        try:
            with _subreaper():
                request = json.dumps({"logs": [os.fspath(p) for p in log_paths]}).encode()
                socket.send_fds(self._socket, [request], unsent)
                while unsent:
                    os.close(unsent.pop())
                self._socket.settimeout(timeout)
                reply = self._socket.recv(1 << 16)
                self._end()  # its standbys are reparented to this process before it is reaped
            pids = [int(pid) for pid in json.loads(reply)["pids"]]
            if len(pids) != len(pipes):
                raise ValueError(f"the template forked {len(pids)} standbys for {len(pipes)} workers")
        except (OSError, ValueError, KeyError, TypeError):
            # Standbys it forked see their pipe close and exit; any it forked before failing stays a zombie
            # child of this process until it exits (it cannot be reaped by pid without a pid).
            for fd in [*unsent, *(write_end for _, write_end in pipes)]:
                os.close(fd)
            self.close()
            for pid in pids:
                reap(pid)
            return None
        return [StandbyRunner.adopted(pid, write_end) for pid, (_, write_end) in zip(pids, pipes)]

    def close(self) -> None:
        """End the template if it still runs (it has nothing to keep) and reap it."""
        if self._socket is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self._end()

    def _end(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
            reap(self.pid)


def start_runner_template(loaded: Any, main: EvalfleetMain = run_evalfleet) -> RunnerTemplate | None:
    """A template for the local runners of `loaded`'s Runs, where they may be forked from this process
    (`standby.can_fork()`) and their environment types list modules to import ahead; else None."""
    if not can_fork():
        return None
    modules = preload_modules(loaded)
    return RunnerTemplate(main, modules) if modules else None


def preload_modules(loaded: Any) -> list[str]:
    """What the Runs' environment types list in `EnvironmentInfo.preload`, each once, in the Runs' order."""
    from evalfleet.sim.base import ENVIRONMENTS

    modules: dict[str, None] = {}
    for run in loaded.experiment.runs.values():
        entry = ENVIRONMENTS.get(run.environment.type)
        modules.update(dict.fromkeys(getattr(entry.info if entry is not None else None, "preload", ())))
    return list(modules)


def _import_all(modules: Sequence[str]) -> None:
    import evalfleet.execution.worker  # noqa: F401 - what `evalfleet runner` runs (mostly imported already)

    for module in modules:
        importlib.import_module(module)


def _serve(sock: socket.socket, main: EvalfleetMain, modules: Sequence[str]) -> None:
    """The template: quiet, `modules` imported, then fork the standbys it is asked for and exit."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is `run`'s to handle: it ends this process
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
        with contextlib.suppress(BaseException):  # the runner meets the same failure, and reports it
            _import_all(modules)
        message, fds, _, _ = socket.recv_fds(sock, 1 << 16, MAX_STANDBYS)
        if not message or threading.active_count() > 1:  # nothing asked; or unsafe to fork (an import's thread)
            os._exit(0)
        pids = []
        for read_end, log_path in zip(fds, json.loads(message)["logs"]):
            pid = os.fork()
            if pid == 0:
                sock.close()
                for fd in fds:
                    if fd != read_end:
                        os.close(fd)
                run_when_released(read_end, Path(log_path), main, [])
            pids.append(pid)
        sock.sendall(json.dumps({"pids": pids}).encode())
    finally:
        os._exit(0)


@contextlib.contextmanager
def _subreaper() -> Iterator[None]:
    """This process adopts its descendants orphaned meanwhile (the template's standbys, when it exits)."""
    libc = ctypes.CDLL(None, use_errno=True)
    before = ctypes.c_int(0)
    if libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(before), 0, 0, 0) != 0 or \
            libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_CHILD_SUBREAPER refused")
    try:
        yield
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, before.value, 0, 0, 0)
