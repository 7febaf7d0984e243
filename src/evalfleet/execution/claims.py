"""Shard claims: workers that share one shard list (the local backend's processes, Slurm's array tasks) each run
the shards they claim first, one atomic file per shard in a claim folder, so a fast worker takes more of them and
a worker that dies strands only the shard it was on; a relaunched worker resumes its own claims."""

from __future__ import annotations

import os
from pathlib import Path

from evalfleet.experiment.plan import Shard


def claim_name(shard: Shard) -> str:
    return f"{shard.run}--{shard.id}"


def claimed_by(claim_dir: Path, shards: list[Shard], worker: int | str) -> list[Shard]:
    """The shards `worker` claimed in `claim_dir` (what it ran, or was running when it ended)."""
    mine = []
    for shard in shards:
        try:
            if (claim_dir / claim_name(shard)).read_text() == str(worker):
                mine.append(shard)
        except OSError:
            pass
    return mine


def claim_shards(shards: list[Shard], claim_dir: Path, worker: str):  # a generator of Shard
    """Yield the shards this worker claims, one at a time, right before it runs each: unclaimed ones
    (created atomically) and its own earlier claims (a relaunch resumes them)."""
    for shard in shards:
        path = claim_dir / claim_name(shard)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                if path.read_text() != worker:
                    continue
            except OSError:
                continue
        else:
            with os.fdopen(fd, "w") as f:
                f.write(worker)
        yield shard
