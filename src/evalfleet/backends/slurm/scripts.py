"""The batch scripts of the Slurm backend: the runner array, one job per policy server, the collect job.

Every value in a shell line goes through `evalfleet.shell` (one word bash never expands; only the script's own
variables, `shell.Var`, expand). `#SBATCH` lines are read by sbatch, never by a shell: their values are checked
by `settings.SlurmSettings` (and the output folder by `paths.check_output_path`) to be one word without
whitespace. `slurm.setup` lines are the user's own shell by design, placed as given. No secret is in a script:
sbatch exports the submitting process's environment (its default `--export=ALL`), where the secrets are.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from evalfleet import shell as sh
from evalfleet.execution.invocation import shard_arg
from evalfleet.backends.slurm.settings import SlurmSettings
from evalfleet.backends.slurm.paths import (COLLECT_LOG, RUNNER_LOG, SERVER_LOG, TASK_HEARTBEAT, TASK_STATUS,
                                              WIRED_EXPERIMENT, SlurmPaths, split_task)
from evalfleet.execution.watchdog import WatchdogConfig
from evalfleet.experiment.plan import Shard
from evalfleet.interpreter import SAFE_PATH_FLAGS

RUNNERS_SCRIPT = "runners.sbatch"
COLLECT_SCRIPT = "collect.sbatch"
EXIT_TOO_MANY_REQUEUES = 3


@dataclass
class Script:
    name: str  # the file name
    kind: str  # "server", "runners" or "collect"
    text: str
    server: str | None = None  # a server job's ServerPlan id


def server_script_name(server: str) -> str:
    return f"server-{server}.sbatch"


def job_python(settings: SlurmSettings) -> list[sh.Piece]:
    """The jobs' Python (never with the working folder on sys.path), inside the container when there is one."""
    if settings.container_image:
        python = settings.python or "python3"
        prefix: list[sh.Piece] = (["srun", f"--container-image={settings.container_image}",
                                   ("--container-mounts=", sh.Var("OUT"), ":", sh.Var("OUT"))]
                                  if settings.container_runtime == "pyxis" else
                                  ["apptainer", "exec", "--bind", sh.Var("OUT"), settings.container_image])
        return [*prefix, python, "-P"]
    python = settings.python or sys.executable
    return [python, *(SAFE_PATH_FLAGS if python == sys.executable else ("-P",))]


def directives(settings: SlurmSettings, *, job_name: str, log: str, partition: str | None,
                extra: Sequence[str] = ()) -> list[str]:
    lines = [f"--job-name={job_name}", f"--output={log}", "--open-mode=append"]
    lines += [f"--partition={partition}"] if partition else []
    lines += [f"--{flag}={getattr(settings, key)}" for key, flag in (("account", "account"), ("qos", "qos"),
                                                                        ("time", "time")) if getattr(settings, key)]
    lines += list(extra)
    lines += settings.extra_sbatch
    return ["#!/bin/bash", *(f"#SBATCH {line}" for line in lines)]


def head(out: Path, settings: SlurmSettings, comment: str) -> list[str]:
    return [f"# {comment}", "set -u", sh.assign("OUT", str(out), key="--output"), *settings.setup,
            "export PYTHONUNBUFFERED=1"]


def _in_state(folder: str, *rest: sh.Piece) -> tuple[sh.Piece, ...]:
    """One word: OUT/<folder>[/<rest>], written with the script's $OUT (`rest` may hold the script's $TASK)."""
    return (sh.Var("OUT"), f"/{folder}/", *rest) if rest else (sh.Var("OUT"), f"/{folder}")


def _task_file(folder: str, name: str) -> tuple[sh.Piece, ...]:
    """OUT/<folder>/<name> for this array task, `{task}` written as the script's $TASK."""
    before, after = split_task(name)
    return _in_state(folder, before, sh.Var("TASK"), after)


def _relative(paths: SlurmPaths, path: Path) -> str:
    return str(path.relative_to(paths.out))


def watchdog_flags(cfg: WatchdogConfig, startup: float) -> list[sh.Piece]:
    return ["--startup-timeout", f"{startup:g}", "--stall-timeout", f"{cfg.stall_timeout:g}", "--max-restarts",
            cfg.max_restarts, "--poll", f"{cfg.poll:g}", "--term-grace", f"{cfg.term_grace:g}", "--backoff",
            f"{cfg.backoff:g}", "--backoff-max", f"{cfg.backoff_max:g}"]


