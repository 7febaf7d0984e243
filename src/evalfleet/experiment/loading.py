"""Experiment file → typed Experiment: read YAML, apply overrides, merge `shared` into every Run,
validate, then let known environment and policy types validate their own options.

Merge order, lowest first: built-in defaults < `shared` < the Run's own values < command-line overrides.
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml
from pydantic import BaseModel, ValidationError

from evalfleet.errors import UserError
from evalfleet.experiment.overrides import WHERE as COMMAND_LINE
from evalfleet.experiment.overrides import Override, parse_override, set_path, shown_override
from evalfleet.experiment.merge import runs_with_shared
from evalfleet.experiment.safe_yaml import parse_yaml, read_text_bounded
from evalfleet.experiment.schema import MAX_NAME, RUN_NAME, Experiment, Run, VariationSpec
from evalfleet.secrets import mask_url, shown_input

SPEC_KEYS = set(VariationSpec.model_fields)


@dataclass
class LoadedExperiment:
    path: str
    experiment: Experiment
    document: dict[str, Any]  # the file's document with overrides applied (variations flattened)
    backend_settings: dict[str, dict[str, Any]] = field(default_factory=dict)  # "osmo" → {key: value}
    overrides: list[str] = field(default_factory=list)
    policy_config: str | None = None  # --policy_config FILE: its policy replaced every Run's (policy_config.py)
    # --continue_on_error (Arena's runner: go on with the next Run when one fails). evalfleet always does: a failed
    # Run never stops the others; the flag is carried to Arena's runner in an Arena Run's OSMO task.
    continue_on_error: bool = False

    def resolved_document(self) -> dict[str, Any]:
        """The Experiment as run: every Run with `shared` merged in and defaults filled, secrets replaced by
        the environment variables they travel in (evalfleet.secrets): every file is made from this."""
        return self._resolved()[0]

    @property
    def secrets(self) -> dict[str, str]:
        """Environment variable → secret, for the runners and servers this Experiment starts."""
        return self._resolved()[1]

    def _resolved(self) -> tuple[dict[str, Any], dict[str, str]]:
        from evalfleet.secrets import extract

        exp = self.experiment
        runs, found = extract({name: run.model_dump(mode="json", exclude_none=True) for name, run in exp.runs.items()},
                              "runs")
        doc = {"name": exp.name, "seed": exp.seed, "server_sharing": exp.server_sharing, "runs": runs}
        if exp.tracking is not None:  # where the results are logged: kept for resume and evaluate's wired file
            doc["tracking"] = exp.tracking.model_dump(mode="json", exclude_none=True)
        if exp.store is not None:  # the results store the output is added to: kept for resume, collect, evaluate
            doc["store"] = exp.store
        return doc, found

    def resolved_yaml(self) -> str:
        return yaml.safe_dump(self.resolved_document(), sort_keys=False)


def read_document(path: str | Path) -> dict[str, Any]:
    """The file's top-level map, read with bounds (size, depth, aliases) and made of plain, finite values."""
    where = str(path)
    doc = parse_yaml(read_text_bounded(path, where), where)
    if doc is None:
        raise UserError("the file is empty; an Experiment needs a top-level `runs:` map", where=where)
    if not isinstance(doc, dict):
        raise UserError(
            f"the top level is a {type(doc).__name__}; an Experiment is a map with `runs:` (and optional `shared:`)",
            where=where,
        )
    return doc


def load_experiment(path: str | Path, overrides: Iterable[str] = (), *, policy_config: str | None = None,
                    continue_on_error: bool = False) -> LoadedExperiment:
    from evalfleet.plugins import load_registries

    load_registries()
    where = str(path)
    raw = read_document(path)
    if policy_config is not None:
        from evalfleet.experiment.policy_config import apply_policy_config, blame_policy_config, read_policy_config

        raw = apply_policy_config(_normalise(raw, where), read_policy_config(policy_config))
        try:
            loaded = _load(raw, where, overrides)
        except UserError as exc:
            raise blame_policy_config(exc, policy_config) from None
        loaded.policy_config, loaded.continue_on_error = policy_config, continue_on_error
        return loaded
    loaded = _load(raw, where, overrides)
    loaded.continue_on_error = continue_on_error
    return loaded


