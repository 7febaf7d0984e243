"""Slurm's own commands, as the backend calls them: `sbatch --parsable`, `sacct` (each array task's final state,
exit code and reason), `squeue` (what is still queued or running; where there is no accounting) and `scancel`."""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from evalfleet.errors import UserError

WHERE = "command line"
INSTALL_HINT = ("`{name}` is not on PATH: run evalfleet on a Slurm login node (or a node with the Slurm client "
                "commands), or preview with `evalfleet submit --backend slurm --dry-run`")
# Job states that end a job (sacct); anything else is still pending, running or being requeued.
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY",
                "BOOT_FAIL", "DEADLINE", "REVOKED"}
SACCT_FIELDS = "JobID,State,ExitCode,Reason,NodeList,Elapsed,Timelimit"
# The watchdog's exit after SIGTERM (128 + 15; sacct shows it as 15): scancel, preemption, --signal before the limit.
STOPPED_EXITS = ("143", "15")
ACCOUNTING_LAG_S = 30.0  # how long an ended array task may take to show its final state in sacct
LIMIT_SLACK_S = 65  # Slurm may send the --signal up to 60 s early (its event resolution), and the task stops at once


class SlurmCommandError(Exception):
    pass


def executable(name: str) -> str:
    exe = shutil.which(name)
    if exe is None:
        raise UserError(INSTALL_HINT.format(name=name), where=WHERE, key="--backend")
    return exe


def _run(argv: list[str], timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmCommandError(f"{argv[0]}: {exc}") from None


def sbatch(script: Path, *, dependency: str | None = None, test_only: bool = False) -> str:
    """Submit (or, with `test_only`, only check) one batch script; its job id. The environment is this
    process's (sbatch's default --export=ALL): the secrets travel there, never in the script."""
    argv = [executable("sbatch"), "--parsable"]
    if dependency:
        argv.append(f"--dependency={dependency}")
    if test_only:
        argv.append("--test-only")
    argv.append(str(script))
    proc = _run(argv)
    if proc.returncode != 0:
        detail = (proc.stderr.strip() or proc.stdout.strip() or f"exit code {proc.returncode}").splitlines()[-1]
        raise SlurmCommandError(f"sbatch {script} failed: {detail}")
    if test_only:
        return (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1] if (proc.stderr or proc.stdout) else ""
    job = proc.stdout.strip().split(";")[0]
    if not job.isdigit():
        raise SlurmCommandError(f"sbatch {script}: cannot read the job id from {proc.stdout.strip()[:200]!r}")
    return job


def scancel(jobs: Iterable[str], *, signal: str | None = None) -> None:
    jobs = [j for j in jobs if j]
    if not jobs:
        return
    argv = [executable("scancel"), *([f"--signal={signal}"] if signal else []), *jobs]
    _run(argv)


@dataclass
class TaskState:
    job: str  # the job id as sacct shows it (12_3 for task 3 of array 12)
    state: str  # COMPLETED, FAILED, TIMEOUT, ... (sacct's first word)
    exit_code: str = "0:0"  # code:signal
    reason: str = ""
    nodes: str = ""
    elapsed: str = ""
    time_limit: str = ""

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    def problem(self) -> str | None:
        """None for a task that completed; otherwise its job id, state and Slurm's reason, in one line."""
        if self.state == "COMPLETED":
            return None
        code, _, sig = self.exit_code.partition(":")
        parts = [f"exit code {code}" if code not in ("", "0") else "", f"signal {sig}" if sig not in ("", "0") else ""]
        if self.reason and self.reason not in ("None", "(null)"):
            parts.append(self.reason)
        if self.nodes and self.nodes not in ("None assigned", "(null)"):
            parts.append(f"on {self.nodes}")
        if self.state == "TIMEOUT" and self.time_limit:
            parts.append(f"time limit {self.time_limit}")
        detail = ", ".join(p for p in parts if p)
        return f"Slurm job {self.job} {self.state}" + (f" ({detail})" if detail else "")


    def stopped_before_limit(self, lead_s: int) -> bool:
        """Ended by the watchdog's SIGTERM exit within the --signal lead (plus slack) of its time limit."""
        limit, elapsed = slurm_seconds(self.time_limit), slurm_seconds(self.elapsed)
        return (self.exit_code.partition(":")[0] in STOPPED_EXITS and limit is not None and elapsed is not None
                and limit - elapsed <= lead_s + LIMIT_SLACK_S)


def slurm_seconds(text: str) -> int | None:
    """sacct's [D-]HH:MM:SS (or MM:SS) in seconds; None for UNLIMITED, Partition_Limit or nothing."""
    days, _, rest = text.rpartition("-") if "-" in text else ("0", "", text)
    parts = rest.split(":")
    if not days.isdigit() or not all(p.isdigit() for p in parts) or not 1 <= len(parts) <= 3:
        return None
    seconds = 0
    for p in parts:
        seconds = seconds * 60 + int(p)
    return int(days) * 86400 + seconds


def parse_sacct(text: str) -> dict[str, TaskState]:
    """`sacct -n -P -X -o JobID,State,ExitCode,Reason,NodeList` lines → job id → its state."""
    states: dict[str, TaskState] = {}
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) < 3 or not fields[0]:
            continue
        state = fields[1].split()[0] if fields[1].split() else ""
        states[fields[0]] = TaskState(fields[0], state, fields[2], *(f for f in fields[3:7]))
    return states


def sacct(jobs: Iterable[str]) -> dict[str, TaskState] | None:
    """The jobs' states from Slurm's accounting; None where there is none (sacct missing or refusing)."""
    jobs = [j for j in jobs if j]
    if not jobs or shutil.which("sacct") is None:
        return None
    proc = _run(["sacct", "-n", "-P", "-X", "-o", SACCT_FIELDS, "-j", ",".join(jobs)])
    if proc.returncode != 0:
        return None
    return parse_sacct(proc.stdout)


def all_final(states: dict[str, TaskState] | None, array: str, workers: int) -> bool:
    """Every array task has a final state in `states` (None, no accounting at all, counts as final)."""
    if states is None:
        return True
    tasks = [states.get(f"{array}_{i}") for i in range(workers)]
    return all(t is not None and t.final for t in tasks)


def settled_array_states(array: str, workers: int, *, lag_s: float = ACCOUNTING_LAG_S, poll_s: float = 2.0,
                         stopped=lambda: False) -> dict[str, TaskState] | None:
    """The array's task states once the accounting shows each final, or what it shows after `lag_s`: slurmctld
    hands an ended task's record to slurmdbd a moment later, so a job that follows the array (the collect job,
    a dependency `afterany`) can start before sacct knows how the array's tasks ended."""
    deadline = time.monotonic() + lag_s
    while True:
        states = sacct([array])
        if all_final(states, array, workers) or time.monotonic() >= deadline or stopped():
            return states
        time.sleep(poll_s)


def queued(jobs: Iterable[str]) -> set[str] | None:
    """The job ids (12_3 for array tasks) `squeue` still shows; None when squeue fails."""
    jobs = [j for j in jobs if j]
    if not jobs:
        return set()
    proc = _run([executable("squeue"), "-h", "-r", "-o", "%i", "-j", ",".join(jobs)])
    if proc.returncode != 0:
        if "Invalid job id" in proc.stderr:
            return set()
        return None
    return {line.strip() for line in proc.stdout.splitlines() if line.strip()}
