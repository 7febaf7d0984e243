"""`evalfleet run`, `evalfleet runner` (one worker: shards in order) and `evalfleet watchdog`."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from evalfleet.experiment.commands import add_experiment_args, experiment_path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run the whole Experiment and collect it (local backend by default)")
    add_experiment_args(p)
    p.add_argument("--output", "-o", metavar="DIR", help="output folder (default: outputs/<name>-<time>)")
    p.add_argument("--workers", type=int, default=None, help="worker processes (default: CPU count)")
    p.add_argument("--backend", choices=["local", "ray"], default="local", help="where episodes run")
    p.add_argument("--ray-address", metavar="ADDR", default=None,
                   help="Ray cluster address (HOST:6379 or auto); default: a local Ray instance sized to this machine")
    p.add_argument("--resume", action="store_true", help="continue an interrupted output folder")
    p.add_argument("--shard-size", type=int, default=None, help="episodes per shard (default: chosen for --workers)")
    p.add_argument("--list-overrides", action="store_true", help="print every overridable key and exit")
    p.add_argument("--no-progress", action="store_true", help="no live progress bar")
    p.add_argument("--stall-timeout", type=float, default=180.0, help="restart a worker without progress for S seconds")
    p.add_argument("--startup-timeout", type=float, default=300.0, help="grace before a worker's first progress")
    p.add_argument("--max-restarts", type=int, default=3, help="relaunches of a stalled or crashed worker")
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
    p.set_defaults(handler=cmd_runner)

    from evalfleet.execution.submit import add_submit_parser
    from evalfleet.execution.watchdog import add_watchdog_parser

    add_submit_parser(sub)
    add_watchdog_parser(sub)


def cmd_run(args: argparse.Namespace) -> int:
    from evalfleet.errors import UserError
    from evalfleet.execution.output_dir import default_output, prepare_output
    from evalfleet.experiment.loading import load_experiment
    from evalfleet.experiment.validation import require_executable

    if args.resume and not (args.experiment or args.experiment_cfg) and args.output:
        args.experiment = str(Path(args.output) / "experiment.yaml")
    path = experiment_path(args)
    if args.list_overrides:
        from evalfleet.experiment.commands import print_overrides

        print_overrides(path, args.overrides)
        return 0
    workers = args.workers if args.workers is not None else (os.cpu_count() or 1)
    if args.ray_address and args.backend != "ray":
        raise UserError("--ray-address needs --backend ray", where="command line", key="--ray-address")
    if workers <= 0:
        raise UserError("--workers must be at least 1", where="command line", key="--workers")
    if args.shard_size is not None and args.shard_size <= 0:
        raise UserError("--shard-size must be a positive number of episodes", where="command line", key="--shard-size")
    loaded = load_experiment(path, args.overrides)
    require_executable(loaded.experiment.runs, path)
    out = Path(args.output) if args.output else default_output(loaded)
    if args.backend == "ray":
        from evalfleet.execution.ray_backend import check_ray_arguments

        check_ray_arguments(args.ray_address)
    prepare_output(out, loaded, resume=args.resume)
    if args.backend == "ray":
        from evalfleet.execution.ray_backend import run_ray_backend
        from evalfleet.execution.watchdog import WatchdogConfig

        watchdog = WatchdogConfig(startup_timeout=args.startup_timeout, stall_timeout=args.stall_timeout,
                                  max_restarts=args.max_restarts, poll=0.5, term_grace=5.0, backoff=1.0, backoff_max=30.0)
        return run_ray_backend(loaded, out, address=args.ray_address, workers=args.workers,
                               shard_size=args.shard_size, show_progress=not args.no_progress, watchdog=watchdog)
    return run_local(loaded, out, workers=workers, shard_size=args.shard_size, show_progress=not args.no_progress,
                     stall_timeout=args.stall_timeout, startup_timeout=args.startup_timeout,
                     max_restarts=args.max_restarts)


def run_local(loaded: Any, out: Path, *, workers: int, shard_size: int | None, show_progress: bool = True,
              stall_timeout: float = 180.0, startup_timeout: float = 300.0, max_restarts: int = 3) -> int:
    from rich.console import Console

    import yaml

    from evalfleet.execution.local import LocalRun
    from evalfleet.execution.output_dir import INTERNAL_DIR, write_atomic
    from evalfleet.execution.servers import LocalServers
    from evalfleet.execution.watchdog import WatchdogConfig
    from evalfleet.experiment.plan import make_plan

    console = Console(stderr=True)
    plan = make_plan(loaded, shard_size=shard_size, workers=workers)
    console.print(f"[bold]{loaded.experiment.name}[/]: {len(plan.runs)} Runs, {plan.total_episodes} episodes, "
                  f"{len(plan.shards)} shards on {min(workers, len(plan.shards))} workers → {out}")
    config = WatchdogConfig(startup_timeout=startup_timeout, stall_timeout=stall_timeout,
                            max_restarts=max_restarts, poll=0.5, term_grace=5.0, backoff=1.0, backoff_max=30.0)
    local = LocalRun(plan, out, workers, config, show_progress=show_progress)
    servers = LocalServers({n: rp.run for n, rp in plan.runs.items()}, loaded.experiment.server_sharing, out,
                           loaded.experiment.seed, log=console.print)
    try:
        if servers:
            servers.start()
            # Ports change from run to run, so the wiring lives beside experiment.yaml, not in it.
            wired = out / INTERNAL_DIR / "experiment.wired.yaml"
            write_atomic(wired, yaml.safe_dump(servers.wired_document(loaded.resolved_document()), sort_keys=False))
            local.experiment_file = wired
        results = local.execute()
    except KeyboardInterrupt:
        console.print(f"[yellow]interrupted[/]: every worker stopped; finished episodes are kept. "
                      f"Continue with: evalfleet run --resume --output {out}")
        return 130
    finally:
        servers.stop()
    finish_runs(plan, out, results)
    return summarise(out, console)


def finish_runs(plan: Any, out: Path, results: list[Any]) -> None:
    """Mark each Run completed or failed (with the reason a worker gave up) in its run_status.json."""
    from evalfleet.execution.output_dir import write_run_status
    from evalfleet.rollout.runner import is_decided, latest_records

    gave_up: dict[str, str] = {}
    for r in results:
        problem = r.error or (None if r.result is None or r.result.state == "completed" else r.result.reason)
        if problem:
            for shard in r.shards:
                gave_up.setdefault(shard.run, f"worker {r.worker} gave up: {problem}")
    for name, rp in plan.runs.items():
        records = latest_records(out, name)
        if rp.num_episodes is None:
            missing = 0 if records else 1
        else:
            missing = sum(1 for i in range(rp.num_episodes) if i not in records or not is_decided(records[i], rp.run.max_attempts))
        if missing and name in gave_up:
            write_run_status(out, name, state="failed", reason=f"{missing} episodes not finished; {gave_up[name]}")
        elif missing:
            write_run_status(out, name, state="failed", reason=f"{missing} episodes not finished")
        else:
            write_run_status(out, name, state="completed", reason=None)


def summarise(out: Path, console: Any) -> int:
    """Collect the folder, write the plots and index.html, print the summary table; 0 if every Run completed."""
    from rich.console import Console
    from rich.table import Table

    from evalfleet.outputs.collect import collect
    from evalfleet.outputs.report import write_report

    result = collect([str(out)], str(out))
    _write_plots(out, console)  # from the merged logs, before the report that shows them
    write_report(out)
    table = Table(title=f"results in {out}")
    for col in ("run", "task", "policy", "status", "episodes", "successes", "success rate (95% CI)", "errors"):
        table.add_column(col, justify="right" if col in ("episodes", "successes", "errors") else "left")
    ok = True
    for r in result["runs"].values():
        rate = "n/a" if r["success_rate"] is None else f"{r['success_rate']:.1%} [{r['ci95'][0]:.1%}, {r['ci95'][1]:.1%}]"
        colour = {"completed": "green", "partial": "yellow", "failed": "red"}.get(r["status"], "white")
        table.add_row(r["run"], str(r["task"]), str(r["policy"]), f"[{colour}]{r['status']}[/]",
                      str(r["decided"]), str(r["counts"]["success"]), rate, str(r["counts"]["error"]))
        ok = ok and r["status"] == "completed"
    Console(width=max(console.width, 140)).print(table)
    for r in result["runs"].values():
        if r["status"] != "completed":
            console.print(f"[red]{r['run']}[/]: {r['status']}: {r['reason']}")
    console.print(f"report: {out / 'index.html'}")
    return 0 if ok else 1


def _write_plots(out: Path, console: Any) -> None:
    import contextlib
    import io

    from evalfleet.analysis.commands import register as _  # noqa: F401 - the plot command must exist
    from evalfleet.cli import main as cli_main

    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        code = cli_main(["plot", str(out), "--output", str(out / "plots" / "success_rates.png")])
    if code != 0:  # a plot must never lose the results
        console.print(f"[yellow]plot skipped[/]: {quiet.getvalue().strip()}")


def _stop_when_orphaned(stop: threading.Event) -> None:
    """A runner whose supervisor died (e.g. SIGKILL of `evalfleet run`) stops instead of writing on
    behind the back of the next `--resume`."""
    parent = os.getppid()

    def watch() -> None:
        while not stop.wait(0.5):
            if os.getppid() != parent:
                stop.set()

    threading.Thread(target=watch, daemon=True, name="orphan-check").start()


def cmd_runner(args: argparse.Namespace) -> int:
    from evalfleet.errors import UserError
    from evalfleet.experiment.loading import load_experiment
    from evalfleet.experiment.plan import Shard, make_plan
    from evalfleet.experiment.validation import require_executable
    from evalfleet.rollout.heartbeat import HEARTBEAT_ENV, HeartbeatWriter
    from evalfleet.rollout.runner import run_shards

    path = experiment_path(args)
    loaded = load_experiment(path, args.overrides)
    require_executable(loaded.experiment.runs, path)
    plan = make_plan(loaded, workers=1)
    shards: list[Shard] = []
    for text in args.shard:
        run, _, rest = text.partition(":")
        start, _, stop = rest.partition(":")
        if run not in plan.runs or not start.isdigit() or (stop and not stop.isdigit()):
            raise UserError(f"--shard {text!r}: expected RUN:START:STOP with a Run of {path}", where="command line")
        shards.append(Shard(run, int(start), int(stop) if stop else None))
    for name in args.run:
        if name not in plan.runs:
            raise UserError(f"--run {name!r}: no such Run in {path}", where="command line")
        shards += [s for s in plan.shards if s.run == name]
    if not args.shard and not args.run:
        shards = plan.shards
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    _stop_when_orphaned(stop)
    heartbeat = HeartbeatWriter(args.heartbeat or os.environ.get(HEARTBEAT_ENV), "")
    heartbeat.beat(state="starting")
    if args.claim_dir:
        from evalfleet.execution.local import claim_shards

        shards = claim_shards(shards, Path(args.claim_dir), str(args.worker_id))
    run_shards(plan.runs, shards, Path(args.output), heartbeat=heartbeat, stop=stop)
    if stop.is_set():
        return 143
    heartbeat.done()
    return 0
