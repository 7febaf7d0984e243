"""Checks that known environment and policy types make of a Run's options. Isaac Lab Arena's types (a task
YAML path, a dotted class path, one of Arena's registered names such as `pick_and_place_maple_table` or
`zero_action`, or `arena:NAME`; the rule is experiment/arena_types.py) pass through untyped: they load, plan and
dry-run; only executing them fails (see `require_executable`). Any other unknown name is refused, with "did you
mean" for a near miss of one of evalfleet's own."""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ValidationError

from evalfleet.errors import UserError
from evalfleet.experiment.arena_types import is_external_type, unknown_type_hint
from evalfleet.experiment.key_paths import key_path, union_message
from evalfleet.experiment.schema import Run
from evalfleet.experiment.timing import LATENCY_VARIATION, check_run_timing
from evalfleet.secrets import mask_url, shown_input


def _lookup(registry: Any, type_name: str, where: str, key: str) -> Any:
    entry = registry.get(type_name)
    if entry is None and not is_external_type(type_name, registry.names()):
        near = difflib.get_close_matches(type_name, registry.names(), n=1)
        raise UserError(f"unknown {registry.kind} type {type_name!r}{registry.suggest(type_name)}"
                        f"{'' if near else unknown_type_hint(registry.kind)}", where=where, key=key)
    return entry


def _validate_options(model: type[BaseModel], options: dict[str, Any], where: str, key: str) -> None:
    try:
        model.model_validate(options)
    except ValidationError as exc:
        errors = exc.errors()
        err = errors[0]
        loc = key_path(tuple(err["loc"]), options)
        if err["type"] == "extra_forbidden":
            close = difflib.get_close_matches(str(err["loc"][-1]), list(model.model_fields), n=3, cutoff=0.5)
            hint = f"did you mean {', '.join(close)}?" if close else f"valid keys: {', '.join(model.model_fields)}"
            msg = f"unknown key {err['loc'][-1]!r}; {hint}"
        elif err["type"] == "missing":
            msg = "required key is missing"
        else:
            msg = union_message(errors, options).removeprefix("Value error, ")
            if repr(err.get("input")) not in msg:
                msg += f" (got {shown_input(loc, err.get('input'))})"
            msg = mask_url(msg)
        raise UserError(msg, where=where, key=f"{key}.{loc}" if loc else key) from None


def validate_types(run: Run, where: str, key: str) -> None:
    from evalfleet.policies.base import POLICIES
    from evalfleet.sim.base import ENVIRONMENTS

    env = _lookup(ENVIRONMENTS, run.environment.type, where, f"{key}.environment.type")
    if env is not None:
        if env.options is not None:
            _validate_options(env.options, run.environment.options(), where, f"{key}.environment")
        _validate_builder(run, env.info, where, key)
        _validate_variations(run, env.info, where, key)
        _validate_recording_cameras(run, env.info, where, key)
        _validate_success_hold(run, env.info, where, key)
    check_run_timing(run, where, key)  # timing: and the policy.latency_ms variation (experiment/timing.py)
    policy = _lookup(POLICIES, run.policy.type, where, f"{key}.policy.type")
    if policy is not None and policy.options is not None:
        _validate_options(policy.options, run.policy.options(), where, f"{key}.policy")
    served = run.policy.options().get("serve")
    served_entry = POLICIES.get(str(served.get("type"))) if isinstance(served, dict) else None
    for entry in (policy, served_entry):
        _check_environment_for(entry, run, where, key)
    _check_declared_spec(run, where, key)


def _static_specs(run: Run) -> tuple[Any, Any]:
    """(policy spec, environment spec) as far as they are known before anything runs: the policy's (or
    the served policy's) registry entry, and what the environment's options declare (cameras, sizes)."""
    from evalfleet.policies.base import registry_spec
    from evalfleet.sim.base import environment_spec

    served = run.policy.options().get("serve")
    spec = registry_spec(run.policy.type, run.policy.options(), None)
    if spec is None and isinstance(served, dict) and served.get("type"):
        options = {k: v for k, v in served.items() if k != "type"}
        spec = registry_spec(str(served["type"]), options, None)
    return spec, environment_spec(run.environment.type, run.environment.options())


