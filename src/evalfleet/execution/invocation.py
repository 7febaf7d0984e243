"""The one place that turns shards into an `evalfleet runner` invocation and back.

Every backend starts runners the same way (the local backend's workers, a Ray shard task, an OSMO runner
task's script): `runner_command(...)`; and the runner parses what they passed with `parse_shard`."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from evalfleet.errors import UserError
from evalfleet.experiment.plan import Plan, Shard
from evalfleet.interpreter import python_command


def shard_arg(shard: Shard) -> str:
    """RUN:START:STOP (STOP empty for an open-ended num_steps Run)."""
    return f"{shard.run}:{shard.start}:{'' if shard.stop is None else shard.stop}"


def parse_shard(text: str, plan: Plan, where: str) -> Shard:
    """The shard `shard_arg` wrote, checked against the plan."""
    run, _, rest = text.rpartition(":")
    run, _, start = run.rpartition(":")
    stop = rest
    if run not in plan.runs or not start.isdigit() or (stop and not stop.isdigit()):
        raise UserError(f"--shard {text!r}: expected RUN:START:STOP with a Run of {where}", where="command line",
                        key="--shard")
    return Shard(run, int(start), int(stop) if stop else None)


def runner_command(experiment: str | Path, output: str | Path, shards: Iterable[Shard] = (), *,
                   claim_dir: str | Path | None = None, worker_id: str | int | None = None,
                   python: str | None = None, feed: str | Path | None = None) -> list[str]:
    """argv of one runner: the experiment file, the output folder, the shards (none: every shard) and,
    for workers sharing a list, where they claim shards; with `feed`, the shards come from the driver's shard
    feed instead (execution/shard_feed.py). The runner's Python never has the current folder on `sys.path`
    (`interpreter.python_command`)."""
    cmd = [*python_command(python), "-m", "evalfleet.cli", "runner", str(experiment), "--output", str(output)]
    if claim_dir is not None:
        cmd += ["--claim-dir", str(claim_dir), "--worker-id", str(worker_id if worker_id is not None else 0)]
    if feed is not None:
        cmd += ["--feed", str(feed)]
    for shard in shards:
        cmd += ["--shard", shard_arg(shard)]
    return cmd