def _load(raw: dict[str, Any], where: str, overrides: Iterable[str]) -> LoadedExperiment:
    parsed = [parse_override(o) for o in overrides]
    backend_settings: dict[str, dict[str, Any]] = {}
    for o in parsed:
        if o.is_backend:
            set_path(backend_settings, o.path, o.value)
    if backend_settings:  # every backend's keys validated like the Experiment's own: an unknown one is exit 2
        from evalfleet.backend_registry import check_backend_settings

        check_backend_settings(backend_settings)

    # read_document's tree is already a copy in which YAML aliases (`*pi0_policy`) are independent, so
    # an override of one Run never reaches another Run that shares the anchor.
    base = _normalise(raw, where)
    # Validate the file alone first so its own mistakes are reported against the file.
    _build(base, where)
    exp_overrides = [o for o in parsed if not o.is_backend]
    if not exp_overrides:
        doc = base
    else:
        doc = _apply_overrides(base, exp_overrides)
        try:
            _build(doc, where)
        except UserError as exc:
            raise _blame_override(exc, exp_overrides, base) from None
    experiment = _build(doc, where)
    return LoadedExperiment(where, experiment, doc, backend_settings, [o.text for o in parsed])


def _normalise(doc: dict[str, Any], where: str) -> dict[str, Any]:
    if isinstance(doc.get("runs"), list):
        doc["runs"] = _runs_from_list(doc["runs"], where)
    if "runs" not in doc:
        keys = ", ".join(sorted(map(str, doc))) or "none"
        raise UserError(f"missing the top-level `runs:` map (found keys: {keys})", where=where, key="runs")
    if not isinstance(doc["runs"], dict):
        raise UserError("`runs` must be a map of Run name → Run", where=where, key="runs")
    if "shared" in doc and doc["shared"] is None:
        doc["shared"] = {}
    if "shared" in doc and not isinstance(doc["shared"], dict):
        raise UserError("`shared` must be a map of Run keys", where=where, key="shared")
    for name, run in doc["runs"].items():
        if not isinstance(name, str) or not RUN_NAME.fullmatch(name):
            raise UserError(
                f"bad Run name {name!r}: it names a folder, so use letters, digits, '_' and '-', starting with a "
                f"letter or '_', at most {MAX_NAME} characters",
                where=where,
                key=f"runs.{name}",
            )
        if not isinstance(run, dict):
            raise UserError(
                "a Run must be a map (environment, policy, rollout_limit, ...)", where=where, key=f"runs.{name}"
            )
        doc["runs"][name] = run = expand_dotted_keys(run, where, f"runs.{name}")
        _flatten_variations(run, where, f"runs.{name}")
    if isinstance(doc.get("shared"), dict):
        doc["shared"] = expand_dotted_keys(doc["shared"], where, "shared")
        _flatten_variations(doc["shared"], where, "shared")
    return doc


def _runs_from_list(runs: list[Any], where: str) -> dict[str, Any]:
    """Arena's older form: `runs:` as a list of Runs, each naming itself with `name:`."""
    out: dict[str, Any] = {}
    for i, run in enumerate(runs):
        if not isinstance(run, dict) or not isinstance(run.get("name"), str):
            raise UserError("a Run in a `runs:` list needs a `name:` (or write `runs:` as a map of name → Run)",
                            where=where, key=f"runs[{i}]")
        name = run["name"]
        if name in out:
            raise UserError(f"two Runs are named {name!r}", where=where, key=f"runs[{i}].name")
        out[name] = {k: v for k, v in run.items() if k != "name"}
    return out


