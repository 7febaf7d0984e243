"""Typed models of an Experiment file. Unknown keys are errors; adapter options pass through untyped
until the adapter's registry entry validates them (see validation.py)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, field_validator, model_validator

from evalfleet.experiment.numbers import Float
from evalfleet.experiment.tracking import Tracking, no_credentials

from evalfleet.experiment.timing import Timing

# Counts and seeds take whole numbers only: lax pydantic would read `num_episodes: true` as 1.
Int = Annotated[int, Strict()]

# Every value has bounds, so nothing downstream meets a NaN, an overflow or a size the machine cannot
# hold. The limits are far above any real evaluation and far below what would hang a plan or a runner.
MAX_NAME = 100  # Run and Experiment names become folder names (file systems allow 255 bytes)
MAX_TAG = 200  # task / policy_name tags: labels in records and reports
MAX_INSTRUCTION = 2_000  # a language instruction given to the policy
MAX_TYPE = 1024  # an environment or policy `type` may be a path
MAX_RUNS = 1_000
MAX_EPISODES = 1_000_000  # per Run; the plan lists every episode
MAX_STEPS = 10**10
MAX_ENVS = 1_024  # env instances stepped in lockstep inside one runner process
MAX_ATTEMPTS = 100
MAX_SECONDS = 7 * 24 * 3600.0  # timeouts; also keeps them below threading's TIMEOUT_MAX
MAX_SEED = 2**63 - 1
MAX_SAMPLER = 1e9  # sampler bounds: |high - low| stays finite
MAX_PIXELS = 8_192
MAX_FPS = 1_000
MAX_MESH_TOLERANCE_PX = 16.0
# A comparison is tested at alpha / m (sequential Holm, m up to MAX_RUNS) through the normal quantile of
# 1 - alpha / 2m, which a float rounds to 1 (a crash) below ~1e-13; one in a million keeps far from that, and
# is far below any error rate an evaluation's episodes could support.
MIN_ALPHA = 1e-6

# Names are matched whole (fullmatch; `$` would also accept a trailing newline).
RUN_NAME = re.compile(rf"[A-Za-z_][A-Za-z0-9_-]{{0,{MAX_NAME - 1}}}")
# The Experiment's name becomes part of folder and workflow names (outputs/<name>-<time>).
EXPERIMENT_NAME = re.compile(rf"[A-Za-z0-9_][A-Za-z0-9_.-]{{0,{MAX_NAME - 1}}}")

Seconds = Annotated[Float, Field(allow_inf_nan=False, gt=0, le=MAX_SECONDS)]
SamplerNumber = Annotated[Float, Field(allow_inf_nan=False, ge=-MAX_SAMPLER, le=MAX_SAMPLER)]
SamplerValue = SamplerNumber | list[SamplerNumber]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TypedSection(BaseModel):
    """`environment` or `policy`: a registry `type` plus that type's options (validated by the type)."""

    model_config = ConfigDict(extra="allow")
    type: str = Field(min_length=1, max_length=MAX_TYPE)  # a registered type (`evalfleet variations`), or a path

    @field_validator("type")
    @classmethod
    def one_line(cls, v: str) -> str:
        if not v.isprintable():
            raise ValueError(f"must be one line of printable text, got {v!r}")
        return v

    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class PolicySection(TypedSection):
    # How many actions of a returned chunk run before the policy is asked again (None: the whole chunk).
    open_loop_horizon: Int | None = Field(default=None, gt=0, le=MAX_EPISODES)


class RolloutLimit(Strict):
    num_episodes: Int | None = Field(default=None, gt=0, le=MAX_EPISODES)  # episodes 0..N-1 of the plan
    num_steps: Int | None = Field(default=None, gt=0, le=MAX_STEPS)  # or: new episodes until this many steps

    @model_validator(mode="after")
    def exactly_one(self) -> "RolloutLimit":
        if (self.num_episodes is None) == (self.num_steps is None):
            raise ValueError("set exactly one of num_episodes or num_steps")
        return self