def runners_script(paths: SlurmPaths, settings: SlurmSettings, *, job_name: str, experiment: Path,
                   shards: list[Shard], workers: int, servers: list[str], watchdog: WatchdogConfig,
                   feed: Path | None = None) -> str:
    """The runner array: task i runs `evalfleet runner` under the watchdog, claiming shards from the shared queue
    (a requeued task resumes its own claims), or, given the `feed` folder (in OUT), the shards the driver releases
    there until it closes it (execution/shard_feed.py); with servers, the supervised command first waits for
    their addresses and wires the Experiment to them (so a restart reads a new address)."""
    throttle = f"%{settings.max_parallel}" if settings.max_parallel else ""
    extra = [f"--array=0-{workers - 1}{throttle}", f"--cpus-per-task={settings.cpus_per_task}", "--requeue"]
    extra += [f"--mem={settings.mem}"] if settings.mem else []
    extra += [f"--gpus-per-task={settings.gpus_per_task}"] if settings.gpus_per_task is not None else []
    extra += [f"--gres={settings.gres}"] if settings.gres else []
    extra += [f"--constraint={settings.constraint}"] if settings.constraint else []
    extra += [f"--signal=B:TERM@{settings.signal_lead_s}"] if settings.signal_lead_s else []
    lines = directives(settings, job_name=job_name, log=str(paths.logs / RUNNER_LOG.format(task="%a")),
                        partition=settings.partition, extra=extra)
    lines += head(paths.out, settings, "evalfleet runner array: each task runs the shards it claims under the "
                   "watchdog; a requeued task resumes its claims")
    python = job_python(settings)
    state = _relative(paths, paths.root)
    runner: list[Any] = [*python, "-m", "evalfleet.cli", "runner"]
    if servers:
        runner.append(_task_file(state, WIRED_EXPERIMENT))
    else:
        runner.append(_in_state(_relative(paths, experiment)) if experiment.is_relative_to(paths.out) else
                      str(experiment))
    runner += ["--output", sh.Var("OUT"), "--claim-dir", _in_state(_relative(paths, paths.claims)),
               "--worker-id", sh.Var("TASK")]
    if feed is not None:
        runner += ["--feed", _in_state(_relative(paths, feed))]
    else:
        for shard in shards:
            runner += ["--shard", shard_arg(shard)]
    child: list[Any] = runner
    startup = watchdog.startup_timeout
    if servers:
        child = [*python, "-m", "evalfleet.backends.slurm", "wire", "--output", sh.Var("OUT"), "--task",
                 sh.Var("TASK"), "--wait", f"{settings.server_wait_s:g}",
                 *(a for s in servers for a in ("--server", s)), "--", *runner]
        startup += settings.server_wait_s  # waiting for the servers is not a stall
    lines += [
        'TASK="${SLURM_ARRAY_TASK_ID:-0}"',
        f'if [ "${{SLURM_RESTART_COUNT:-0}}" -gt {settings.max_requeues} ]; then',
        f'  echo "evalfleet: array task $TASK was requeued ${{SLURM_RESTART_COUNT}} times, more than'
        f' slurm.max_requeues={settings.max_requeues}: giving up (its claimed shards stay for --resume)" >&2',
        f"  exit {EXIT_TOO_MANY_REQUEUES}",
        "fi",
        'echo "evalfleet: array task $TASK on $(hostname) (job ${SLURM_JOB_ID:-?}, restart ${SLURM_RESTART_COUNT:-0})"',
        "# exec: Slurm's SIGTERM (scancel, --signal before the time limit, preemption) reaches the watchdog, which",
        "# stops the runner between episodes; what finished is kept",
        sh.command("exec", *python, "-m", "evalfleet.execution.watchdog", *watchdog_flags(watchdog, startup),
                   "--heartbeat", _task_file(state, TASK_HEARTBEAT),
                   "--status-file", _task_file(state, TASK_STATUS), "--", *child,
                   key="slurm.python"),
        "",
    ]
    return "\n".join(lines)


def server_script(paths: SlurmPaths, settings: SlurmSettings, *, job_name: str, server: str) -> str:
    """One policy server's job: supervised on this node, its address published once healthy, until SIGTERM."""
    extra = [f"--cpus-per-task={settings.server_cpus}", "--requeue"]
    extra += [f"--mem={settings.server_mem}"] if settings.server_mem else []
    extra += [f"--gpus={settings.server_gpus}"] if settings.server_gpus is not None else []
    lines = directives(settings, job_name=job_name, log=str(paths.logs / SERVER_LOG.format(server=server)),
                        partition=settings.server_partition or settings.partition, extra=extra)
    lines += head(paths.out, settings, f"evalfleet policy server {server}: publishes its address in "
                   f"{_relative(paths, paths.server_address(server))} once healthy, serves until SIGTERM")
    lines += [sh.command("exec", *job_python(settings), "-m", "evalfleet.backends.slurm", "serve", "--output",
                         sh.Var("OUT"), "--server", server, key="slurm.python"), ""]
    return "\n".join(lines)


def collect_script(paths: SlurmPaths, settings: SlurmSettings, *, job_name: str) -> str:
    """The collect job (submitted with --dependency=afterany:<array>): every Run's status from the array tasks'
    Slurm states, the server jobs cancelled, then the output folder finalized (records, plots, index.html)."""
    lines = directives(settings, job_name=job_name, log=str(paths.logs / COLLECT_LOG),
                        partition=settings.partition, extra=["--cpus-per-task=1"])
    lines += head(paths.out, settings, "evalfleet collect: Run statuses from the array tasks, then the report")
    lines += [sh.command("exec", *job_python(settings), "-m", "evalfleet.backends.slurm", "collect", "--output",
                         sh.Var("OUT"), key="slurm.python"), ""]
    return "\n".join(lines)