def _display(parts: list[tuple[str, ...]]) -> str:
    """How a key was written: nested segments joined by '.', a flat dotted key in brackets."""
    out = parts[0][0]
    for spelled in parts[1:]:
        seg = str(spelled[0]) if len(spelled) == 1 else f'["{".".join(spelled)}"]'
        out = seg if not out else (out + seg if seg.startswith("[") else f"{out}.{seg}")
    return out


def expand_dotted_keys(doc: dict[str, Any], where: str, prefix: str) -> dict[str, Any]:
    """Arena writes flat dotted keys wherever a map is expected (`light.hdr_image.enabled: true`): they mean
    the nested form. Both spellings may be mixed and merge; setting one leaf two ways with different values
    is an error naming both keys. Lists are values: nothing inside them is expanded."""
    leaves: list[tuple[tuple[str, ...], Any, list[tuple[str, ...]]]] = []

    def walk(node: dict[Any, Any], path: tuple[str, ...], spelled: list[tuple[str, ...]]) -> None:
        for key, value in node.items():
            # Run names are names, not paths (a dotted one is refused as a bad name).
            dotted = isinstance(key, str) and "." in key and all(key.split("."))
            parts = tuple(key.split(".")) if dotted else (key,)
            here = path + parts
            how = spelled + [parts]
            if isinstance(value, dict) and value:
                walk(value, here, how)
            else:
                leaves.append((here, value, how))

    walk(doc, (), [(prefix,)])
    out: dict[Any, Any] = {}
    origin: dict[tuple[Any, ...], list[tuple[str, ...]]] = {}  # leaf path → how it was written
    for path, value, how in leaves:
        node = out
        for depth, part in enumerate(path[:-1]):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):  # a value set earlier where this key needs a map
                raise _conflict(origin[path[: depth + 1]], how, where)
        last, empty = path[-1], isinstance(value, dict) and not value
        if last not in node:
            node[last] = copy.deepcopy(value)
            origin[path] = how
        elif isinstance(node[last], dict):
            if not empty:  # a value where other keys put a map
                raise _conflict(next(h for p, h in origin.items() if p[: len(path)] == path), how, where)
        elif node[last] != value:
            raise _conflict(origin[path], how, where)
    return out


def _conflict(first: list[tuple[str, ...]], second: list[tuple[str, ...]], where: str) -> UserError:
    a, b = _display(first), _display(second)
    return UserError(f"{a} and {b} set the same key differently; keep one of them", where=where, key=b)


def _flatten_variations(section: dict[str, Any], where: str, key: str) -> None:
    """Arena nests `variations.<asset>.<variation>`; evalfleet also takes flat `asset.variation` keys."""
    variations = section.get("variations")
    if variations is None:
        return
    if not isinstance(variations, dict):
        raise UserError(
            "`variations` must be a map of asset.variation → {enabled, sampler}", where=where, key=f"{key}.variations"
        )
    flat: dict[str, Any] = {}
    for name, value in variations.items():
        if (
            isinstance(value, dict)
            and value
            and not (set(value) & SPEC_KEYS)
            and all(isinstance(v, dict) or v is None for v in value.values())
        ):
            for sub, spec in value.items():
                flat[f"{name}.{sub}"] = spec
        else:
            flat[str(name)] = value
    section["variations"] = flat