class EnvironmentBuilder(BaseModel):
    # Arena's builder carries simulator flags we do not know; known environment types reject extras.
    model_config = ConfigDict(extra="allow")
    num_envs: Int = Field(default=1, gt=0, le=MAX_ENVS)  # env instances one runner steps in lockstep
    seed: Int | None = Field(default=None, ge=0, le=MAX_SEED)  # Arena's builder seed (episode seeds come from the plan)
    # Isaac Lab Arena's ArenaEnvBuilderCfg keys, typed so a bad value is refused at load. An evalfleet environment
    # gets each one's equivalent, or a UserError naming it (experiment/arena_keys.py).
    placement_seed: Int | None = Field(default=None, ge=0, le=MAX_SEED)
    # the instruction a language-conditioned policy is given (default: the environment's own for its task)
    language_instruction: str | None = Field(default=None, min_length=1, max_length=MAX_INSTRUCTION)
    camera_height: Int | None = Field(default=None, gt=0, le=MAX_PIXELS)  # the policy's camera images' size
    camera_width: Int | None = Field(default=None, gt=0, le=MAX_PIXELS)  # (default: the environment's)
    # a condition set (JSONL) whose rows give each episode its conditions (docs/conditions.md)
    episode_conditions_path: str | None = Field(default=None, min_length=1, max_length=MAX_TYPE)


class RunLabels(Strict):
    """Arena's `labels: {task, policy}`: the Run's task and policy tags (`task` / `policy_name` in evalfleet)."""

    task: str | None = None  # the Run's task tag (evalfleet's `task`)
    policy: str | None = None  # the Run's policy tag (evalfleet's `policy_name`)

    @field_validator("task", "policy")
    @classmethod
    def one_line_tag(cls, v: str | None) -> str | None:
        return _check_tag(v)


class SamplerCfg(BaseModel):
    """Arena's `sampler_cfg`: `low`/`high` for a uniform draw, or the sampler's own keys (e.g. a
    `probability`) that only the Arena environment that defines the variation reads."""

    model_config = ConfigDict(extra="allow")
    low: SamplerValue | None = None  # a uniform draw's lower bound (a number, or a vector)
    high: SamplerValue | None = None  # and its upper bound

    def is_uniform(self) -> bool:
        return self.low is not None or self.high is not None


Distribution = Literal["uniform", "normal", "choice"]


class VariationSpec(BaseModel):
    """One variation: `enabled` plus a sampler — Arena's `sampler_cfg: {low, high}` or
    `distribution: uniform (low, high) | normal (mean, std, optional low/high clip) | choice (values)`.
    Extra keys are the variation's own options, checked by the environment type."""

    model_config = ConfigDict(extra="allow")
    enabled: bool = False  # a variation that is not enabled leaves the scene at its nominal value
    sampler_cfg: SamplerCfg | None = None  # Arena's spelling of low/high
    distribution: Distribution | None = None  # uniform, normal or choice (default: the variation's own sampler)
    low: SamplerValue | None = None  # uniform's bounds (a number, or a vector for a vector variation)
    high: SamplerValue | None = None  # uniform's upper bound (a normal's upper clip)
    mean: SamplerValue | None = None  # normal's parameters (low/high then clip)
    std: SamplerValue | None = None  # normal's standard deviation
    values: list[Any] | None = None  # choice: one of these, uniformly

    @model_validator(mode="after")
    def check_sampler(self) -> "VariationSpec":
        if self.sampler_cfg is not None and (self.distribution is not None or self.low is not None):
            raise ValueError("give either sampler_cfg or distribution/low/high, not both")
        if self.sampler_cfg is not None and not self.sampler_cfg.is_uniform():
            return self  # the Arena environment's own sampler (e.g. `probability`): drawn by Arena
        low, high = (self.sampler_cfg.low, self.sampler_cfg.high) if self.sampler_cfg else (self.low, self.high)
        dist = self.distribution or ("uniform" if low is not None or high is not None else None)
        if dist == "uniform":
            if low is None or high is None:
                raise ValueError("a uniform sampler needs both low and high")
            _check_bounds(low, high)
        elif dist == "normal":
            if self.mean is None or self.std is None:
                raise ValueError("a normal sampler needs mean and std")
            _same_shape(self.mean, self.std, "mean", "std")
            if any(s < 0 for s in _as_list(self.std)):
                raise ValueError("std must be >= 0")
            if low is not None and high is not None:
                _check_bounds(low, high)
        elif dist == "choice":
            if not self.values:
                raise ValueError("a choice sampler needs a non-empty `values` list")
            for value in self.values:
                _check_choice_value(value)
        return self

    def sampler(self) -> dict[str, Any] | None:
        """The normalised sampler: {"distribution": ..., params} or None when none was given."""
        if self.sampler_cfg is not None and not self.sampler_cfg.is_uniform():
            return None
        if self.sampler_cfg is not None:
            return {"distribution": "uniform", "low": self.sampler_cfg.low, "high": self.sampler_cfg.high}
        if self.distribution == "normal":
            out: dict[str, Any] = {"distribution": "normal", "mean": self.mean, "std": self.std}
            if self.low is not None and self.high is not None:
                out.update(low=self.low, high=self.high)
            return out
        if self.distribution == "choice":
            return {"distribution": "choice", "values": self.values}
        if self.low is not None:
            return {"distribution": "uniform", "low": self.low, "high": self.high}
        return None

    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


