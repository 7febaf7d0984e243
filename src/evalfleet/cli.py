"""The `evalfleet` command. Each package contributes its subcommands through a `register(subparsers)`
function in its `commands` module; handlers import heavy dependencies lazily so `--help` stays fast."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import NoReturn

from evalfleet import __version__
from evalfleet.arguments import normalise_argv
from evalfleet.errors import UserError
from evalfleet.feedback import disable_cli_feedback
from evalfleet.interpreter import drop_working_folder
from evalfleet.process_exit import exit_now

COMMAND_MODULES = (
    "evalfleet.experiment.commands",  # overrides, plan, variations
    "evalfleet.execution.commands",  # run, runner, submit, watchdog
    "evalfleet.serving.commands",  # serve
    "evalfleet.outputs.commands",  # collect, report
    "evalfleet.analysis.commands",  # plot, sensitivity, compare, power
)

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evalfleet", description="Evaluate robot-manipulation policies in simulation at scale."
    )
    parser.add_argument("--version", action="version", version=f"evalfleet {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue  # that package has no commands yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = normalise_argv(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # argparse stops taking positionals after an option: `plan EXP --json KEY=VALUE` leaves the
    # overrides over; they belong with the others.
    if extra:
        if hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
            args.overrides = [*args.overrides, *extra]
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    args.main = main  # a handler may run another `evalfleet` command in this process (a forked runner)
    try:
        code = args.handler(args)
        sys.stdout.flush()  # here, not at exit: a reader that went away (`| head`) is seen below
    except BrokenPipeError:
        # The reader of our output closed it (`evalfleet overrides EXP | head`): that is a normal end.
        _silence_stdout()
        return 0
    except UserError as exc:
        print(f"evalfleet: error: {exc.line()}", file=sys.stderr)
        return 2
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
    exit_now(main())


if __name__ == "__main__":
    entry()
