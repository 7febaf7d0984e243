"""Where the Slurm backend keeps its files: OUT/.evalfleet/slurm/ on the filesystem every node shares.

```
OUT/.evalfleet/slurm/
  runners.sbatch  server-<id>.sbatch  collect.sbatch   the rendered batch scripts, as submitted
  logs/runner-<task>.log  logs/server-<id>.log  logs/collect.log   each job's stdout and stderr
  servers/<id>.json        a policy server's address {host, port, job}, written once it is healthy
  task-<task>.heartbeat  task-<task>.status.json       each array task's watchdog files
  experiment.wired-<task>.yaml                           the Experiment wired to the servers' addresses
  jobs.json                                              job ids, array size and shards of the submission
OUT/.evalfleet/claims/                                   the shared shard queue (as the local backend's)
```
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from evalfleet.errors import UserError
from evalfleet.layout import CLAIMS_DIR, SLURM_DIR, internal_dir

# What an `#SBATCH --output=PATH` line carries as is: sbatch reads a directive up to whitespace, and `%` starts
# one of Slurm's file name patterns.
SAFE_PATH = re.compile(r"^[A-Za-z0-9_@+=:,./-]+$")
JOBS_FILE = "jobs.json"
LOGS_DIR = "logs"
SERVERS_DIR = "servers"
# Names of an array task's files, `{task}` its index: the scripts write them with their own $TASK (`split_task`)
# and Slurm's `%a`, Python with the number.
RUNNER_LOG = "runner-{task}.log"
TASK_HEARTBEAT = "task-{task}.heartbeat"
TASK_STATUS = "task-{task}.status.json"
WIRED_EXPERIMENT = "experiment.wired-{task}.yaml"
SERVER_LOG = "server-{server}.log"
COLLECT_LOG = "collect.log"


def split_task(name: str) -> tuple[str, str]:
    """(before, after) the `{task}` of one of the names above."""
    before, after = name.split("{task}")
    return before, after


def task_glob(name: str) -> str:
    return name.format(task="*")


@dataclass(frozen=True)
class SlurmPaths:
    out: Path

    @property
    def root(self) -> Path:
        return internal_dir(self.out) / SLURM_DIR

    @property
    def claims(self) -> Path:
        return internal_dir(self.out) / CLAIMS_DIR

    @property
    def logs(self) -> Path:
        return self.root / LOGS_DIR

    @property
    def servers(self) -> Path:
        return self.root / SERVERS_DIR

    @property
    def jobs(self) -> Path:
        return self.root / JOBS_FILE

    def runner_log(self, task: int | str) -> Path:
        return self.logs / RUNNER_LOG.format(task=task)

    def server_address(self, server: str) -> Path:
        return self.servers / f"{server}.json"

    def heartbeat(self, task: int | str) -> Path:
        return self.root / TASK_HEARTBEAT.format(task=task)

    def status(self, task: int | str) -> Path:
        return self.root / TASK_STATUS.format(task=task)

    def wired(self, task: int | str) -> Path:
        return self.root / WIRED_EXPERIMENT.format(task=task)


def check_output_path(out: Path, key: str = "--output") -> Path:
    """The output folder as an absolute path every node can read, one that `#SBATCH` lines carry as is."""
    absolute = out.absolute()
    if not SAFE_PATH.fullmatch(str(absolute)):
        raise UserError(f"{str(absolute)!r}: the Slurm backend needs an output folder whose path has only letters,"
                        " digits and _@+=:,./- (no spaces, quotes or %: sbatch reads #SBATCH lines without a shell)",
                        where="command line", key=key)
    return absolute
