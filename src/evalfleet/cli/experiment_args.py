"""The Experiment file and its overrides on the command line, as every command that loads one takes them:
`EXP.yaml [KEY=VALUE ...]` or Arena's `--experiment-cfg EXP.yaml`, and the listing of every overridable key."""

from __future__ import annotations

import argparse

from evalfleet.errors import UserError


def add_experiment_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("experiment", nargs="?", metavar="EXP.yaml", help="the Experiment file")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="overrides, e.g. runs.NAME.rollout_limit.num_episodes=4")
    p.add_argument("--experiment-cfg", dest="experiment_cfg", metavar="EXP.yaml",
                   help="the Experiment file (Arena spelling)")


def experiment_path(args: argparse.Namespace) -> str:
    path = args.experiment_cfg or args.experiment
    if args.experiment_cfg and args.experiment:
        # With --experiment-cfg the first positional is an override.
        args.overrides = [args.experiment, *args.overrides]
    if not path:
        raise UserError("give an Experiment file: evalfleet COMMAND EXP.yaml [KEY=VALUE ...]", where="command line")
    return path


def print_overrides(path: str, overrides: list[str]) -> None:
    """Every overridable key with its effective value: the Experiment's, then the backends' (osmo.*, ray.*)."""
    from evalfleet.execution.settings import backend_setting_leaves
    from evalfleet.experiment.listing import format_leaves, overridable_leaves
    from evalfleet.experiment.loading import load_experiment

    loaded = load_experiment(path, overrides)
    for line in format_leaves(overridable_leaves(loaded.experiment, loaded.document)):
        print(line)
    for line in backend_setting_leaves(loaded.backend_settings):
        print(line)
