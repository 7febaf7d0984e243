"""Runners forked from `evalfleet run` itself for their first attempt, instead of started afresh.

A fresh `python -m evalfleet.cli runner` spends ~0.4 s of CPU before its first episode: the interpreter,
evalfleet's imports, every plugin module, the Experiment loaded and validated again. A fork of the `run`
process has all of that already. So the local backend forks one *standby* child per worker before it
starts any thread, and each worker's watchdog releases its standby when it launches attempt 1, sending
the command and environment that attempt would have been started with; the child then runs that
command in place (`python -m evalfleet.cli runner ...` run by `runpy`, as the interpreter would), in its own
session, with its output in the worker's log, as a started runner would. Restarts are fresh processes, as are
all runners of the other backends.

Only in the `evalfleet` command's own process (`forking.command_process()`: a library caller's process is not
ours to fork), and only where forking is safe: Linux, and a process with one thread (fork copies only the calling
thread, so a lock another thread held would stay held in the child). `local.fresh_runners=true` or
EVALFLEET_FRESH_RUNNERS=1 turns it off (0, or unset: on; another value is refused, exit 2, before anything is
written).
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
from pathlib import Path
from typing import Callable, Sequence

from evalfleet.errors import UserError
from evalfleet.forking import command_process, flush_std_streams, fork_allowed, reap
from evalfleet.interpreter import drop_working_folder, python_command
from evalfleet.process_exit import exit_now

FRESH_RUNNERS_ENV = "EVALFLEET_FRESH_RUNNERS"
RUNNER_MODULE = "evalfleet.cli"


_FLAG_VALUES = {"": False, "0": False, "false": False, "no": False, "off": False,
                "1": True, "true": True, "yes": True, "on": True}


def fresh_runners_requested() -> bool:
    """Whether EVALFLEET_FRESH_RUNNERS asks for new processes only; an unknown value is the user's to fix."""
    value = os.environ.get(FRESH_RUNNERS_ENV, "").strip().lower()
    if value not in _FLAG_VALUES:
        raise UserError(f"{FRESH_RUNNERS_ENV}={os.environ[FRESH_RUNNERS_ENV]!r}: expected 1 (every runner a new "
                        "process) or 0 (first attempts forked from `evalfleet run`); set one or unset it",
                        where="environment", key=FRESH_RUNNERS_ENV)
    return _FLAG_VALUES[value]


def can_fork() -> bool:
    return command_process() and fork_allowed() and not fresh_runners_requested()


def runner_argv(cmd: Sequence[str]) -> list[str] | None:
    """The `evalfleet` arguments of a runner command this process could run itself (same interpreter,
    `-m evalfleet.cli`, with or without `-P`: the child drops the working folder from `sys.path` itself),
    else None."""
    cmd = list(cmd)
    start = len(python_command()) if cmd[:len(python_command())] == python_command() else 1  # with -P or not
    if cmd[:1] != [sys.executable] or cmd[start:start + 3] != ["-m", RUNNER_MODULE, "runner"]:
        return None
    return cmd[start + 2:]


