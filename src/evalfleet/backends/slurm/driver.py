"""`evalfleet submit --backend slurm` of a `stopping:` Experiment (issue #25; docs/statistics.md, "Slurm"): one
small driver job whose script runs the wave loop of `evalfleet run --backend slurm` from inside the cluster
(sbatch, squeue and scancel work from a job), on the Experiment saved in the output folder, with --resume: the
first driver and one submitted again after it died (`evalfleet submit --resume --output-dir OUT`) both recompute
the waves from the records. It ends with the run's own finalize (Run statuses, collect, report). Its scancel is
a SIGTERM to `evalfleet run`, which cancels the wave's array and the server jobs, keeping what finished."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TextIO

from evalfleet import shell as sh
from evalfleet.errors import UserError
from evalfleet.backends.slurm.settings import SlurmSettings
from evalfleet.backends.slurm.commands import SlurmCommandError, sbatch
from evalfleet.backends.slurm.paths import SlurmPaths
from evalfleet.backends.slurm.scripts import directives, head, job_python
from evalfleet.secrets import exported

DRIVER_SCRIPT = "driver.sbatch"
DRIVER_LOG = "driver.log"


def driver_script(paths: SlurmPaths, settings: SlurmSettings, *, job_name: str, workers: int | None) -> str:
    """The driver job: 1 CPU, the Experiment's partition/account/qos/time, `exec evalfleet run --resume`."""
    lines = directives(settings, job_name=job_name, log=str(paths.logs / DRIVER_LOG),
                       partition=settings.partition, extra=["--cpus-per-task=1"])
    lines += head(paths.out, settings, "evalfleet driver: the wave loop of `evalfleet run --backend slurm` (one "
                  "runner array per wave, the server jobs once), then the report; resubmitted, it resumes")
    run: list[sh.Piece] = [*job_python(settings), "-m", "evalfleet.cli", "run", "--backend", "slurm", "--output",
                           sh.Var("OUT"), "--resume", "--no-progress"]
    run += ["--workers", workers] if workers else []
    lines += ['echo "evalfleet: driver on $(hostname) (job ${SLURM_JOB_ID:-?})"',
              "# exec: scancel's SIGTERM reaches `evalfleet run`, which cancels its jobs and keeps what finished",
              sh.command("exec", *run, key="slurm.python"), ""]
    return "\n".join(lines)


def submit_driver(loaded: Any, out: Path, settings: SlurmSettings, *, job_name: str, workers: int | None,
                  dry_run: bool, resume: bool, to_folder: bool, stream: TextIO) -> int:
    """Dry run: the script printed (or written to OUT/.evalfleet/slurm/ when an output folder was given);
    otherwise the output folder prepared (or checked, resuming), the script written and submitted, how to
    follow it printed."""
    import sys

    from evalfleet.execution.cluster_metadata import write_submitted
    from evalfleet.execution.output_dir import prepare_output

    paths = SlurmPaths(out)
    text = driver_script(paths, settings, job_name=job_name, workers=workers)
    script = paths.root / DRIVER_SCRIPT
    if dry_run:
        if to_folder:
            script.parent.mkdir(parents=True, exist_ok=True)
            script.write_text(text, encoding="utf-8")
            print(script, file=stream)
        else:
            stream.write(f"# ==> {DRIVER_SCRIPT} <==\n{text}")
        print("# dry run: 1 batch script (the wave driver), nothing submitted", file=sys.stderr)
        return 0
    # OUT's lock while the folder is prepared (a folder a run is writing is refused), given up before the driver
    # job, whose `evalfleet run --resume` takes it, can start
    with prepare_output(out, loaded, resume=resume, flag="--output-dir"):
        paths.logs.mkdir(parents=True, exist_ok=True)
        script.write_text(text, encoding="utf-8")
    try:
        with exported(loaded.secrets):  # sbatch's --export=ALL carries them to the driver and its jobs
            job = sbatch(script)
    except SlurmCommandError as exc:
        raise UserError(f"{exc}; nothing was submitted", where="sbatch") from None
    write_submitted(out, loaded, backend="slurm", submission={"driver_job": job})
    print(f"submitted: driver job {job} (sequential stopping: it submits one runner array per wave, then the "
          f"report)", file=stream)
    print(f"watch: squeue -j {job}; evalfleet watch {out}; log {paths.logs / DRIVER_LOG}", file=stream)
    print(f"results: {out}/index.html once driver job {job} has ended; if it dies: evalfleet submit --resume "
          f"--backend slurm --output-dir {out}", file=stream)
    return 0
