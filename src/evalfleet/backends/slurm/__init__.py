"""Slurm backend: an Experiment → rendered sbatch scripts (not submitit: a dry run writes the exact scripts, they
are readable and `sbatch --test-only`-able, and no job needs pickled Python of the submitting process).

The package, by concern: `paths` (OUT/.evalfleet/slurm/ on the shared filesystem), `scripts` (the batch scripts:
the runner array, a server job, the collect job), `render` (the plan → scripts, every check first), `commands`
(sbatch, sacct, squeue, scancel), `launch` (writing and submitting; waiting for the array), `backend` (the
`slurm` backend: `submit` and the blocking `execute`), `task_steps` (what runs inside the jobs: serve, wire,
collect; their command line, ``python -P -m evalfleet.backends.slurm ...``, is `cli/slurm_task`, which
`__main__` calls).

    server-<id>.sbatch   one job per policy server (serving.planning.plan_server_groups: server_sharing holds);
                         publishes servers/<id>.json {host, port} once healthy, serves until SIGTERM
    runners.sbatch       --array=0-<N-1>[%max_parallel] --requeue --signal=B:TERM@<signal_lead_s>: task i execs
                         the watchdog over `evalfleet runner ... --claim-dir CLAIMS --worker-id i` (with servers:
                         over `wire`, which waits for their addresses and writes the task's wired Experiment
                         first); a task requeued more than slurm.max_requeues times exits saying so
    collect.sbatch       `evalfleet submit` only, --dependency=afterany:<array>: Run statuses from sacct (job id,
                         state, reason), the server jobs cancelled, the output folder finalized
"""

from evalfleet.backend_registry import register_backend
from evalfleet.backends.slurm.settings import SlurmSettings

register_backend("slurm", "evalfleet.backends.slurm.backend:SlurmBackend", settings=SlurmSettings,
                 summary="Slurm jobs: a runner array under the watchdog, a job per policy server",
                 executes=True, submits=True, resubmits=True, sequential_waves=True, served_policies=True, gpus=True,
                 task_entry="python -P -m evalfleet.backends.slurm serve|wire|collect")
