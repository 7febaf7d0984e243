"""`evalfleet submit EXP.yaml [KEY=VALUE ...] --backend osmo|ray [--dry-run] [--list-overrides] [--output-dir DIR]`

A thin parser over the chosen backend's `submit` (execution/backends.py). OSMO (execution/osmo): renders
the Experiment into one or more OSMO workflows and submits each with ``osmo workflow submit FILE -t json``,
printing the workflow IDs; `--dry-run` prints the workflow YAML (and writes it to --output-dir when given)
without needing the `osmo` CLI. Ray (execution/ray/jobs.py): the whole evaluation as one Ray job. Slurm
(execution/slurm): server jobs, the runner array and a collect job; a `stopping:` Experiment one driver job
(execution/slurm/driver.py), which `--resume --output-dir OUT` submits again after it died.
"""

from __future__ import annotations

import argparse
import sys

from evalfleet.cli.experiment_args import (
    add_arena_runner_flags,
    add_experiment_args,
    experiment_path,
    load_from_args,
    print_overrides,
)


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("submit", help="send the Experiment to a cluster (OSMO workflows or a Ray job)")
    add_experiment_args(p)
    add_arena_runner_flags(p)
    p.add_argument("--backend", required=True, help="the cluster engine: osmo, ray or slurm")
    p.add_argument("--dry-run", "--dry_run", dest="dry_run", action="store_true",
                   help="print what would be submitted; submit nothing")
    p.add_argument("--list-overrides", "--list_overrides", dest="list_overrides", action="store_true",
                   help="print every overridable key (Experiment and osmo.*/ray.*) with its value and exit")
    p.add_argument("--output-dir", metavar="DIR", default=None,
                   help="write the rendered workflow files here (default: a temporary folder)")
    p.add_argument("--resume", action="store_true",
                   help="--backend slurm: submit a new wave driver for --output-dir (its experiment.yaml by default)")
    p.add_argument("--ray-address", metavar="ADDR", default=None, help="Ray job submission address (--backend ray)")
    p.set_defaults(handler=cmd_submit)
    return p


def cmd_submit(args: argparse.Namespace) -> int:
    from evalfleet.execution.backends import get_backend
    from evalfleet.execution.waves import check_backend

    if args.resume and not (args.experiment or args.experiment_cfg) and args.output_dir:
        from pathlib import Path

        from evalfleet.layout import EXPERIMENT_FILE

        args.experiment = str(Path(args.output_dir) / EXPERIMENT_FILE)
    path = experiment_path(args)
    if args.list_overrides:
        print_overrides(args, path)
        return 0
    backend = get_backend(args.backend, address=args.ray_address)
    loaded = load_from_args(args, path)
    check_backend(loaded, args.backend)  # a `stopping:` Experiment needs waves: OSMO cannot release them
    if args.resume:
        from evalfleet.errors import UserError

        if args.backend != "slurm" or not args.output_dir:
            raise UserError("--resume needs --backend slurm and --output-dir OUT (the folder to continue)",
                            where="command line", key="--resume")
        return backend.submit(loaded, dry_run=args.dry_run, output_dir=args.output_dir, stream=sys.stdout,
                              resume=True)
    return backend.submit(loaded, dry_run=args.dry_run, output_dir=args.output_dir, stream=sys.stdout)