def _build(doc: dict[str, Any], where: str) -> Experiment:
    shared = doc.get("shared") or {}
    _check_shared(shared, where)
    runs = runs_with_shared(doc["runs"], shared)
    top = {k: v for k, v in doc.items() if k not in ("runs", "shared")}
    from evalfleet.experiment.arena_keys import resolve_arena_keys
    from evalfleet.experiment.replay import attach_conditions
    from evalfleet.experiment.stopping import resolve_stopping
    from evalfleet.experiment.timing import attach_recorded_latencies
    from evalfleet.experiment.validation import validate_types

    try:
        runs = resolve_arena_keys(runs, where)  # Arena's environment_builder keys (experiment/arena_keys.py)
        runs = attach_conditions(runs, where)  # `conditions: FILE` → the Run's inline list (experiment/replay.py)
        runs = attach_recorded_latencies(runs, where)  # `timing.latency.recorded: FILE` → its list (timing.py)
        merged = {**top, "runs": runs, "shared": shared}
        exp = Experiment.model_validate(merged)
        if exp.floors:  # the floor Runs, made from the validated Runs (their task tags), validated with them
            from evalfleet.experiment.floors import with_floors

            merged = {**merged, "runs": with_floors(runs, exp)}
            exp = Experiment.model_validate(merged)
        for name, run in exp.runs.items():
            validate_types(run, where, f"runs.{name}")
        resolve_stopping(exp, where)
    except ValidationError as exc:
        raise _point_at_shared(_validation_error(exc, where, Experiment, document=merged), doc) from None
    except UserError as exc:
        raise _point_at_shared(exc, doc) from None
    return exp


def _point_at_shared(exc: UserError, doc: dict[str, Any]) -> UserError:
    """A Run's bad value that the Run does not set itself came from `shared`: name the key there,
    where the user can find it, instead of a runs.<name>.… path that is not in the file."""
    key = exc.key or ""
    parts = key.split(".")
    if len(parts) < 3 or parts[0] != "runs" or parts[1] not in doc["runs"]:
        return exc
    name, rest = parts[1], parts[2:]
    if _has_path(doc["runs"][name], rest) or not _has_path(doc.get("shared") or {}, rest):
        return exc
    return UserError(f"{exc.message} (set in shared, merged into Run {name!r})", where=exc.where,
                     key="shared." + ".".join(rest))


def _has_path(node: Any, parts: list[str]) -> bool:
    """Whether the dotted path exists in nested maps (a key may itself hold dots: `asset.variation`)."""
    i = 0
    while i < len(parts):
        if not isinstance(node, dict):
            return False
        for j in range(len(parts), i, -1):
            if ".".join(parts[i:j]) in node:
                node, i = node[".".join(parts[i:j])], j
                break
        else:
            return False
    return True


def _check_shared(shared: dict[str, Any], where: str) -> None:
    for key in shared:
        if key not in Run.model_fields:
            raise UserError(_unknown_key_message(str(key), list(Run.model_fields)), where=where, key=f"shared.{key}")
    for name, spec in (shared.get("variations") or {}).items():
        try:
            VariationSpec.model_validate(spec)
        except ValidationError as exc:
            raise _validation_error(exc, where, VariationSpec, prefix=("shared", "variations", name),
                                    document=spec) from None


