"""The watchdog: supervise a runner process, restart it when it stalls or dies, stop it cleanly.

The command line of `evalfleet watchdog` and `python -m evalfleet.execution.watchdog` (that package's `__main__`
calls `main` here; flags, exit codes and liveness rules: `evalfleet.execution.watchdog` and docs/watchdog.md):
argument parsing and calls of the library only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import threading
import types
from pathlib import Path
from typing import Any

from evalfleet.errors import UserError
from evalfleet.execution.watchdog.config import FLAGS, WatchdogConfig, config_problems
from evalfleet.execution.watchdog.process import Watchdog

EXIT_USAGE = 2


# The tuning flags before --heartbeat, as `--help` lists them: flag, metavar, what it does; the default is
# WatchdogConfig's and the type that of the default.
_TIMING_FLAGS = (
    ("--startup-timeout", "S", "grace before the first progress heartbeat"),
    ("--stall-timeout", "S", "restart when steps/episodes do not change for this long"),
    ("--max-restarts", "N", "relaunch at most N times, then give up with exit code 1"),
)
# ... and those after it.
_RETRY_FLAGS = (
    ("--poll", "S", "how often to read the heartbeat"),
    ("--term-grace", "S", "SIGKILL this long after SIGTERM"),
    ("--backoff", "S", "wait before the first relaunch, doubled each time"),
    ("--backoff-max", "S", "longest wait between relaunches"),
)


def _add_settings(parser: argparse.ArgumentParser, flags: tuple[tuple[str, str, str], ...]) -> None:
    defaults = WatchdogConfig()
    for flag, metavar, text in flags:
        default = getattr(defaults, flag[2:].replace("-", "_"))
        parser.add_argument(flag, type=type(default), default=default, metavar=metavar,
                            help=f"{text} (default {default:g})")


def add_watchdog_arguments(parser: argparse.ArgumentParser) -> None:
    _add_settings(parser, _TIMING_FLAGS)
    parser.add_argument("--heartbeat", metavar="FILE", default=None,
                        help="heartbeat file passed to the child as EVALFLEET_HEARTBEAT (default: a temporary file)")
    _add_settings(parser, _RETRY_FLAGS)
    parser.add_argument("--status-file", metavar="FILE", default=None,
                        help="write the watchdog state, reason and attempts here as JSON")
    parser.add_argument("--liveness-from-files", metavar="GLOB", action="append", default=[],
                        help="judge liveness from the growth of files matching GLOB (repeatable; {attempt} is the"
                             " attempt number) instead of a heartbeat the child writes")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ...", help="the command to supervise")


def add_watchdog_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `evalfleet watchdog` on the CLI's subparsers (handler: `watchdog_command`)."""
    parser = subparsers.add_parser(
        "watchdog",
        help="supervise a runner: restart it when it stalls or dies",
        description=(__doc__ or "").split("\n\n")[0],
        epilog="exit codes: 0 completed, 1 gave up, 2 bad usage, 130/143 stopped by SIGINT/SIGTERM",
    )
    add_watchdog_arguments(parser)
    parser.set_defaults(handler=watchdog_command)
    return parser


def config_from_args(args: argparse.Namespace) -> WatchdogConfig:
    values = {name: getattr(args, name) for name in FLAGS}
    probe = types.SimpleNamespace(**values, backoff_factor=WatchdogConfig.backoff_factor)
    for name, problem in config_problems(probe):
        raise UserError(problem, where="command line", key=FLAGS.get(name, name))
    return WatchdogConfig(**values)


def command_from_args(args: argparse.Namespace) -> list[str]:
    cmd = list(args.cmd or [])
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UserError("give the command to supervise after --, e.g. `evalfleet watchdog -- evalfleet runner ...`",
                        where="command line")
    exe = cmd[0]
    found = shutil.which(exe) if os.sep not in exe else (exe if os.access(exe, os.X_OK) else None)
    if found is None:
        raise UserError(f"command not found or not executable: {exe!r}", where="command line", key="CMD")
    return cmd


def watchdog_command(args: argparse.Namespace) -> int:
    """Handler of `evalfleet watchdog`. Installs SIGTERM/SIGINT handlers (main thread only)."""
    config = config_from_args(args)
    for pattern in getattr(args, "liveness_from_files", None) or ():
        try:
            pattern.format(attempt=1)
        except (KeyError, IndexError, ValueError) as exc:
            raise UserError(f"{pattern!r} is not a glob with an optional {{attempt}} ({exc}); write literal braces"
                            " as {{ and }}", where="command line", key="--liveness-from-files") from None
    cmd = command_from_args(args)
    tmpdir = None
    if args.heartbeat:
        heartbeat = Path(args.heartbeat)
    else:
        tmpdir = tempfile.mkdtemp(prefix="evalfleet-watchdog-")
        heartbeat = Path(tmpdir) / "heartbeat.json"
    watchdog = Watchdog(cmd, heartbeat, config, status_file=args.status_file,
                        liveness_files=getattr(args, "liveness_from_files", None) or ())

    def on_signal(signum: int, frame: Any) -> None:
        watchdog.stop_signal = signum  # the loop notices within one poll

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, on_signal)
    try:
        result = watchdog.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)
    return result.watchdog_exit_code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m evalfleet.execution.watchdog",
        description=(__doc__ or "").split("\n\n")[0],
    )
    add_watchdog_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return watchdog_command(args)
    except UserError as exc:
        print(f"evalfleet: error: {exc.line()}", file=sys.stderr)
        return EXIT_USAGE