class ForkedProcess:
    """What the watchdog uses of a subprocess.Popen (pid, returncode, wait), for a child forked here."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def wait(self) -> int:
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)  # negative: killed by that signal, as Popen
        return self.returncode


EvalfleetMain = Callable[[list[str]], int]  # runs `evalfleet ARGV` in this process: the exit code


def run_evalfleet(argv: list[str]) -> int:
    """`python -m evalfleet.cli ARGV` in this process, as the interpreter runs it (`runpy`): the command a standby
    was released to run. The command ends the process itself."""
    import runpy

    sys.argv = [RUNNER_MODULE, *argv]
    runpy.run_module(RUNNER_MODULE, run_name="__main__", alter_sys=True)
    return 0


class StandbyRunner:
    """A forked child waiting to become one runner. `release(cmd, env)` starts it (it runs `main` on the
    command's `evalfleet` arguments) and returns its ForkedProcess; `discard()` ends it unused. If this
    process dies first, the child sees its pipe close and exits."""

    _parent_ends: list[int] = []  # the write ends of every standby's pipe: a new child must not hold them

    def __init__(self, log_path: str | os.PathLike[str], main: EvalfleetMain = run_evalfleet):
        read_end, write_end = os.pipe()
        flush_std_streams()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(write_end)
            run_when_released(read_end, Path(log_path), main, StandbyRunner._parent_ends)
        os.close(read_end)
        self._hold(pid, write_end)

    @classmethod
    def adopted(cls, pid: int, write_end: int) -> StandbyRunner:
        """A standby another process forked (backends/local/runner_template.py) that is this process's child now,
        waiting on the pipe whose write end this is."""
        standby = cls.__new__(cls)
        standby._hold(pid, write_end)
        return standby

    def _hold(self, pid: int, write_end: int) -> None:
        self.pid = pid
        self._write_end: int | None = write_end
        StandbyRunner._parent_ends.append(write_end)

    def release(self, cmd: Sequence[str], env: dict[str, str], cwd: str | os.PathLike[str] | None = None
                ) -> ForkedProcess:
        argv = runner_argv(cmd)
        if argv is None:
            raise ValueError(f"not a runner command this process can run: {' '.join(map(str, cmd))}")
        message = json.dumps({"argv": argv, "env": env, "cwd": None if cwd is None else str(cwd)}).encode()
        try:
            view = memoryview(message)
            while view:
                view = view[os.write(self._require_open(), view):]
        except OSError:  # the child is gone (a closed pipe): reap it; the watchdog starts a fresh process
            self._close()
            reap(self.pid)
            raise
        self._close()
        return ForkedProcess(self.pid)

    def discard(self) -> None:
        if self._write_end is None:
            return
        self._close()  # the child reads an empty message and exits
        reap(self.pid)

    def _require_open(self) -> int:
        if self._write_end is None:
            raise RuntimeError("this standby runner was already released or discarded")
        return self._write_end

    def _close(self) -> None:
        if self._write_end is not None:
            os.close(self._write_end)
            StandbyRunner._parent_ends.remove(self._write_end)
            self._write_end = None


def run_when_released(read_end: int, log_path: Path, main: EvalfleetMain, inherited_ends: list[int]) -> None:
    """In the forked child: become what a started runner would be, wait for the command, run it, exit."""
    import atexit

    code = 1
    try:
        os.setsid()  # its own process group at once: the watchdog signals the group (start_new_session)
        # The other standbys' pipes (raw descriptors, no Python object holds them): else a standby whose
        # parent died would wait on, held open by its sibling. Other inherited descriptors stay: closing one
        # under a Python file object would let that object later close or write whatever reuses its number.
        for fd in inherited_ends:
            try:
                os.close(fd)
            except OSError:
                pass
        # What a fresh interpreter would have: no exit handlers, default signal handling.
        atexit._clear()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        try:
            signal.set_wakeup_fd(-1)
        except ValueError:
            pass
        data = bytearray()
        while chunk := os.read(read_end, 65536):
            data += chunk
        os.close(read_end)
        if not data:  # discarded, or the parent went away
            os._exit(0)
        message = json.loads(data)
        drop_working_folder()  # as `-P` would: the folder `python -m evalfleet.cli run` ran in (before chdir)
        _redirect(log_path)
        os.environ.clear()
        os.environ.update(message["env"])
        if message.get("cwd"):
            os.chdir(message["cwd"])
        if "numpy" in sys.modules:  # a fresh process would not share the parent's global random stream
            sys.modules["numpy"].random.seed()
        # What came from the parent lives until exit: out of the collector's way (its full collections then
        # skip ~45k objects, ~40 ms a runner) and of copy-on-write pages the collector would touch.
        gc.freeze()
        code = main(message["argv"])
    except SystemExit as exc:  # argparse errors, sys.exit() in a handler
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - as an uncaught exception in a started runner: traceback, exit 1
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        exit_now(code)


def _redirect(log_path: Path) -> None:
    """stdin from /dev/null, stdout and stderr appended to the worker's log, written through line by line
    (a started runner gets PYTHONUNBUFFERED)."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True, write_through=True)
        except (AttributeError, ValueError):
            pass