def _as_list(v: float | list[float]) -> list[float]:
    return list(v) if isinstance(v, list) else [v]


def _same_shape(a: Any, b: Any, an: str, bn: str) -> None:
    if isinstance(a, list) != isinstance(b, list) or (isinstance(a, list) and len(a) != len(b)):
        raise ValueError(f"{an} and {bn} must have the same length (got {a!r} and {b!r})")


def _check_choice_value(value: Any) -> None:
    """Numbers among `values` (also inside vectors) obey the same bounds as low/high."""
    for x in value if isinstance(value, list) else [value]:
        if isinstance(x, (int, float)) and not isinstance(x, bool) and not (-MAX_SAMPLER <= x <= MAX_SAMPLER):
            raise ValueError(f"`values` must be finite numbers within ±{MAX_SAMPLER:g}, got {x!r}")


def _check_bounds(low: Any, high: Any) -> None:
    _same_shape(low, high, "low", "high")
    for lo, hi in zip(_as_list(low), _as_list(high)):
        if lo > hi:
            raise ValueError(f"low must not exceed high (low={low!r}, high={high!r})")


TRAJECTORY_KEYS = ("state", "environment_state", "action", "applied_action", "reward", "success", "done", "progress")
DEFAULT_TRAJECTORY_KEYS = ["state", "action", "reward", "success", "done", "progress"]
MAX_CAMERA_NAME = 200


class Trajectories(Strict):
    """`recording.trajectories`: which episodes keep their per-step frames, and which keys (rollout/trajectory.py);
    collect writes them as a LeRobotDataset v3.0 (outputs/lerobot_dataset.py)."""

    episodes: Literal["all", "failures", "every_n", "sample"] = "all"  # which episodes keep their frames
    every_n: Int = Field(default=10, gt=0, le=MAX_EPISODES)  # `every_n`: episodes 0, n, 2n, ... of the plan
    fraction: Float = Field(default=0.1, gt=0, le=1, allow_inf_nan=False)  # `sample`: this share, chosen by seed
    # what each frame holds (docs/trajectories.md: state, action as sent, reward, success, done, progress, ...)
    keys: list[Literal[TRAJECTORY_KEYS]] = Field(default_factory=lambda: list(DEFAULT_TRAJECTORY_KEYS),
                                                  min_length=1)
    cameras: list[Annotated[str, Field(min_length=1, max_length=MAX_CAMERA_NAME)]] = Field(
        default_factory=list, max_length=16)  # recorded at every step as video
    width: Int | None = Field(default=None, gt=0, le=MAX_PIXELS)  # camera frame size (default 224)
    height: Int | None = Field(default=None, gt=0, le=MAX_PIXELS)  # (default: the width)
    dataset: Literal["experiment", "run"] = "experiment"  # one dataset for the Experiment, or one per Run
    # The dataset's frame rate where the environment declares no control rate (Meta-World declares 80 Hz).
    fps: Int = Field(default=10, gt=0, le=MAX_FPS)

    @field_validator("keys", "cameras")
    @classmethod
    def _no_repeats(cls, values: list[str]) -> list[str]:
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated:
            raise ValueError(f"listed more than once: {', '.join(repeated)}")
        return values


