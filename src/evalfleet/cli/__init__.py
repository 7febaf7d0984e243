"""The `evalfleet` command: every parser and handler lives in this package, one module per command family
(`plan`: overrides, plan, variations; `run`: run, runner; `submit`; `serve`; `outputs`: collect, report;
`analysis`: plot, sensitivity, compare, power; `watchdog`; `conditions`; `live`: watch; `store`: store
add|ls|rm|query; `board`; `osmo_task` and `slurm_task`: the OSMO and Slurm task-side steps). Each
contributes its subcommands through a `register(subparsers)` function; handlers parse, call library functions
and print, and import heavy dependencies lazily so `--help` stays fast. Nothing in the library imports this
package; the three commands rendered task scripts run, `python -m evalfleet.execution.watchdog`,
`python -m evalfleet.backends.osmo` and `python -m evalfleet.backends.slurm`, are those packages' thin `__main__`
modules calling into it."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import NoReturn

from evalfleet import __version__
from evalfleet.cli.arguments import normalise_argv
from evalfleet.errors import OutOfSpace, UserError
from evalfleet.feedback import disable_cli_feedback
from evalfleet.interpreter import drop_working_folder
from evalfleet.forking import mark_command_process
from evalfleet.process_exit import exit_now

__all__ = ["build_parser", "entry", "exit_now", "main"]

# "module:function" of each command family's registration, in the order `evalfleet --help` lists them.
COMMANDS = (
    "evalfleet.cli.plan:register",  # overrides, plan, variations
    "evalfleet.cli.conditions:register",  # conditions export
    "evalfleet.cli.run:register",  # run, runner
    "evalfleet.cli.submit:register",  # submit
    "evalfleet.cli.watchdog:add_watchdog_parser",  # watchdog
    "evalfleet.cli.serve:register",  # serve
    "evalfleet.cli.outputs:register",  # collect, report
    "evalfleet.cli.live:register",  # watch
    "evalfleet.cli.trajectories:register",  # trajectories
    "evalfleet.cli.verify:register",  # verify
    "evalfleet.cli.store:register",  # store add|ls|rm|query
    "evalfleet.cli.history:register",  # history
    "evalfleet.cli.board:register",  # board
    "evalfleet.cli.analysis:register",  # plot, sensitivity, compare, power
    "evalfleet.cli.reference:register",  # reference
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evalfleet", description="Evaluate robot-manipulation policies in simulation at scale."
    )
    parser.add_argument("--version", action="version", version=f"evalfleet {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for spec in COMMANDS:
        module_name, _, function = spec.partition(":")
        getattr(importlib.import_module(module_name), function)(sub)
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The command line read the one way every command takes it: Arena's spellings (`--experiment_cfg`,
    `--dry_run`) accepted, and overrides (KEY=VALUE) also after options."""
    args, extra = parser.parse_known_args(normalise_argv(argv))
    # argparse stops taking positionals after an option: `plan EXP --json KEY=VALUE` leaves the
    # overrides over; they belong with the others.
    if extra:
        if hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
            args.overrides = [*args.overrides, *extra]
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parse(parser, list(sys.argv[1:] if argv is None else argv))
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        code = args.handler(args)
        sys.stdout.flush()  # here, not at exit: a reader that went away (`| head`) is seen below
    except BrokenPipeError:
        # The reader of our output closed it (`evalfleet overrides EXP | head`): that is a normal end.
        _silence_stdout()
        return 0
    except (UserError, OutOfSpace) as exc:
        print(f"evalfleet: error: {exc.line()}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("evalfleet: interrupted", file=sys.stderr)
        return 130
    finally:
        disable_cli_feedback()  # a handler's stderr feedback ends with its command
    return int(code or 0)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout without a file descriptor (captured in tests)
        pass


def entry() -> NoReturn:
    """The `evalfleet` console script and `python -m evalfleet.cli`. The latter has the working folder
    first on sys.path: dropped before anything else is imported (the console script has its bin/ there)."""
    drop_working_folder()
    mark_command_process()  # evalfleet's own process: the local backend may fork its runners from it
    exit_now(main())
