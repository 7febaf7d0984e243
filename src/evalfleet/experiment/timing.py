"""A Run's `timing:` — what the policy's inference time costs it (issue #28; docs/realtime.md).

`mode: sync` (the default, and what a Run without `timing:` gets): the world waits for the policy.
`mode: simulated`: each policy call takes a modelled latency (`latency: {fixed_ms}`, a sampler drawn from the
episode's seed, or `{recorded: FILE}`, latencies a server recorded, drawn per call from the episode's seed), or
the Run's `policy.latency_ms` variation; it becomes control steps that the env steps without the answer
(rollout/latency.py). `mode: wall_clock`: the env steps at `control_hz` in real time while the policy computes
(not reproducible). `late_action`: what the env steps with while it waits: the previous action (`hold`) or zeros.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from evalfleet import bounded_json
from evalfleet.errors import UserError
from evalfleet.experiment.numbers import Float
from evalfleet.experiment.safe_yaml import read_text_bounded

LATENCY_VARIATION = "policy.latency_ms"  # a Run's own variation (not its environment's): one latency per episode
MAX_LATENCY_MS = 3_600_000.0  # an hour per call
MAX_CONTROL_HZ = 10_000.0
# One control step per 100 s: slower is no control loop, and a wall-clock step of 1/control_hz seconds must stay a
# time the clock can count to (control_hz: 1e-300 made every episode an error).
MIN_CONTROL_HZ = 0.01
MAX_RECORDED = 100_000  # recorded latencies travel inside experiment.yaml
MAX_RECORDED_BYTES = 128 * 1024 * 1024  # a recorded-latency file: MAX_RECORDED episode records of ~1 KB fit
LatencyMs = Field(default=None, ge=0, le=MAX_LATENCY_MS, allow_inf_nan=False)
Ms = Annotated[Float, Field(ge=0, le=MAX_LATENCY_MS, allow_inf_nan=False)]


NEEDS = {"uniform": ("low", "high"), "normal": ("mean", "std"), "choice": ("values",)}  # a sampler's keys


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LatencySpec(_Strict):
    """One of: `fixed_ms`; a sampler (`distribution: uniform|normal|choice` with its keys, in ms; a normal draw
    below 0 is 0); `recorded`: a file of latencies in ms (numbers, a JSON list, or episode records' JSON lines,
    whose `policy_latency_ms` is taken), read at load into the inline list."""

    fixed_ms: Float | None = LatencyMs  # every call takes this long
    distribution: Literal["uniform", "normal", "choice"] | None = None  # or each call's latency drawn from this
    low: Float | None = LatencyMs  # uniform's bounds (a normal's clip), in ms
    high: Float | None = LatencyMs  # (ms)
    mean: Float | None = LatencyMs  # normal's mean and standard deviation, in ms
    std: Float | None = LatencyMs  # (ms)
    values: list[Ms] | None = None  # choice: one of these, uniformly, in ms
    # A file's values once read (`attach_recorded_latencies`) or given inline: the same bounds either way.
    recorded: Annotated[list[Ms], Field(max_length=MAX_RECORDED)] | str | None = None

    @model_validator(mode="after")
    def exactly_one(self) -> "LatencySpec":
        given = [name for name, on in (("fixed_ms", self.fixed_ms is not None),
                                       ("a sampler", self.distribution is not None or self.low is not None),
                                       ("recorded", self.recorded is not None)) if on]
        if len(given) != 1:
            raise ValueError("give exactly one of fixed_ms, a sampler (distribution: uniform|normal|choice in ms) or "
                             f"recorded: FILE (got {', '.join(given) or 'none'})")
        sampler = self.sampler()
        if sampler is not None:
            needs = NEEDS[sampler["distribution"]]
            if any(not sampler.get(k) and sampler.get(k) != 0 for k in needs):
                raise ValueError(f"a {sampler['distribution']} latency needs {' and '.join(needs)} (in ms)")
            if "low" in sampler and "high" in sampler and sampler["low"] > sampler["high"]:
                raise ValueError(f"low must not exceed high (low={self.low!r}, high={self.high!r})")
        if isinstance(self.recorded, list) and not self.recorded:
            raise ValueError("recorded holds no latencies")
        return self

    def sampler(self) -> dict[str, Any] | None:
        """The normalised sampler (as a variation's), or None for fixed and recorded latencies."""
        if self.distribution is None and self.low is None:
            return None
        dist = self.distribution or "uniform"
        keys = {"uniform": ("low", "high"), "normal": ("mean", "std", "low", "high"), "choice": ("values",)}[dist]
        return {"distribution": dist, **{k: getattr(self, k) for k in keys if getattr(self, k) is not None}}


class Timing(_Strict):
    # sync: the env waits for every action; simulated: a modelled latency in simulated time; wall_clock: real time
    mode: Literal["sync", "simulated", "wall_clock"] = "sync"
    # the env's control rate for the latency model (default: the rate the environment declares)
    control_hz: Float | None = Field(default=None, ge=MIN_CONTROL_HZ, le=MAX_CONTROL_HZ, allow_inf_nan=False)
    latency: LatencySpec | None = None  # simulated: how long each policy call takes
    late_action: Literal["hold", "zero"] = "hold"  # what the env steps with while it waits: the last action or 0

    @model_validator(mode="after")
    def latency_fits_mode(self) -> "Timing":
        if self.latency is not None and self.mode != "simulated":
            raise ValueError(f"latency is modelled only in mode: simulated (mode {self.mode} "
                             f"{'waits for the policy' if self.mode == 'sync' else 'measures the policy itself'}); "
                             "set mode: simulated or remove latency")
        return self


def check_run_timing(run: Any, where: str, key: str) -> None:
    """What `timing:` needs of the rest of the Run: a simulated Run has a latency (its own or the variation), and
    the `policy.latency_ms` variation is only drawn for a simulated Run."""
    timing = run.timing
    variation = run.variations.get(LATENCY_VARIATION)
    varied = variation is not None and variation.enabled
    mode = timing.mode if timing is not None else "sync"
    if varied and mode != "simulated":
        raise UserError(f"the {LATENCY_VARIATION} variation is a simulated latency: set timing: {{mode: simulated}} "
                        "in this Run, or disable the variation", where=where,
                        key=f"{key}.variations.{LATENCY_VARIATION}")
    if mode == "simulated" and timing.latency is None and not varied:
        raise UserError("a simulated Run needs a latency: give timing.latency ({fixed_ms: 200}, a sampler or "
                        f"{{recorded: FILE}}) or enable the {LATENCY_VARIATION} variation", where=where,
                        key=f"{key}.timing.latency")
    if mode == "wall_clock" and run.environment_builder.num_envs != 1:
        raise UserError("mode: wall_clock paces one env in real time per runner; set num_envs: 1 (more envs: "
                        "more workers)", where=where, key=f"{key}.environment_builder.num_envs")
    if varied:
        sampler = variation.sampler()
        if sampler is None:
            raise UserError(f"the {LATENCY_VARIATION} variation needs a sampler in ms (e.g. distribution: choice, "
                            "values: [0, 100, 200])", where=where, key=f"{key}.variations.{LATENCY_VARIATION}")
        numbers = sampler.get("values") or [sampler.get(k) for k in ("low", "high", "mean") if k in sampler]
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x <= MAX_LATENCY_MS
                   for x in numbers):
            raise UserError(f"latencies are numbers of ms in 0..{MAX_LATENCY_MS:g}, got {numbers!r}", where=where,
                            key=f"{key}.variations.{LATENCY_VARIATION}")