class Recording(Strict):
    trajectories: Trajectories | None = None  # per-step frames as a LeRobot dataset (docs/trajectories.md)
    video: bool = False  # mp4 videos of some episodes (rollout/video.py)
    cameras: list[str] = Field(default_factory=list)  # the cameras the videos show
    every_n_episodes: Int = Field(default=10, gt=0, le=MAX_EPISODES)  # episodes 0, n, 2n, ... get a video
    fps: Int = Field(default=20, gt=0, le=MAX_FPS)  # video frames per simulated second
    width: Int | None = Field(default=None, gt=0, le=MAX_PIXELS)  # video size (default 224)
    height: Int | None = Field(default=None, gt=0, le=MAX_PIXELS)  # (default: the width)
    every_step: bool = False  # a frame after every control step, not only the `fps` frames (rollout/video.py)
    # Meshes in video frames are simplified so no vertex moves more than this many pixels (sim/mesh_detail.py);
    # 0 draws them whole. A policy's own camera images are never simplified.
    mesh_tolerance_px: Float = Field(default=1.0, ge=0, le=MAX_MESH_TOLERANCE_PX, allow_inf_nan=False)


class Precision(Strict):
    """`stopping.precision`: stop a Run once its anytime-valid 95% interval is at most 2 * half_width wide."""

    half_width: Float = Field(gt=0, le=0.5, allow_inf_nan=False)  # of the success rate: 0.05 is ±5 points


class Compare(Strict):
    """`stopping.compare`: on each task, stop each policy-vs-baseline pair of Runs once its paired test decides."""

    baseline: str = Field(min_length=1, max_length=MAX_TAG)  # a policy tag (`Run.policy_tag()`) on the same task
    alpha: Float = Field(default=0.05, ge=MIN_ALPHA, lt=0.5, allow_inf_nan=False)  # the family's error rate (Holm)
    # how alpha is spent over the looks: O'Brien-Fleming keeps it for the last looks, Pocock spends it evenly
    spending: Literal["obrien_fleming", "pocock", "hwang_shih_decani"] = "obrien_fleming"
    # An equivalence margin: `no_difference` once the difference's valid interval lies inside (-margin, +margin).
    margin: Float | None = Field(default=None, gt=0, lt=1, allow_inf_nan=False)
    # hwang_shih_decani's parameter (docs/statistics.md): -4 is near O'Brien-Fleming, 1 near Pocock; None: -3.
    gamma: Float | None = Field(default=None, ge=-10, le=5, allow_inf_nan=False)

    @field_validator("gamma")
    @classmethod
    def gamma_only_for_hsd(cls, v: float | None, info) -> float | None:
        spending = info.data.get("spending", "obrien_fleming")
        if v is not None and spending != "hwang_shih_decani":
            raise ValueError(f"gamma is a parameter of spending: hwang_shih_decani, not of {spending}; "
                             "remove gamma or set spending: hwang_shih_decani")
        return v


class Stopping(Strict):
    """Sequential evaluation (docs/statistics.md): decisions every `wave` episodes, in episode-index order, up
    to `max_episodes` (the cap, which the plan covers; default: the Run's rollout_limit.num_episodes)."""

    wave: Int = Field(default=10, gt=0, le=MAX_EPISODES)  # episodes per Run between two looks
    max_episodes: Int | None = Field(default=None, gt=0, le=MAX_EPISODES)  # the cap (default: num_episodes)
    precision: Precision | None = None  # stop a Run once its success rate is known this well
    compare: Compare | None = None  # stop each policy-vs-baseline pair once its paired test decides

    @model_validator(mode="after")
    def some_rule(self) -> "Stopping":
        if self.precision is None and self.compare is None:
            raise ValueError("give at least one of precision or compare (a stopping rule with nothing to decide)")
        return self


MAX_HOLD_STEPS = 100_000


