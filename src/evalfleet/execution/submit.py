"""`evalfleet submit EXP.yaml [KEY=VALUE ...] --backend osmo|ray [--dry-run] [--list-overrides] [--output-dir DIR]`

OSMO: renders the Experiment into one or more OSMO workflows (see execution/osmo.py) and submits each with
``osmo workflow submit FILE -t json``, printing the workflow IDs. `--dry-run` prints the workflow YAML (and
writes it to --output-dir when given) without needing the `osmo` CLI. Ray: hands over to the Ray backend.

Registered by `add_submit_parser(subparsers)`; also runnable as ``python -m evalfleet.execution.submit``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path


def add_submit_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    from evalfleet.experiment.commands import add_experiment_args

    p = sub.add_parser("submit", help="send the Experiment to a cluster (OSMO workflows or a Ray job)")
    add_experiment_args(p)
    p.add_argument("--backend", choices=["osmo", "ray"], required=True, help="the cluster engine")
    p.add_argument("--dry-run", "--dry_run", dest="dry_run", action="store_true",
                   help="print what would be submitted; submit nothing")
    p.add_argument("--list-overrides", "--list_overrides", dest="list_overrides", action="store_true",
                   help="print every overridable key (Experiment and osmo.*/ray.*) with its value and exit")
    p.add_argument("--output-dir", metavar="DIR", default=None,
                   help="write the rendered workflow files here (default: a temporary folder)")
    p.add_argument("--ray-address", metavar="ADDR", default=None, help="Ray job submission address (--backend ray)")
    p.set_defaults(handler=cmd_submit)
    return p


def cmd_submit(args: argparse.Namespace) -> int:
    from evalfleet.experiment.commands import experiment_path, print_overrides
    from evalfleet.experiment.loading import load_experiment

    path = experiment_path(args)
    if args.list_overrides:
        print_overrides(path, args.overrides)
        return 0
    loaded = load_experiment(path, args.overrides)
    if args.backend == "ray":
        return _submit_ray(args, loaded)
    return submit_osmo(loaded, dry_run=args.dry_run, output_dir=args.output_dir)


def _submit_ray(args: argparse.Namespace, loaded) -> int:  # noqa: ANN001
    """The whole evaluation as one Ray job (execution/ray_backend.py `submit_ray_job`)."""
    from evalfleet.errors import UserError

    if not args.ray_address:
        raise UserError("--backend ray needs --ray-address http://HEAD:8265 (the Ray Jobs API of the cluster)",
                        where="command line", key="--ray-address")
    if args.dry_run:
        print(f"# would submit a Ray job to {args.ray_address}: evalfleet run experiment.yaml --backend ray"
              " --ray-address auto --no-progress, with this experiment.yaml:")
        print(loaded.resolved_yaml(), end="")
        return 0
    try:
        from evalfleet.execution.ray_backend import submit_ray_job
    except ImportError:
        raise UserError("Ray submission is not available in this installation", where="command line",
                        key="--backend") from None
    job_id = submit_ray_job(loaded.path, list(loaded.overrides), args.ray_address)
    print(f"submitted Ray job {job_id} to {args.ray_address}")
    return 0


def submit_osmo(loaded, *, dry_run: bool, output_dir: str | None = None, out=None) -> int:  # noqa: ANN001
    from evalfleet.execution.osmo import SubmissionError, render_workflows, submit_workflows, write_workflows
    from evalfleet.execution.settings import backend_settings

    out = out or sys.stdout
    settings = backend_settings("osmo", loaded.backend_settings)
    workflows = render_workflows(loaded, settings)
    if dry_run:
        if output_dir:
            for p in write_workflows(workflows, Path(output_dir)):
                print(f"# wrote {p}", file=sys.stderr)
        if len(workflows) > 1:
            print(f"# {len(workflows)} workflows (more than osmo.max_tasks={settings.max_tasks} tasks in one)",
                  file=sys.stderr)
        out.write("---\n".join(wf.to_yaml() for wf in workflows))
        return 0
    from evalfleet.execution.osmo import osmo_executable

    osmo_executable()  # a missing CLI is an error before anything is written
    folder = Path(output_dir) if output_dir else Path(tempfile.mkdtemp(prefix="evalfleet-osmo-"))
    paths = write_workflows(workflows, folder)
    try:
        submitted = submit_workflows(paths, settings)
    except SubmissionError as exc:
        for s in exc.submitted:
            print(f"submitted {s.workflow_id} ({s.file})", file=out)
        print(f"error: {exc}", file=sys.stderr)
        if exc.submitted:
            print(f"{len(exc.submitted)} of {len(paths)} workflows were submitted before the failure",
                  file=sys.stderr)
        return 1
    for s in submitted:
        line = f"submitted {s.workflow_id} ({s.file})"
        print(line + (f" {s.overview}" if s.overview else ""), file=out)
    print("workflow IDs: " + " ".join(s.workflow_id for s in submitted), file=out)
    return 0


def main(argv: list[str] | None = None) -> int:
    from evalfleet.errors import UserError

    parser = argparse.ArgumentParser(prog="evalfleet")
    sub = parser.add_subparsers(dest="command", required=True)
    add_submit_parser(sub)
    from evalfleet.cli import normalise_argv  # Arena spellings (--experiment_cfg, --dry_run, ...)

    argv = normalise_argv(list(sys.argv[1:] if argv is None else argv))
    args, extra = parser.parse_known_args(["submit", *argv])
    if extra:  # overrides after options, as `evalfleet` takes them
        if all("=" in e and not e.startswith("-") for e in extra):
            args.overrides = [*args.overrides, *extra]
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return args.handler(args)
    except UserError as exc:
        print(f"error: {exc.line()}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
