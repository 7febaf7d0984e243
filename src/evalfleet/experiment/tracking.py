"""The Experiment's `tracking:` section: which experiment trackers a run logs its results to, and how.

    tracking:
      wandb: {project: evalfleet, mode: offline, dir: wandb-runs}
      mlflow: {tracking_uri: "sqlite:///mlflow.db", experiment: evalfleet}
      tensorboard: {logdir: tb}
      trackio: {project: evalfleet}

Each sink is optional; what each logs and how an unreachable tracker is handled is outputs/tracking.
A URI or folder here never carries credentials (`https://user:password@host`): it is written into
OUT/experiment.yaml, the tracked config and every workflow, so it is refused; the trackers read them from
their own environment variables (MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD, AWS_ACCESS_KEY_ID / ...).
`evalfleet run --track SINK[:TARGET]` writes the same keys (`tracking_flag_overrides`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from evalfleet.experiment.numbers import Float

Name = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:/ -]+$")]
Path = Annotated[str, Field(min_length=1, max_length=4096)]
DEFAULT_TIMEOUT_S = 120.0  # a new sqlite store migrates its tables first: ~8 s idle, much more on a busy machine
STORE_KEYS = "put the store's keys in the environment (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY for s3://)"


def no_credentials(value: str | None, fix: str) -> str | None:
    """`value` unless it is a URL carrying credentials (secrets.carries_credentials): refused, with `fix`.
    Refused rather than moved into a variable: each tracker already reads its credentials from the environment."""
    from evalfleet.secrets import carries_credentials

    if value is not None and carries_credentials(value):
        raise ValueError("credentials in the URL are not accepted (it is written into OUT/experiment.yaml and "
                         f"every workflow): give it without them and {fix}")
    return value


class SinkOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # The tracker run the points go to. Default: the output folder's name; with `evaluate(..., step=N)`
    # the Experiment's name and its output's parent folder, so every step's call lands in one run (a curve).
    run_name: Name | None = None


class WandbOptions(SinkOptions):
    project: Name = "evalfleet"  # the W&B project
    entity: Name | None = None  # the W&B team or user (default: W&B's own)
    # None: WANDB_MODE, else W&B's own default (online). Offline runs are written under `dir`.
    mode: Literal["online", "offline", "disabled"] | None = None
    dir: Path | None = None  # default: OUT/tracking/wandb
    group: Name | None = None  # W&B's run group (e.g. one per training run)
    tags: list[Name] = Field(default_factory=list, max_length=50)  # W&B's run tags


class MlflowOptions(SinkOptions):
    tracking_uri: Path | None = None  # default: sqlite:///OUT/tracking/mlflow.db
    experiment: Name = "evalfleet"  # the MLflow experiment the runs go to
    artifact_location: Path | None = None  # a new experiment's; default: OUT/tracking/mlflow-artifacts

    @field_validator("tracking_uri")
    @classmethod
    def tracking_uri_without_credentials(cls, v: str | None) -> str | None:
        return no_credentials(v, "set MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN),"
                                 " which MLflow reads, or for a database store its driver's variable (PGPASSWORD "
                                 "for postgresql://)")

    @field_validator("artifact_location")
    @classmethod
    def artifact_location_without_credentials(cls, v: str | None) -> str | None:
        return no_credentials(v, STORE_KEYS)


class TensorboardOptions(SinkOptions):
    logdir: Path | None = None  # default: OUT/tracking/tensorboard; event files under logdir/<run_name>

    @field_validator("logdir")
    @classmethod
    def logdir_without_credentials(cls, v: str | None) -> str | None:
        return no_credentials(v, STORE_KEYS)

    @field_validator("run_name")
    @classmethod
    def inside_the_logdir(cls, v: str | None) -> str | None:
        """The run's event files are written to logdir/<run_name>: a name that climbs out of it is refused."""
        if v is not None and (v.startswith("/") or any(part in ("", ".", "..") for part in v.split("/"))):
            raise ValueError(f"{v!r} would place the run's files outside the logdir: use a name without empty, "
                             "'.' or '..' parts, not starting with /")
        return v


class TrackioOptions(SinkOptions):
    project: Name = "evalfleet"  # the store is trackio's own: TRACKIO_DIR (default ~/.cache/huggingface/trackio)


class Tracking(BaseModel):
    model_config = ConfigDict(extra="forbid")
    wandb: WandbOptions | None = None  # Weights & Biases (`WANDB_MODE=offline` works without a network)
    mlflow: MlflowOptions | None = None  # MLflow (default store: sqlite in OUT/tracking)
    tensorboard: TensorboardOptions | None = None  # TensorBoard event files
    trackio: TrackioOptions | None = None  # trackio (Hugging Face's local tracker)
    # The longest one sink may take to log (its network waits are bounded shorter); past it the run goes on.
    timeout_s: Float = Field(default=DEFAULT_TIMEOUT_S, gt=0, le=3600, allow_inf_nan=False)

    def sinks(self) -> dict[str, SinkOptions]:
        """The configured sinks, by name, in a fixed order."""
        chosen = {"wandb": self.wandb, "mlflow": self.mlflow, "tensorboard": self.tensorboard, "trackio": self.trackio}
        return {name: options for name, options in chosen.items() if options is not None}


SINK_NAMES = ("wandb", "mlflow", "tensorboard", "trackio")
# What `--track SINK:TARGET` sets: the one option a target names.
TARGET_KEYS = {"wandb": "project", "mlflow": "tracking_uri", "tensorboard": "logdir", "trackio": "project"}


def tracking_flag_overrides(flags: list[str], *, where: str = "command line", key: str = "--track") -> list[str]:
    """`--track wandb`, `--track mlflow:sqlite:///x.db`, `--track tensorboard:DIR`, `--track trackio:PROJECT` as
    the overrides they stand for (`tracking.mlflow.tracking_uri=...`); an unknown sink is a UserError."""
    from evalfleet.errors import UserError
    from evalfleet.experiment.overrides import format_value

    overrides = []
    for flag in flags:
        sink, sep, target = flag.partition(":")
        if sink not in SINK_NAMES:
            raise UserError(f"unknown tracking sink {sink!r} in {flag!r}; sinks: {', '.join(SINK_NAMES)} "
                            "(e.g. --track mlflow:sqlite:///mlflow.db)", where=where, key=key)
        if sep and not target:
            raise UserError(f"{flag!r}: nothing after ':'; write --track {sink} or --track {sink}:"
                            f"{TARGET_KEYS[sink].upper()}", where=where, key=key)
        overrides.append(f"tracking.{sink}.{TARGET_KEYS[sink]}={format_value(target)}" if target
                         else f"tracking.{sink}={{}}")
    return overrides
