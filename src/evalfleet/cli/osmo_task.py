"""The task-side command line the generated task scripts call: ``python -m evalfleet.backends.osmo
finish-run|finish-arena-run|arena-config`` (argument parsing; the steps are task_steps.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from evalfleet.errors import UserError
from evalfleet.backends.osmo.task_steps import finish_arena_run, finish_run, write_arena_config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evalfleet.backends.osmo")
    sub = parser.add_subparsers(dest="action", required=True)
    f = sub.add_parser("finish-run", help="write <output>/<run>/run_status.json (inside a runner task)")
    f.add_argument("--output", required=True)
    f.add_argument("--run", required=True)
    f.add_argument("--exit-code", type=int, required=True)
    f.add_argument("--task")
    f.add_argument("--policy")
    f.add_argument("--planned", type=int)
    f.add_argument("--watchdog-status")
    a = sub.add_parser("finish-arena-run", help="write run_status.json and experiment_runner_result.json"
                       " after Arena's runner (inside an Arena Run's runner task)")
    for flag in ("--output", "--run"):
        a.add_argument(flag, required=True)
    a.add_argument("--exit-code", type=int, required=True)
    a.add_argument("--task")
    a.add_argument("--policy")
    a.add_argument("--planned", type=int)
    a.add_argument("--watchdog-status")
    a.add_argument("--runs-metadata", default="{}")
    c = sub.add_parser("arena-config", help="the single-Run file for Arena's runner, secrets put back from the"
                       " variables they travel in")
    c.add_argument("--template", required=True)
    c.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    status = Path(args.watchdog_status) if getattr(args, "watchdog_status", None) else None
    if args.action == "finish-run":
        finish_run(Path(args.output), args.run, args.exit_code, task=args.task, policy=args.policy,
                   planned=args.planned, watchdog_status=status)
    elif args.action == "finish-arena-run":
        finish_arena_run(Path(args.output), args.run, args.exit_code, task=args.task, policy=args.policy,
                         planned=args.planned, watchdog_status=status, metadata=json.loads(args.runs_metadata))
    else:
        try:
            write_arena_config(Path(args.template), Path(args.output))
        except UserError as exc:
            print(f"evalfleet: error: {exc.line()}", file=sys.stderr)
            return 2
    return 0
