"""`evalfleet run` and `evalfleet runner`: argument parsers over the library (execution.pipeline.run,
execution.worker.run_worker) and the summary table a run ends with."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from evalfleet.cli.experiment_args import (
    add_arena_runner_flags,
    add_experiment_args,
    experiment_path,
    load_from_args,
    print_overrides,
)
from evalfleet.backend_registry import DEFAULT_BACKEND
from evalfleet.layout import EXPERIMENT_FILE, RESULT_FILE


def register(sub: argparse._SubParsersAction) -> None:
    from evalfleet.execution.watchdog import WatchdogConfig

    preset = WatchdogConfig.local()
    p = sub.add_parser("run", help="run the whole Experiment and collect it (local backend by default)",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_experiment_args(p)
    add_arena_runner_flags(p)
    p.add_argument("--output", "-o", metavar="DIR", help="output folder (default: outputs/<name>-<time>)")
    p.add_argument("--workers", type=int, default=None, help="worker processes (default: CPU count)")
    p.add_argument("--backend", default=DEFAULT_BACKEND, help="where episodes run: a registered backend (built in: "
                   "local, ray, slurm; see docs/cluster.md); its settings are overrides under its name, e.g. "
                   "ray.address=auto")
    p.add_argument("--ray-address", metavar="ADDR", default=None,
                   help="Ray cluster address (HOST:6379 or auto), the same as ray.address=ADDR; default: a local "
                   "Ray instance sized to this machine")
    p.add_argument("--resume", action="store_true", help="continue an interrupted output folder")
    p.add_argument("--shard-size", type=int, default=None, help="episodes per shard (default: chosen for --workers)")
    p.add_argument("--list-overrides", action="store_true", help="print every overridable key and exit")
    p.add_argument("--no-progress", action="store_true", help="no live progress bar")
    p.add_argument("--serve-report", metavar="[HOST:]PORT", default=None,
                   help="serve the live report while it runs (`evalfleet watch`; PORT 0: any free port), then the "
                   "final report until Ctrl-C (stdin not a terminal: until stdin is closed)")
    p.add_argument("--stall-timeout", type=float, default=preset.stall_timeout, metavar="S",
                   help="restart a worker without progress for S seconds")
    p.add_argument("--startup-timeout", type=float, default=preset.startup_timeout, metavar="S",
                   help="grace before a worker's first progress")
    p.add_argument("--max-restarts", type=int, default=preset.max_restarts, metavar="N",
                   help="relaunches of a stalled or crashed worker")
    p.add_argument("--track", action="append", default=[], metavar="SINK[:TARGET]",
                   help="also log the results to a tracker (repeatable): wandb[:PROJECT], mlflow[:TRACKING_URI], "
                   "tensorboard[:LOGDIR], trackio[:PROJECT]; the same as tracking.SINK... overrides (docs/tracking.md)")
    p.set_defaults(handler=cmd_run)

    p = sub.add_parser("runner", help="run shards of an Experiment in this process (used by backends)")
    add_experiment_args(p)
    p.add_argument("--output", "-o", required=True, metavar="DIR")
    p.add_argument("--shard", action="append", default=[], metavar="RUN:START:STOP",
                   help="a shard to run (repeatable); STOP empty for a num_steps Run; default: every shard")
    p.add_argument("--run", action="append", default=[], metavar="NAME", help="run every shard of these Runs")
    p.add_argument("--heartbeat", metavar="FILE", default=None, help="heartbeat file (default: $EVALFLEET_HEARTBEAT)")
    p.add_argument("--claim-dir", metavar="DIR", default=None,
                   help="share the shards with other workers: run only those this worker claims here")
    p.add_argument("--worker-id", default="0", help="this worker's name in --claim-dir")
    p.add_argument("--feed", metavar="DIR", default=None,
                   help="take shards from a driver's shard feed until it closes (needs --claim-dir; "
                        "execution/shard_feed.py)")
    p.set_defaults(handler=cmd_runner)


def cmd_run(args: argparse.Namespace) -> int:
    from evalfleet.execution.watchdog import WatchdogConfig

    if args.output is not None:  # a URL is refused here, naming the flag, before anything is read or written
        from evalfleet.execution.output_dir import output_folder

        output_folder(args.output)
    if args.resume and not (args.experiment or args.experiment_cfg) and args.output:
        args.experiment = str(Path(args.output) / EXPERIMENT_FILE)
    path = experiment_path(args)
    if args.list_overrides:
        print_overrides(args, path)
        return 0
    # Built first: a bad value is refused (naming its flag) before anything is written.
    from evalfleet.execution.argument_checks import check_workers

    check_workers(args.workers)
    ray_address_setting(args)
    if args.track:  # `--track mlflow:URI` is the override tracking.mlflow.tracking_uri=URI (experiment/tracking.py)
        from evalfleet.experiment.tracking import tracking_flag_overrides

        args.overrides = [*args.overrides, *tracking_flag_overrides(args.track)]
    watchdog = WatchdogConfig.local(stall_timeout=args.stall_timeout, startup_timeout=args.startup_timeout,
                                    max_restarts=args.max_restarts)
    experiment = load_from_args(args, path)  # overrides and Arena's runner flags applied
    served = None
    try:
        from evalfleet.execution.pipeline import run

        if args.serve_report is not None:  # it needs the output folder before the run names it
            from evalfleet.cli.live import ServedReport
            from evalfleet.execution.output_dir import default_output

            args.output = args.output or str(default_output(experiment))
            served = ServedReport(args.serve_report, args.output)
        result = run(experiment, output=args.output, backend=args.backend, workers=args.workers, resume=args.resume,
                     progress=not args.no_progress, shard_size=args.shard_size, watchdog=watchdog)
        print_summary(result)
        if served is not None:
            served.keep_serving()
    finally:
        if served is not None:
            served.stop()
    return result.exit_code


def ray_address_setting(args: argparse.Namespace) -> None:
    """`--ray-address ADDR` is the override ray.address=ADDR, for `--backend ray` only."""
    if args.ray_address is None:
        return
    from evalfleet.errors import UserError
    from evalfleet.experiment.overrides import format_value

    if args.backend != "ray":
        raise UserError("--ray-address needs --backend ray", where="command line", key="--ray-address")
    args.overrides = [*args.overrides, f"ray.address={format_value(args.ray_address)}"]



def print_summary(result: Any) -> None:
    """The summary table of an ExperimentResult on stderr, Runs in the Experiment's order, legible at any width."""
    import sys

    from evalfleet.outputs.summary_table import summary_table_lines
    from evalfleet.textlayout import output_width

    ordered = {**result.raw, "runs": {name: result.raw["runs"][name] for name in result.runs}}
    for line in summary_table_lines(ordered, output_width(), title=f"results in {result.output}"):
        print(line, file=sys.stderr)
    for r in result.runs.values():
        if r.status != "completed":
            print(f"{r.name}: {r.status}: {r.reason}", file=sys.stderr)
        if r.set_aside:
            print(f"{r.name}: {r.set_aside} records set aside (not this Run's planned episodes); see "
                  f"{RESULT_FILE}", file=sys.stderr)
    print(f"report: {result.report}", file=sys.stderr)


def cmd_runner(args: argparse.Namespace) -> int:
    from evalfleet.execution.worker import run_worker

    return run_worker(experiment_path(args), args.output, overrides=args.overrides, shards=args.shard, runs=args.run,
                      heartbeat=args.heartbeat, claim_dir=args.claim_dir, worker_id=args.worker_id, feed=args.feed)