def _check_declared_spec(run: Run, where: str, key: str) -> None:
    """What is known at load time of the policy's declared spec fits the environment's options (cameras,
    image sizes, gripper); the runner checks the rest (action size, bounds) once the env exists."""
    from evalfleet.policies.base import check_spec

    try:
        spec, env_spec = _static_specs(run)
    except (ValueError, TypeError, KeyError) as exc:  # a declaration that cannot be made from these options
        raise UserError(f"the policy's spec cannot be read: {exc}", where=where, key=f"{key}.policy") from None
    except UserError as exc:  # the declaration's own file (e.g. a LeRobot config.json): name the Run's key too
        if exc.where is not None:
            raise
        raise UserError(exc.message, where=where, key=f"{key}.{exc.key}" if exc.key else f"{key}.policy") from None
    run_name = key.rsplit(".", 1)[-1]
    check_spec(spec, env_spec, run=run_name, where=where, key=f"{key}.policy")


def spec_check_summary(run: Run) -> tuple[str, str]:
    """(what the policy declares, what the environment provides) as `evalfleet plan` shows them."""
    from evalfleet.policies.base import POLICIES

    spec, env_spec = _static_specs(run)
    entry = POLICIES.get(run.policy.type)
    at_connect = entry.info.get("declares_at_connect") if entry is not None and isinstance(entry.info, dict) else None
    if spec is not None:
        declared = f"{spec.source}: {spec.describe()}"
        if at_connect:
            declared += f"; at connect, {at_connect}"
    elif at_connect:
        declared = f"at connect, {at_connect}"
    else:
        declared = "nothing declared"
    return declared, f"{env_spec.source}: {env_spec.describe()}; action size and bounds of the built env"


def _check_environment_for(entry: Any, run: Run, where: str, key: str) -> None:
    """A policy may say what it needs of the Run's environment (e.g. cameras): checked before anything runs."""
    check = entry.info.get("check_environment") if entry is not None and isinstance(entry.info, dict) else None
    if check is None:
        return
    try:
        check(run.environment.type, run.environment.options())
    except UserError as exc:
        raise UserError(exc.message, where=where, key=f"{key}.{exc.key}" if exc.key else key) from None


def _validate_recording_cameras(run: Run, info: Any, where: str, key: str) -> None:
    """The cameras a Run records (video, trajectories) are ones its environment draws, where it says which."""
    known = getattr(info, "cameras", None)
    if known is None:
        return
    trajectories = run.recording.trajectories
    for field, cameras in (("recording.cameras", run.recording.cameras),
                           ("recording.trajectories.cameras", trajectories.cameras if trajectories else [])):
        for i, camera in enumerate(cameras):
            if camera not in known:
                close = difflib.get_close_matches(camera, list(known), n=1)
                raise UserError(f"{run.environment.type} has no camera {camera[:80]!r}"
                                + (f"; did you mean {close[0]!r}?" if close else "")
                                + f" (its cameras: {', '.join(known)})", where=where, key=f"{key}.{field}[{i}]")


def _validate_success_hold(run: Run, info: Any, where: str, key: str) -> None:
    """A success held for several steps needs an env that may be stepped on after it reports success."""
    if run.success.hold_steps > 1 and not getattr(info, "steps_past_success", False):
        raise UserError(f"{run.environment.type} ends its episode when it reports success, so a success cannot be "
                        f"held for {run.success.hold_steps} steps there; remove success.hold_steps (or use an "
                        "environment that declares steps_past_success)", where=where, key=f"{key}.success.hold_steps")


def _validate_builder(run: Run, info: Any, where: str, key: str) -> None:
    for extra in run.environment_builder.model_extra or {}:
        valid = ", ".join(sorted(info.builder_keys))
        raise UserError(f"unknown key {extra!r} for environment type {run.environment.type!r}; valid keys: {valid}",
                        where=where, key=f"{key}.environment_builder.{extra}")