class SuccessRule(Strict):
    """`success:` of a Run: a success ends the episode only once it has held `hold_steps` consecutive steps (Arena's
    success streaks), so a success that flickers for one step is not counted (rollout/runner.py: `_ending`)."""

    hold_steps: Int = Field(default=1, ge=1, le=MAX_HOLD_STEPS)  # consecutive steps a success must hold


class Run(Strict):
    environment: TypedSection  # the simulated task: `type` and that type's options (docs/reference/environments.md)
    policy: PolicySection  # the policy: `type` and that type's options
    rollout_limit: RolloutLimit  # how many episodes (or steps) the Run plays
    # how the environment is built: env instances per runner, and Isaac Lab Arena's builder keys
    environment_builder: EnvironmentBuilder = Field(default_factory=EnvironmentBuilder)
    # Flat "asset.variation" → spec (the loader flattens Arena's nested asset → variation form).
    variations: dict[str, VariationSpec] = Field(default_factory=dict)
    task: str | None = None  # the task tag (default: the environment's task): episode seeds derive from it
    policy_name: str | None = None  # the policy tag reports and comparisons name it by (default: the policy type)
    recording: Recording = Field(default_factory=Recording)  # videos and trajectories
    success: SuccessRule = Field(default_factory=SuccessRule)  # when a success counts
    max_attempts: Int = Field(default=3, gt=0, le=MAX_ATTEMPTS)  # tries of an episode that ends in an error
    # Arena: how many times its runner rebuilds the environment (one episode_results_rebuild<R>.jsonl each).
    num_rebuilds: Int | None = Field(default=None, gt=0, le=MAX_ATTEMPTS)
    episode_timeout_s: Seconds = 600.0  # wall-clock deadline of one episode (past it: an episode_timeout error)
    # Sequential stopping for this Run; replaces the Experiment's `stopping:` (experiment/stopping.py resolves it).
    stopping: Stopping | None = None
    # A condition set replayed (experiment/replay.py): at load `conditions: FILE` becomes the inline list.
    conditions: dict[str, Any] | None = None
    # What the policy's inference time costs it (experiment/timing.py; None: sync, the world waits for the policy).
    timing: Timing | None = None

    # Arena's `labels: {task, policy}`: the same tags as `task` / `policy_name` (both set differently: refused).
    labels: RunLabels | None = None

    @field_validator("task", "policy_name")
    @classmethod
    def non_empty(cls, v: str | None) -> str | None:
        return _check_tag(v)

    @model_validator(mode="after")
    def labels_agree(self) -> "Run":
        for ours, arenas in (("task", "task"), ("policy_name", "policy")):
            mine, label = getattr(self, ours), getattr(self.labels, arenas) if self.labels else None
            if mine is not None and label is not None and mine != label:
                raise ValueError(f"{ours} ({mine!r}) and labels.{arenas} ({label!r}) set the Run's {arenas} tag "
                                 f"differently; keep one of them (labels.{arenas} is Arena's spelling of {ours})")
        limit = self.rollout_limit.num_episodes
        if self.num_rebuilds and limit is not None and limit < self.num_rebuilds:
            raise ValueError(f"num_episodes ({limit}) is below num_rebuilds ({self.num_rebuilds}): Arena splits a "
                             "Run's episodes across its rebuilds, each at least one; raise num_episodes or lower "
                             "num_rebuilds")
        return self

    def task_tag(self) -> str:
        """The Run's task: explicit `task` (or Arena's `labels.task`), else the environment's `task` option (by
        name, or suite and index), else its type's stem."""
        tag = self.task or (self.labels.task if self.labels else None)
        if tag:
            return tag
        opts = self.environment.options()
        for key in ("task", "task_name", "env_name"):
            if isinstance(opts.get(key), str):
                return opts[key]
        index = opts.get("task")
        if isinstance(index, int) and not isinstance(index, bool):  # a task by index (LIBERO): `<suite>_task<i>`
            suite = opts.get("suite")
            return f"{suite if isinstance(suite, str) else _stem(self.environment.type)}_task{index}"
        return _stem(self.environment.type)

    def policy_tag(self) -> str:
        return self.policy_name or (self.labels.policy if self.labels else None) or _stem(self.policy.type)


