"""Backend settings: the `osmo.*` (and `ray.*`) keys given on the command line, typed and with defaults.

Overrides whose first segment is a backend root (`osmo.pool=...`) never touch the Experiment; the loader
collects them into `LoadedExperiment.backend_settings` (``{"osmo": {"pool": ...}}``) and the backend reads
them through `backend_settings(...)`. `evalfleet overrides` / `--list-overrides` prints every setting of every
registered backend with its effective value through `backend_setting_leaves(...)`.

A backend registers its pydantic model in `BACKEND_SETTINGS` (root → model class). Unknown keys under a
registered root are a UserError (exit 2) naming the nearest valid key.
"""

from __future__ import annotations

import difflib
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from evalfleet.errors import UserError

WHERE = "command line"

# OSMO's name rule (NVIDIA/OSMO src/utils/job/common.py NAMEREGEX): a letter first, then letters, digits,
# '-' or '_', not ending in '-' or '_'; Kubernetes caps object names at 63 characters.
OSMO_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_-]*[A-Za-z0-9])?$")
OSMO_NAME_MAX = 63
# Kubernetes quantities as OSMO takes them for memory and storage: binary units.
QUANTITY = re.compile(r"^(\d+(\.\d+)?)(Ki|Mi|Gi|Ti)$")
# A duration OSMO accepts for timeouts: seconds, or 1d2h30m10s-style.
DURATION = re.compile(r"^(\d+d)?(\d+h)?(\d+m)?(\d+s)?$")
DURATION_S = {"d": 86400, "h": 3600, "m": 60, "s": 1}
# A container image reference (the OCI distribution grammar): [registry[:port]/]path[:tag][@digest], the path's
# components lowercase; e.g. nvcr.io/team/arena:1.0, evalfleet:latest, ghcr.io/o/x@sha256:<hex>.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REGISTRY = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::\d+)?/)"
IMAGE = re.compile(rf"^{_REGISTRY}?{_COMPONENT}(?:/{_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
                   r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$")
IMAGE_MAX = 255
# Pool, platform and credential names as OSMO names its objects: a letter or digit first and last; letters,
# digits, '-', '_' and '.' between; at most 63 characters (Kubernetes object names). Never an option (`-x`).
OSMO_OBJECT = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _not_bool(v: Any) -> Any:
    """true/false is not a number (pydantic would read true as 1)."""
    if isinstance(v, bool):
        raise ValueError(f"must be a number, not {str(v).lower()}")  # noqa: TRY004 (pydantic reports ValueError)
    return v


def _one_line(v: Any, what: str) -> Any:
    """A path, URL or requirement on one line: no NUL, line break or other control character."""
    if isinstance(v, str) and CONTROL.search(v):
        raise ValueError(f"must be {what} on one line: no NUL, line break or other control character")
    return v


def _no_osmo_token(v: Any) -> Any:
    """OSMO substitutes `{{...}}` in a task's files before the script runs."""
    if isinstance(v, str) and re.search(r"\{\{.*?\}\}", v):
        raise ValueError(f"{v!r} holds a {{{{...}}}} token OSMO would substitute; remove the double braces")
    return v


def _image(v: str) -> str:
    if len(v) > IMAGE_MAX or not IMAGE.match(v):
        raise ValueError(f"{v!r} is not a container image reference: [registry[:port]/]name[:tag][@digest], the"
                         " name in lowercase, e.g. nvcr.io/team/arena:1.0")
    return v


# A container image reference, checked by `_image` (the `image` of OSMO tasks and of Arena's runner task).
ImageReference = Annotated[str, AfterValidator(_image)]


class OsmoSettings(BaseModel):
    """`osmo.*`: how an Experiment becomes OSMO workflows. Resources apply to every runner and server
    task (one profile per Run, as in Arena); the collect task gets a small CPU profile."""

    model_config = ConfigDict(extra="forbid")

    workflow_name: str | None = Field(default=None, description="workflow name; null: the Experiment's name")
    pool: str | None = Field(default=None, description="target pool; null: the OSMO profile's default pool")
    platform: str | None = Field(default=None, description="platform of every task; null: the pool's default")
    gpus: int = Field(default=1, ge=0, description="GPUs per runner and per server task")
    cpus: int = Field(default=15, gt=0, description="CPU cores per runner and per server task")
    memory: str = Field(default="128Gi", description="memory per runner and per server task")
    storage: str = Field(default="200Gi", description="disk per task")
    output_url: str | None = Field(default=None, description="where collect uploads (keep {{workflow_id}})")
    credential: str = Field(default="evalfleet-secrets", description="OSMO generic credential holding the "
                            "secrets tasks read (each api_key_env variable; AWS keys for output_url)")
    priority: Literal["HIGH", "NORMAL", "LOW"] = "NORMAL"
    exec_timeout: str | None = Field(default=None, description="e.g. 12h; null: the pool's default")
    queue_timeout: str | None = Field(default=None, description="e.g. 2d; null: the pool's default")
    image: ImageReference = Field(default="evalfleet:latest", description="container image with evalfleet installed")
    max_tasks: int = Field(default=20, ge=3, description="most tasks in one workflow; more are split")
    max_parallel_runs: int | None = Field(default=None, gt=0, description="at most K Runs at once: Run i "
                                          "starts after Run i-K's runner; null: all at once")
    dry_run: bool = Field(default=False, description="print the workflow instead of submitting (= --dry-run)")

    @field_validator("priority", mode="before")
    @classmethod
    def upper(cls, v: Any) -> Any:
        return v.upper() if isinstance(v, str) else v

    @field_validator("memory", "storage")
    @classmethod
    def quantity(cls, v: str) -> str:
        if not QUANTITY.match(str(v)):
            raise ValueError(f"{v!r} is not a size in binary units, e.g. 64Gi or 512Mi")
        return v

    @field_validator("exec_timeout", "queue_timeout", mode="before")
    @classmethod
    def duration(cls, v: Any) -> Any:
        if v is None:
            return v
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return f"{v}s"
        if not isinstance(v, str) or not v or not DURATION.match(v):
            raise ValueError(f"{v!r} is not a duration, e.g. 12h, 90m or 1d12h")
        if not sum(int(n) * DURATION_S[u] for n, u in re.findall(r"(\d+)([dhms])", v)):
            raise ValueError(f"{v!r} is no time at all: give a positive duration, e.g. 12h, or leave it out")
        return v

    @field_validator("gpus", "cpus", "max_tasks", "max_parallel_runs", mode="before")
    @classmethod
    def number(cls, v: Any) -> Any:
        return _not_bool(v)

    @field_validator("pool", "platform", "credential")
    @classmethod
    def object_name(cls, v: str | None) -> str | None:
        if v is not None and not OSMO_OBJECT.match(v):
            raise ValueError(f"{v!r} is not an OSMO name: letters, digits, '-', '_' and '.', starting and ending"
                             " with a letter or digit, at most 63 characters")
        return v

    @field_validator("output_url")
    @classmethod
    def url_line(cls, v: str | None) -> str | None:
        return _one_line(v, "a URL")

    @field_validator("workflow_name")
    @classmethod
    def osmo_name(cls, v: str | None) -> str | None:
        if v is not None and (not OSMO_NAME.match(v) or len(v) > OSMO_NAME_MAX - 12):
            raise ValueError(f"{v!r} is not an OSMO name: start with a letter, use letters, digits, '-' and '_',"
                             f" end with a letter or digit, at most {OSMO_NAME_MAX - 12} characters")
        return v

    @field_validator("pool", "platform", "image", "output_url", mode="before")
    @classmethod
    def non_empty(cls, v: str | None) -> str | None:
        if v is not None and not str(v).strip():
            raise ValueError("must not be empty (leave it out for the default)")
        return v

    def memory_gib(self) -> float:
        return quantity_gib(self.memory)


def quantity_gib(text: str) -> float:
    m = QUANTITY.match(text)
    if not m:
        raise ValueError(text)
    scale = {"Ki": 1 / 1024**2, "Mi": 1 / 1024, "Gi": 1.0, "Ti": 1024.0}[m.group(3)]
    return float(m.group(1)) * scale


# Arena's runner image (osmo/tasks/experiment_runner_task.py DEFAULT_EXPERIMENT_RUNNER_IMAGE).
ARENA_RUNNER_IMAGE = "nvcr.io/nvstaging/isaac-amr/isaaclab_arena:alex_yaml_env_graph_osmo_testing"


class ExperimentRunnerSettings(BaseModel):
    """`experiment_runner.*`: the task that runs Arena's own `experiment_runner.py` for a Run whose
    environment is an Arena type (the names of Arena's submission overrides)."""

    model_config = ConfigDict(extra="forbid")

    image: ImageReference = Field(default=ARENA_RUNNER_IMAGE, description="container image with Isaac Sim and Arena")
    record_camera_video: bool = Field(default=False, description="pass --record_camera_video to Arena's runner")
    record_viewport_video: bool = Field(default=False, description="pass --record_viewport_video")
    startup_grace_s: float = Field(default=1800.0, gt=0, description="silence allowed before the first output"
                                   " (Isaac Sim's cold start)")
    stall_s: float = Field(default=900.0, gt=0, description="silence allowed after output began, then restart")
    max_restarts: int = Field(default=2, ge=0, description="restarts of a crashed or stalled runner")
    restart_backoff_s: float = Field(default=30.0, ge=0, description="wait before the first restart (doubles)")
    python: str = Field(default="/isaac-sim/python.sh", description="the Python that runs Arena's runner in the"
                        " image")
    evalfleet_pip: str | None = Field(default=None, description="pip requirement installed with `python` when"
                                      " the image lacks evalfleet (its watchdog supervises Arena's runner)")

    @field_validator("image", "python", mode="before")
    @classmethod
    def non_empty(cls, v: str) -> str:
        if isinstance(v, str) and not v.strip():
            raise ValueError("must not be empty (leave it out for the default)")
        return v

    @field_validator("python")
    @classmethod
    def path_line(cls, v: str) -> str:
        return _no_osmo_token(_one_line(v, "a path"))

    @field_validator("evalfleet_pip")
    @classmethod
    def requirement_line(cls, v: str | None) -> str | None:
        return _no_osmo_token(_one_line(v, "a pip requirement"))

    @field_validator("max_restarts", "startup_grace_s", "stall_s", "restart_backoff_s", mode="before")
    @classmethod
    def number(cls, v: Any) -> Any:
        return _not_bool(v)


# --- slurm.* ---------------------------------------------------------------------------------------------
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
    if v is not None and (not isinstance(v, str) or not pattern.match(v)):
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
    """`slurm.*`: how an Experiment becomes Slurm jobs (rendered sbatch scripts, see execution/slurm/). The
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
    server_wait_s: float = Field(default=1800.0, gt=0, description="how long a runner waits for its servers")
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


# Named like a secret but holding a name: `osmo.credential` is which OSMO credential to read, not its value.
NOT_SECRET = {"osmo.credential"}

# Backend root → settings model. The Ray backend adds "ray" here.
BACKEND_SETTINGS: dict[str, type[BaseModel]] = {"osmo": OsmoSettings, "experiment_runner": ExperimentRunnerSettings,
                                                 "slurm": SlurmSettings}


def backend_settings(root: str, settings: dict[str, Any] | None) -> BaseModel:
    """The typed settings of one backend (defaults merged with the overrides given under `root.`)."""
    model = BACKEND_SETTINGS[root]
    given = (settings or {}).get(root, {})
    if not isinstance(given, dict):
        raise UserError(f"`{root}` takes sub-keys, e.g. {root}.{next(iter(model.model_fields))}=VALUE", where=WHERE,
                        key=root)
    for key, value in given.items():
        if key not in model.model_fields:
            close = difflib.get_close_matches(key, list(model.model_fields), n=3, cutoff=0.5)
            hint = f"did you mean {', '.join(f'{root}.{c}' for c in close)}?" if close else \
                f"valid keys: {', '.join(f'{root}.{k}' for k in model.model_fields)}"
            raise UserError(f"unknown key {root}.{key}; {hint}", where=WHERE, key=f"{root}.{key}")
        if isinstance(value, dict):
            raise UserError(f"{root}.{key} has no sub-keys; set it directly: {root}.{key}=VALUE", where=WHERE,
                            key=f"{root}.{key}")
    try:
        return model.model_validate(given)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join([root, *(str(p) for p in err["loc"])])
        msg = err["msg"].removeprefix("Value error, ")
        if "input" in err and not isinstance(err["input"], dict) and err["type"] != "value_error":
            msg = f"{msg} (got {err['input']!r})"
        raise UserError(msg, where=WHERE, key=key) from None


def check_backend_settings(settings: dict[str, Any] | None) -> None:
    """Every registered backend's settings validated (a UserError names the key): what `plan` and `submit` check
    before they print or write anything."""
    for root in BACKEND_SETTINGS:
        backend_settings(root, settings)


def backend_setting_leaves(settings: dict[str, Any] | None) -> list[str]:
    """`root.key=value` for every setting of every registered backend, with its effective value."""
    from evalfleet.experiment.overrides import format_value
    from evalfleet.secrets import mask_value

    lines: list[str] = []
    for root in BACKEND_SETTINGS:
        values = backend_settings(root, settings).model_dump(mode="json")
        lines.extend(f"{root}.{key}={format_value(value if f'{root}.{key}' in NOT_SECRET else mask_value(key, value))}"
                     for key, value in values.items())
    return lines
