"""Arena's spellings of `evalfleet`'s flags (`--experiment_cfg`, `--dry_run`, ...), read as the dashed ones."""

from __future__ import annotations

# Arena users type underscores; accept them as aliases of the dashed flags.
FLAG_ALIASES = {
    "--experiment_cfg": "--experiment-cfg",
    "--dry_run": "--dry-run",
    "--list_overrides": "--list-overrides",
    "--shard_size": "--shard-size",
    "--ray_address": "--ray-address",
    "--episode_results": "--episode-results",
}


def normalise_argv(argv: list[str]) -> list[str]:
    out = []
    for i, arg in enumerate(argv):
        if arg == "--":  # what follows belongs to a child command (evalfleet watchdog -- CMD ...)
            return out + argv[i:]
        flag, eq, value = arg.partition("=")
        if flag in FLAG_ALIASES:
            arg = FLAG_ALIASES[flag] + eq + value
        out.append(arg)
    return out
