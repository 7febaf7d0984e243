"""`evalfleet conditions export`: write a plan's episode conditions as a condition set (issue #25)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from evalfleet.cli.experiment_args import add_experiment_args, experiment_path
from evalfleet.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("conditions", help="condition sets: the planned episodes' conditions, for replay by any policy")
    actions = p.add_subparsers(dest="conditions_command", metavar="ACTION")
    e = actions.add_parser("export", help="write every planned episode's seed, initial state and variation values "
                           "per task, with a content hash; a Run's `conditions: FILE` replays them")
    add_experiment_args(e)
    e.add_argument("--output", "-o", required=True, metavar="FILE.json", help="the condition set file to write")
    e.add_argument("--run", action="append", default=None, metavar="NAME",
                   help="export this Run's conditions only (repeatable; default: every Run)")
    e.add_argument("--force", action="store_true", help="replace FILE.json if it exists")
    e.set_defaults(handler=cmd_export)
    p.set_defaults(handler=lambda args: p.print_help() or 2)


def cmd_export(args: argparse.Namespace) -> int:
    from evalfleet.experiment.condition_export import export_conditions
    from evalfleet.experiment.loading import load_experiment
    from evalfleet.outputs.storage import atomic_write_bytes

    output = _output(args.output, args.force)
    loaded = load_experiment(experiment_path(args), args.overrides)
    doc = export_conditions(loaded, args.run)
    try:
        atomic_write_bytes(output, (json.dumps(doc, indent=1, allow_nan=False) + "\n").encode())
    except OSError as exc:  # a folder that does not exist or cannot be written: the user's to fix
        raise UserError(f"cannot write it ({exc.strerror or exc}); give a file in a folder you can write",
                        where=str(output), key="--output") from None
    n = sum(len(t["conditions"]) for t in doc["tasks"].values())
    print(f"wrote {n} conditions of {len(doc['tasks'])} task(s) to {output} (sha256 {doc['sha256'][:12]})")
    return 0


def _output(given: str, force: bool) -> Path:
    """A local .json file; an existing one only with --force (Experiments that replay it would change)."""
    if "://" in given:
        raise UserError("expected a local file path, not a URL", where="command line", key="--output")
    path = Path(given)
    if path.suffix.lower() != ".json":
        raise UserError(f"expected a file ending in .json, got {path.name!r}", where="command line", key="--output")
    if path.is_dir():
        raise UserError("is a folder; give a file name", where=str(path), key="--output")
    if path.exists() and not force:
        raise UserError("the file exists, and Experiments that replay it would change; give another file or "
                        "--force to replace it", where=str(path), key="--output")
    return path
