"""`slurm.*`: the Slurm backend's settings, typed and with defaults."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from evalfleet.backends.setting_checks import CONTROL
from evalfleet.backends.setting_checks import not_bool as _not_bool
from evalfleet.backends.setting_checks import one_line as _one_line

# Slurm's time formats (sbatch --time): M, M:S, H:M:S, D-H, D-H:M, D-H:M:S; or UNLIMITED / infinite.
SLURM_TIME = re.compile(r"^(\d+)(:\d{1,2}){0,2}$|^\d+-\d{1,2}(:\d{1,2}){0,2}$|^(UNLIMITED|unlimited|infinite)$")
SLURM_MEM = re.compile(r"^\d+[KMGT]?$")  # sbatch --mem: megabytes, or K/M/G/T
SLURM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}(,[A-Za-z0-9][A-Za-z0-9_.-]{0,63})*$")  # partition(s), ...
SLURM_GRES = re.compile(r"^[A-Za-z0-9_]+(:[A-Za-z0-9_.-]+){0,2}(,[A-Za-z0-9_]+(:[A-Za-z0-9_.-]+){0,2})*$")
SLURM_CONSTRAINT = re.compile(r"^[A-Za-z0-9_.&|,\[\]*:()!-]+$")
SLURM_JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
SLURM_WORKERS_MAX = 1000  # a job array of more tasks is a typo more often than a plan


def _directive_value(v: Any, pattern: re.Pattern[str], example: str) -> Any:
    """A value placed in an `#SBATCH` line: sbatch reads it up to whitespace, never through a shell."""
    if v is not None and (not isinstance(v, str) or not pattern.fullmatch(v)):
        raise ValueError(f"{v!r} is not valid here, e.g. {example}")
    return v


def _directive(pattern: re.Pattern[str], example: str) -> Any:
    """An optional `#SBATCH` value checked against `pattern` (the error gives `example`)."""
    return Annotated[str | None, AfterValidator(lambda v: _directive_value(v, pattern, example))]


SlurmNames = _directive(SLURM_NAME, "gpu or gpu,debug (letters, digits, '_', '.', '-')")
SlurmMemory = _directive(SLURM_MEM, "16G or 4096 (megabytes): a number and K, M, G or T")
SlurmGres = _directive(SLURM_GRES, "gpu:1 or gpu:a100:2")
SlurmConstraint = _directive(SLURM_CONSTRAINT, "a100 or 'a100|h100' (no spaces)")
SlurmJobName = _directive(SLURM_JOB_NAME, "my-eval (letters, digits, '_', '.', '-')")


class SlurmSettings(BaseModel):
    """`slurm.*`: how an Experiment becomes Slurm jobs (rendered sbatch scripts, see backends/slurm/). The
    resources apply to every runner array task; `server_*` to each policy server's job."""

    model_config = ConfigDict(extra="forbid")

    partition: SlurmNames = Field(default=None, description="partition(s) of every job; null: the cluster's default")
    account: SlurmNames = Field(default=None, description="account to charge; null: your default account")
    qos: SlurmNames = Field(default=None, description="quality of service; null: the default")
    time: str | None = Field(default=None, description="time limit of each job (e.g. 4:00:00, 1-12); null: the "
                             "partition's default")
    cpus_per_task: int = Field(default=2, gt=0, description="CPU cores per runner task")
    mem: SlurmMemory = Field(default=None, description="memory per runner task (e.g. 16G); null: the default")
    gpus_per_task: int | None = Field(default=None, ge=0, description="GPUs per runner task (--gpus-per-task)")
    gres: SlurmGres = Field(default=None, description="generic resources per runner task, e.g. gpu:1 (instead of "
                             "gpus_per_task)")
    constraint: SlurmConstraint = Field(default=None, description="node features (--constraint), e.g. a100")
    job_name: SlurmJobName = Field(default=None, description="job name prefix; null: evalfleet-<Experiment name>")
    workers: int | None = Field(default=None, gt=0, le=SLURM_WORKERS_MAX, description="runner array tasks; null: "
                                "--workers, else one per shard (at most 16)")
    max_parallel: int | None = Field(default=None, gt=0, description="at most K array tasks at once (%K)")
    extra_sbatch: list[str] = Field(default_factory=list, description='more #SBATCH options, e.g. '
                                    '["--mail-type=END", "--exclusive"]')
    setup: list[str] = Field(default_factory=list, description='shell lines each job runs first, e.g. '
                             '["module load cuda", "source venv/bin/activate"]')
    python: str | None = Field(default=None, description="the Python with evalfleet in the jobs; null: this one")
    container_image: str | None = Field(default=None, description="run each job's evalfleet in this container")
    container_runtime: Literal["pyxis", "apptainer"] = Field(default="pyxis", description="pyxis "
                                                             "(--container-image) or apptainer (apptainer exec)")
    max_requeues: int = Field(default=3, ge=0, description="a task requeued more often exits, saying so")
    signal_lead_s: int = Field(default=120, ge=0, le=65535, description="SIGTERM this long before the time limit"
                               " (--signal=B:TERM@N; 0: none)")
    server_wait_s: float = Field(default=1800.0, gt=0, le=7 * 86400, description="how long a runner waits for its "
                                 "servers (at most a week)")
    server_cpus: int = Field(default=2, gt=0, description="CPU cores of a policy server's job")
    server_mem: SlurmMemory = Field(default=None, description="memory of a policy server's job, e.g. 32G")
    server_gpus: int | None = Field(default=None, ge=0, description="GPUs of a policy server's job (--gpus)")
    server_partition: SlurmNames = Field(default=None, description="partition of server jobs; null: `partition`")

    @field_validator("cpus_per_task", "gpus_per_task", "workers", "max_parallel", "max_requeues", "signal_lead_s",
                     "server_wait_s", "server_cpus", "server_gpus", mode="before")
    @classmethod
    def number(cls, v: Any) -> Any:
        return _not_bool(v)

    @field_validator("time", mode="before")
    @classmethod
    def time_limit(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            v = str(v)  # minutes, as sbatch reads a bare number
        return _directive_value(v, SLURM_TIME, "90 (minutes), 4:00:00, 1-12 or 2-00:30:00 (Slurm's time format)")

    @field_validator("extra_sbatch")
    @classmethod
    def sbatch_lines(cls, v: list[str]) -> list[str]:
        for line in v:
            if not isinstance(line, str) or not re.match(r"^--[A-Za-z]", line) or CONTROL.search(line) \
                    or re.search(r"\s", line):
                raise ValueError(f"{line!r} is not one sbatch option: each starts with --, e.g. --exclusive or"
                                 " --mail-type=END, on one line without spaces")
        return v

    @field_validator("setup")
    @classmethod
    def shell_lines(cls, v: list[str]) -> list[str]:
        for line in v:
            if not isinstance(line, str) or CONTROL.sub("", line.replace("\t", "")) != line.replace("\t", ""):
                raise ValueError(f"{line!r} must be one shell line: no NUL, line break or other control character"
                                 " (give several lines as several entries)")
        return v

    @field_validator("python")
    @classmethod
    def python_path(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("must not be empty (leave it out for this Python)")
        return _one_line(v, "a path")

    @field_validator("container_image")
    @classmethod
    def container(cls, v: str | None) -> str | None:
        if v is not None and (not v.strip() or CONTROL.search(v) or re.search(r"\s", v)):
            raise ValueError(f"{v!r} is not a container image: a reference (docker://..., a registry name) or a"
                             " .sif path, on one line without spaces")
        return v

    @field_validator("container_runtime", mode="before")
    @classmethod
    def runtime(cls, v: Any) -> Any:
        return v.lower() if isinstance(v, str) else v

    @model_validator(mode="after")
    def gpus_one_way(self) -> "SlurmSettings":
        if self.gres is not None and self.gpus_per_task is not None:
            raise ValueError("give slurm.gpus_per_task or slurm.gres, not both")
        return self