def _validate_variations(run: Run, info: Any, where: str, key: str) -> None:
    for name, spec in run.variations.items():
        if name == LATENCY_VARIATION:  # the Run's own variation, not its environment's: check_run_timing
            continue
        vkey = f"{key}.variations.{name}"
        variation = info.variations.get(name)
        if variation is None:
            close = difflib.get_close_matches(name, list(info.variations), n=3, cutoff=0.5)
            hint = (
                f"did you mean {', '.join(close)}?" if close
                else "see `evalfleet variations " + run.environment.type + "`"
            )
            raise UserError(f"unknown variation {name!r} for {run.environment.type}; {hint}", where=where, key=vkey)
        cfg = spec.sampler_cfg
        if cfg is not None and (cfg.model_extra or cfg.low is None or cfg.high is None):
            # Arena's own sampler keys (e.g. probability) mean nothing to evalfleet's variations.
            extra = next(iter(cfg.model_extra or {}), None)
            what = f"unknown key {extra!r}; valid keys: low, high" if extra else "sampler_cfg needs both low and high"
            raise UserError(what, where=where, key=f"{vkey}.sampler_cfg" + (f".{extra}" if extra else ""))
        if variation.options is not None:
            _validate_options(variation.options, spec.options(), where, vkey)
        elif spec.options():
            extra = next(iter(spec.options()))
            raise UserError(
                f"unknown key {extra!r}; a variation takes enabled and a sampler", where=where, key=f"{vkey}.{extra}"
            )
        sampler = spec.sampler()
        if sampler is not None:
            check_sampler_shape(sampler, variation, where, vkey)


def check_sampler_shape(sampler: dict[str, Any], variation: Any, where: str, key: str) -> None:
    if variation.kind == "categorical":
        if sampler["distribution"] != "choice":
            raise UserError("a categorical variation needs `distribution: choice` with `values`", where=where, key=key)
        return
    if sampler["distribution"] == "choice":
        # A numeric variation picks among numbers (scalar) or n-vectors (vector), nothing else.
        params = list(sampler["values"])
        for value in params:
            numbers = value if variation.kind == "vector" and isinstance(value, list) else [value]
            if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in numbers):
                what = "vectors of numbers" if variation.kind == "vector" else "numbers"
                raise UserError(f"`values` of a {variation.kind} variation must be {what}, got {value!r}",
                                where=where, key=key)
    else:
        params = [sampler.get(p) for p in ("low", "high", "mean", "std") if sampler.get(p) is not None]
    for value in params:
        if variation.kind == "vector":
            n = len(variation.components)
            if not isinstance(value, list) or len(value) != n:
                raise UserError(
                    f"expected a vector of {n} values ({', '.join(variation.components)}), got {value!r}",
                    where=where,
                    key=key,
                )
        elif isinstance(value, list):
            raise UserError(f"expected a single number, got the list {value!r}", where=where, key=key)


def require_executable(runs: dict[str, Run], where: str) -> None:
    """Before executing: every Run's environment and policy type must be installed here."""
    from evalfleet.policies.base import POLICIES
    from evalfleet.sim.base import ENVIRONMENTS

    for name, run in runs.items():
        for registry, section in ((ENVIRONMENTS, "environment"), (POLICIES, "policy")):
            type_name = getattr(run, section).type
            if registry.get(type_name) is None and is_external_type(type_name, registry.names()):
                raise UserError(
                    f"Run {name!r} uses {registry.kind} type {type_name!r} from Isaac Lab Arena, "
                    "which is not installed here and runs only "
                    "inside Arena's image; submit it instead: evalfleet submit EXP --backend osmo [--dry-run]",
                    where=where,
                    key=f"runs.{name}.{section}.type",
                )
            if registry.get(type_name) is None:
                raise UserError(
                    f"Run {name!r} uses {registry.kind} type {type_name!r}, which is not installed here; "
                    f"install the package that provides it or use one of: {', '.join(registry.names())}",
                    where=where,
                    key=f"runs.{name}.{section}.type",
                )
        served = run.policy.options().get("serve")
        if isinstance(served, dict) and POLICIES.get(str(served.get("type"))) is None:
            raise UserError(
                f"Run {name!r} serves policy type {served.get('type')!r}, which is not installed here"
                f"{POLICIES.suggest(str(served.get('type')))}",
                where=where,
                key=f"runs.{name}.policy.serve.type",
            )