def _unknown_key_message(key: str, valid: Iterable[str]) -> str:
    valid = list(valid)
    close = difflib.get_close_matches(key, valid, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else f"valid keys: {', '.join(valid)}"
    return f"unknown key {key!r}; {hint}"


def _validation_error(exc: ValidationError, where: str, model: type[BaseModel], prefix: tuple[Any, ...] = (),
                      document: Any = None) -> UserError:
    """The UserError of pydantic's first error; `document` is the input validated (for the key path)."""
    from evalfleet.experiment.key_paths import key_path, union_message

    errors = exc.errors()
    err = errors[0]
    loc = prefix + tuple(err["loc"])
    key = key_path(tuple(err["loc"]), document, ".".join(map(str, prefix))) if document is not None else key_path(loc)
    if err["type"] == "extra_forbidden":
        parent = _model_at(model, loc[len(prefix):-1])
        valid = list(parent.model_fields) if parent else []
        return UserError(_unknown_key_message(str(loc[-1]), valid), where=where, key=key)
    msg = union_message(errors, document).removeprefix("Value error, ") if document is not None else err["msg"]
    msg = msg.removeprefix("Value error, ")
    if err["type"] == "missing":
        msg = "required key is missing"
    elif "input" in err and err["type"] not in ("value_error",) and not isinstance(err["input"], dict):
        msg = f"{msg} (got {shown_input(key, err['input'])})"
    return UserError(mask_url(msg), where=where, key=key)


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model class that sits at `loc` under `model` (for listing valid keys). A
    `dict[str, Model]` field (runs, variations) consumes one more part of `loc`: the entry's name."""
    import typing

    def is_model(t: Any) -> bool:
        return isinstance(t, type) and issubclass(t, BaseModel)

    def unwrap(t: Any) -> Any:
        # `Model | None` → Model; `dict[str, Model] | None` → the dict type.
        if typing.get_origin(t) is dict or is_model(t):
            return t
        for arg in typing.get_args(t):
            if typing.get_origin(arg) is dict or is_model(arg):
                return arg
        return t

    current: Any = model
    for part in loc:
        if typing.get_origin(current) is dict:
            current = unwrap(typing.get_args(current)[-1])  # `part` is an entry's name
            continue
        if not is_model(current):
            return None
        f = current.model_fields.get(str(part))
        if f is None:
            return None
        current = unwrap(f.annotation)
    return current if is_model(current) else None


def _apply_overrides(base: dict[str, Any], overrides: list[Override]) -> dict[str, Any]:
    doc = copy.deepcopy(base)
    for o in overrides:
        shown = shown_override(o.text)
        if o.path[0] == "runs":
            name = o.path[1]
            if name not in doc["runs"]:
                close = difflib.get_close_matches(name, list(doc["runs"]), n=3, cutoff=0.4)
                hint = f"did you mean {', '.join(close)}?" if close else f"Runs: {', '.join(doc['runs'])}"
                raise UserError(
                    f"override {shown!r}: there is no Run named {name!r} (overrides cannot add Runs); {hint}",
                    where=COMMAND_LINE,
                )
        if o.path[0] == "shared" and len(o.path) == 1:
            raise UserError(
                f"override {shown!r}: name a key inside shared, e.g. shared.rollout_limit.num_episodes=4",
                where=COMMAND_LINE,
            )
        try:
            set_path(doc, o.path, o.value)
        except KeyError as exc:
            raise UserError(
                f"override {shown!r}: {exc.args[0]} is a value, not a map; set it directly", where=COMMAND_LINE
            ) from None
        if o.path[0] in ("runs", "shared"):
            # Re-flatten in case the override wrote a nested asset.variation path.
            section = doc["runs"][o.path[1]] if o.path[0] == "runs" else doc["shared"]
            _flatten_variations(section, COMMAND_LINE, ".".join(o.path[:2]))
    return doc


def _blame_override(exc: UserError, overrides: list[Override], base: dict[str, Any]) -> UserError:
    """A validation error that only appears with the overrides: name the override and nearby valid keys."""
    key = exc.key or ""
    culprit = next(
        (o for o in overrides if key.startswith(o.key) or o.key.startswith(key) or _same_run_key(o, key)), None
    )
    culprit = culprit or overrides[-1]
    leaves = [k for k, _ in overridable_leaves_safe(base)]
    # Suggest keys only when the override names a key that does not exist (not for a bad value).
    known = not exc.message.startswith("unknown key") or culprit.key in leaves
    close = [] if known else difflib.get_close_matches(culprit.key, leaves, n=3, cutoff=0.6)
    hint = f"; nearest valid keys: {', '.join(close)}" if close else ""
    shown = shown_override(culprit.text)
    return UserError(f"override {shown!r}: {exc.key + ': ' if exc.key else ''}{exc.message}{hint}", where=COMMAND_LINE)


def _same_run_key(o: Override, key: str) -> bool:
    # An error in runs.X.k may come from the override shared.k (merged into every Run).
    return o.path[0] == "shared" and key.split(".", 2)[-1].startswith(".".join(o.path[1:]))


def overridable_leaves_safe(base: dict[str, Any]) -> list[tuple[str, Any]]:
    from evalfleet.experiment.listing import overridable_leaves

    try:
        return overridable_leaves(_build(base, "file"), base)
    except UserError:
        return []