def _check_tag(v: str | None) -> str | None:
    if v is not None and not v.strip():
        raise ValueError("must not be empty")
    if v is not None and (len(v) > MAX_TAG or not v.isprintable()):
        raise ValueError(f"must be one line of printable text of at most {MAX_TAG} characters, got {v[:40]!r}")
    return v


def _stem(type_name: str) -> str:
    """`a/b/banana_in_bowl.yaml` → `banana_in_bowl`; `pkg.mod.Pi0RemotePolicy` → `Pi0RemotePolicy`."""
    name = type_name.replace("\\", "/").rsplit("/", 1)[-1]
    for ext in (".yaml", ".yml", ".py"):
        if name.endswith(ext):
            return name[: -len(ext)]
    return name.rsplit(".", 1)[-1] if "." in name else name


def one_dataset(runs: dict[str, Run]) -> None:
    """The Runs whose trajectories go to the Experiment's one dataset record the same kind of frames."""
    shared = {name: run for name, run in runs.items()
              if run.recording.trajectories is not None and run.recording.trajectories.dataset == "experiment"}
    if len(shared) < 2:
        return

    def frames(run: Run) -> tuple[Any, ...]:
        t = run.recording.trajectories
        return (run.environment.type, tuple(t.keys), tuple(t.cameras), t.width, t.height)

    first, *rest = shared
    for name in rest:
        if frames(shared[name]) != frames(shared[first]):
            raise ValueError(
                f"Runs {first!r} and {name!r} write their trajectories to one dataset, but record different frames "
                "(environment type, keys, cameras or size); give them the same `recording.trajectories` in `shared`, "
                "or set `recording.trajectories.dataset: run` (one dataset per Run)")


class Experiment(Strict):
    name: str = "experiment"  # names the output folder (outputs/<name>-<time>) and the report
    seed: Int = Field(default=0, ge=0, le=MAX_SEED)  # every episode's seed derives from it, the task tag and the index
    runs: dict[str, Run]  # the Runs by name
    # per_run: a policy server for every Run that needs one; per_policy: one server for all Runs
    # whose server-side policy settings are identical (batched across them).
    server_sharing: Literal["per_run", "per_policy"] = "per_run"
    # `shared` is merged into every Run before validation; kept for provenance only.
    shared: dict[str, Any] = Field(default_factory=dict)
    # Sequential stopping for every Run without its own `stopping:` (experiment/stopping.py).
    stopping: Stopping | None = None
    # Floors (experiment/floors.py): the no-op and/or random policy added on every task as paired arms.
    floors: list[Literal["noop", "random"]] = Field(default_factory=list, max_length=2)
    # Experiment trackers the results are logged to (experiment/tracking.py, outputs/tracking/).
    tracking: Tracking | None = None
    # A results store (evalfleet/store/) the collected output is added to at the end of run/collect/evaluate:
    # a folder or an fsspec URL (s3://bucket/prefix); $EVALFLEET_STORE when not given.
    store: str | None = Field(default=None, min_length=1, max_length=4096)

    @field_validator("name")
    @classmethod
    def usable_as_folder_name(cls, v: str) -> str:
        if not EXPERIMENT_NAME.fullmatch(v):
            raise ValueError(
                f"bad Experiment name {v[:MAX_NAME + 10]!r}: it names output folders, so use letters, digits, '_', "
                f"'-' and '.' (starting with a letter, digit or '_'), at most {MAX_NAME} characters"
            )
        return v

    @field_validator("floors")
    @classmethod
    def floors_once(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("each floor at most once: noop, random")
        return v

    @field_validator("store")
    @classmethod
    def store_without_credentials(cls, v: str | None) -> str | None:
        return no_credentials(v, "set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or your filesystem's variables)")

    @field_validator("runs")
    @classmethod
    def some_runs(cls, runs: dict[str, Run]) -> dict[str, Run]:
        if not runs:
            raise ValueError("an Experiment needs at least one Run")
        if len(runs) > MAX_RUNS:
            raise ValueError(f"{len(runs)} Runs; at most {MAX_RUNS} in one Experiment")
        one_dataset(runs)
        return runs
