"""The command line of the Slurm jobs' own steps, ``python -P -m evalfleet.backends.slurm serve|wire|collect``
(the rendered batch scripts run it; `backends.slurm.task_steps` holds what each step does). Parsing only;
`backends/slurm/__main__.py` is a shim calling `main`, like the watchdog's and OSMO's."""

from __future__ import annotations

import argparse
from pathlib import Path

from evalfleet.backends.slurm import task_steps


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m evalfleet.backends.slurm",
                                description="steps of evalfleet's Slurm jobs (run by the rendered batch scripts)")
    sub = p.add_subparsers(dest="step", required=True)
    s = sub.add_parser("serve", help="a policy server of the Experiment in OUT on this node, until SIGTERM")
    s.add_argument("--output", required=True, type=Path)
    s.add_argument("--server", required=True, help="the server's id (its address file's name)")
    w = sub.add_parser("wire", help="wait for the servers' addresses, wire the Experiment, exec the runner")
    w.add_argument("--output", required=True, type=Path)
    w.add_argument("--task", required=True, help="this array task's index")
    w.add_argument("--server", action="append", default=[], help="a server the runner needs (repeatable)")
    w.add_argument("--wait", type=float, default=1800.0, help="seconds to wait for the addresses")
    w.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the runner's command line")
    c = sub.add_parser("collect", help="Run statuses from the array tasks' Slurm states, then the report")
    c.add_argument("--output", required=True, type=Path)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.step == "serve":
        return task_steps.serve(args.output, args.server)
    if args.step == "wire":
        cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        if not cmd:
            parser().error("wire: give the runner's command after --")
        return task_steps.wire(args.output, args.task, args.server, args.wait, cmd)
    return task_steps.collect(args.output)
