"""`osmo.*` and `experiment_runner.*`: the OSMO backend's settings, typed and with defaults."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from evalfleet.backends.setting_checks import not_bool as _not_bool
from evalfleet.backends.setting_checks import one_line as _one_line
from evalfleet.secrets import carries_credentials

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


def _no_osmo_token(v: Any) -> Any:
    """OSMO substitutes `{{...}}` in a task's files before the script runs."""
    if isinstance(v, str) and re.search(r"\{\{.*?\}\}", v):
        raise ValueError(f"{v!r} holds a {{{{...}}}} token OSMO would substitute; remove the double braces")
    return v


def _image(v: str) -> str:
    if len(v) > IMAGE_MAX or not IMAGE.fullmatch(v):
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
    # Named like a secret but holding a name (which OSMO credential to read): listed unmasked.
    credential: str = Field(default="evalfleet-secrets", description="OSMO generic credential holding the "
                            "secrets tasks read (each api_key_env variable)",
                            json_schema_extra={"not_secret": True})
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
        if not QUANTITY.fullmatch(str(v)):
            raise ValueError(f"{v!r} is not a size in binary units, e.g. 64Gi or 512Mi")
        return v

    @field_validator("exec_timeout", "queue_timeout", mode="before")
    @classmethod
    def duration(cls, v: Any) -> Any:
        if v is None:
            return v
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return f"{v}s"
        if not isinstance(v, str) or not v or not DURATION.fullmatch(v):
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
        if v is not None and not OSMO_OBJECT.fullmatch(v):
            raise ValueError(f"{v!r} is not an OSMO name: letters, digits, '-', '_' and '.', starting and ending"
                             " with a letter or digit, at most 63 characters")
        return v

    @field_validator("output_url")
    @classmethod
    def url_line(cls, v: str | None) -> str | None:
        # Refused, not stripped: the URL is written into the workflow spec and the collect task's command line,
        # and keys taken out of it silently would not be the keys the collect task writes with.
        if v is not None and carries_credentials(v):
            raise ValueError("credentials in the URL are not accepted (it is written into the workflow spec and "
                             "the collect task's command line): give it without them, e.g. "
                             "s3://bucket/evals/{{workflow_id}}; the collect task writes with the storage "
                             "credentials your OSMO tasks get")
        return _one_line(v, "a URL")

    @field_validator("workflow_name")
    @classmethod
    def osmo_name(cls, v: str | None) -> str | None:
        if v is not None and (not OSMO_NAME.fullmatch(v) or len(v) > OSMO_NAME_MAX - 12):
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
    m = QUANTITY.fullmatch(text)
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
