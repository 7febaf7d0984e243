"""The Experiment file and its overrides on the command line, as every command that loads one takes them:
`EXP.yaml [KEY=VALUE ...]` or Arena's `--experiment-cfg EXP.yaml`; Arena's runner flags `--policy_config FILE`
and `--continue_on_error` (plan, overrides, run, submit); the listing of every overridable key."""

from __future__ import annotations

import argparse

from evalfleet.errors import UserError


def add_experiment_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("experiment", nargs="?", metavar="EXP.yaml", help="the Experiment file")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="overrides, e.g. runs.NAME.rollout_limit.num_episodes=4")
    p.add_argument("--experiment-cfg", dest="experiment_cfg", metavar="EXP.yaml",
                   help="the Experiment file (Arena spelling)")


def add_arena_runner_flags(p: argparse.ArgumentParser) -> None:
    """Arena's experiment runner flags, in Arena's spelling and evalfleet's."""
    p.add_argument("--policy-config", "--policy_config", dest="policy_config", metavar="FILE", default=None,
                   help="one policy section (type: and its options) that replaces every Run's policy: whole, "
                        "before KEY=VALUE overrides (Arena's --policy_config)")
    p.add_argument("--continue-on-error", "--continue_on_error", dest="continue_on_error", action="store_true",
                   help="Arena's runner goes on with the next Run when one fails; evalfleet always does (a failed "
                        "Run never stops the others); carried to Arena's runner in OSMO Arena tasks")


def load_from_args(args: argparse.Namespace, path: str):  # -> experiment.loading.LoadedExperiment
    """The Experiment as the command line gives it: the file, the overrides and Arena's runner flags."""
    from evalfleet.experiment.loading import load_experiment

    return load_experiment(path, args.overrides, policy_config=getattr(args, "policy_config", None),
                           continue_on_error=getattr(args, "continue_on_error", False))


def experiment_path(args: argparse.Namespace) -> str:
    path = args.experiment_cfg or args.experiment
    if args.experiment_cfg and args.experiment:
        # With --experiment-cfg the first positional is an override.
        args.overrides = [args.experiment, *args.overrides]
    if not path:
        raise UserError("give an Experiment file: evalfleet COMMAND EXP.yaml [KEY=VALUE ...]", where="command line")
    return path


def print_overrides(args: argparse.Namespace, path: str) -> None:
    """Every overridable key with its effective value: the Experiment's, then the backends' (osmo.*, ray.*)."""
    from evalfleet.experiment.listing import backend_setting_leaves, format_leaves, overridable_leaves

    loaded = load_from_args(args, path)
    for line in format_leaves(overridable_leaves(loaded.experiment, loaded.document)):
        print(line)
    for line in backend_setting_leaves(loaded.backend_settings):
        print(line)
