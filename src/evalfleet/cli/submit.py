"""`evalfleet submit EXP.yaml [KEY=VALUE ...] --backend osmo|ray [--dry-run] [--list-overrides] [--output-dir DIR]`

A thin parser over the chosen backend's `submit` (execution/backends.py). OSMO (backends/osmo): renders
the Experiment into one or more OSMO workflows and submits each with ``osmo workflow submit FILE -t json``,
printing the workflow IDs; `--dry-run` prints the workflow YAML (and writes it to --output-dir when given)
without needing the `osmo` CLI. Ray (backends/ray/jobs.py): the whole evaluation as one Ray job. Slurm
(backends/slurm): server jobs, the runner array and a collect job; a `stopping:` Experiment one driver job
(backends/slurm/driver.py), which `--resume --output-dir OUT` submits again after it died.
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
    p.add_argument("--backend", required=True, help="the cluster engine: a registered backend that submits (built in: "
                   "osmo, ray, slurm; `evalfleet overrides EXP` lists every backend's settings)")
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
    from evalfleet.backend_registry import spec_of
    from evalfleet.cli.run import ray_address_setting
    from evalfleet.execution.backends import check_capabilities, either, get_backend

    if args.resume and not (args.experiment or args.experiment_cfg) and args.output_dir:
        from pathlib import Path

        from evalfleet.layout import EXPERIMENT_FILE

        args.experiment = str(Path(args.output_dir) / EXPERIMENT_FILE)
    path = experiment_path(args)
    if args.list_overrides:
        print_overrides(args, path)
        return 0
    ray_address_setting(args)  # --ray-address is the setting ray.address
    loaded = load_from_args(args, path)
    backend = get_backend(args.backend, loaded.backend_settings)
    check_capabilities(loaded, args.backend, submitting=True)  # e.g. a `stopping:` Experiment needs waves
    if args.resume:
        from evalfleet.backend_registry import BACKENDS
        from evalfleet.errors import UserError

        if not spec_of(args.backend).resubmits or not args.output_dir:
            able = either(n for n in BACKENDS.names() if spec_of(n).resubmits)
            raise UserError(f"--resume needs --backend {able} and --output-dir OUT (the folder to continue)",
                            where="command line", key="--resume")
        return backend.submit(loaded, dry_run=args.dry_run, output_dir=args.output_dir, stream=sys.stdout,
                              resume=True)
    return backend.submit(loaded, dry_run=args.dry_run, output_dir=args.output_dir, stream=sys.stdout)