def attach_recorded_latencies(runs: dict[str, Any], where: str) -> dict[str, Any]:
    """The merged Run maps with every `timing.latency.recorded: FILE` read into its inline list of ms (a path is
    relative to the Experiment file's folder), so runners elsewhere need no file."""
    out = {}
    for name, run in runs.items():
        latency = run.get("timing", {}).get("latency") if isinstance(run, dict) and isinstance(
            run.get("timing"), dict) else None
        given = latency.get("recorded") if isinstance(latency, dict) else None
        if isinstance(given, str):
            key = f"runs.{name}.timing.latency.recorded"
            path = Path(given) if Path(given).is_absolute() else Path(where).resolve().parent / given
            run = {**run, "timing": {**run["timing"], "latency": {**latency, "recorded": _read_latencies(path, key)}}}
        out[name] = run
    return out


def _read_latencies(path: Path, key: str) -> list[float]:
    """A recorded-latency file's values: a regular file of at most MAX_RECORDED_BYTES (`/dev/zero` and a FIFO are
    refused, not read), counted before it is parsed (at most MAX_RECORDED values), each JSON value bounded."""
    hint = "write one number of ms a line, a JSON list, or episode records with policy_latency_ms"
    try:
        text = read_text_bounded(path, str(path), limit=MAX_RECORDED_BYTES, what="a file of latencies in ms")
    except UserError as exc:
        raise UserError(f"cannot read the recorded latencies: {exc.message}", where=exc.where, key=key) from None
    stripped = text.strip()
    listed = stripped.startswith("[")
    lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if (stripped.count(",") + 1 if listed else len(lines)) > MAX_RECORDED:
        raise UserError(f"more than {MAX_RECORDED:,} latencies; {hint} (at most {MAX_RECORDED:,})", where=str(path),
                        key=key)
    number = 1
    try:
        if listed:
            values = bounded_json.loads(text, max_bytes=None)
        else:
            values = []
            for number, line in lines:
                value = bounded_json.loads(line, max_bytes=None)
                value = value.get("policy_latency_ms") if isinstance(value, dict) else value
                if value is not None:
                    values.append(value)
    except ValueError as exc:  # json.JSONDecodeError and bounded_json.JsonBoundsError are ValueErrors
        at = exc.lineno if isinstance(exc, json.JSONDecodeError) and listed else number
        raise UserError(f"not a list of latencies ({getattr(exc, 'msg', exc)} at line {at}); {hint}", where=str(path),
                        key=key) from None
    bad = next((v for v in values if isinstance(v, bool) or not isinstance(v, (int, float))
                or not 0 <= v <= MAX_LATENCY_MS), None)
    if bad is not None or not values or len(values) > MAX_RECORDED:
        problem = f"the value {bad!r}" if bad is not None else f"{len(values)} latencies"
        raise UserError(f"recorded latencies are 1..{MAX_RECORDED} numbers of ms in 0..{MAX_LATENCY_MS:g}; this file "
                        f"holds {problem}", where=str(path), key=key)
    return [float(v) for v in values]
