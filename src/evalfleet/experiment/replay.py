"""A Run's `conditions:` key resolved at load (experiment/conditions.py has the format and the episode order).

`conditions: set.json` or `conditions: {path: set.json, counts: K | [K, ...]}` (the path relative to the
Experiment file's folder) becomes the inline form `{source, set_sha256, task, environment_type, sha256,
conditions: [...]}`, checked against the Run (its task, its environment's variations, its rollout limit), so
the resolved Experiment carries the conditions to every worker. The inline form read back (a resumed or
wired experiment.yaml) is checked again, its hash included.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evalfleet.errors import UserError
from evalfleet.experiment.conditions import (
    MAX_COUNT,
    MAX_INLINE_VALUES,
    Condition,
    ReplaySet,
    arena_conditions,
    check_set_document,
    content_hash,
    inline_values,
    parse_conditions,
    read_set_file,
)
from evalfleet.experiment.schema import MAX_EPISODES, Run, TypedSection

REF_KEYS = ("path", "counts")
INLINE_KEYS = ("source", "set_sha256", "task", "environment_type", "sha256", "conditions")


def attach_conditions(runs: dict[str, Any], where: str) -> dict[str, Any]:
    """The merged Run maps with every `conditions:` resolved to its inline form (the rest unchanged)."""
    out, values = {}, 0
    for name, run in runs.items():
        out[name] = attach(run, where, f"runs.{name}")
        if isinstance(out[name].get("conditions"), dict) and "sha256" in out[name]["conditions"]:
            values += inline_values(out[name]["conditions"])
            if values > MAX_INLINE_VALUES:
                raise UserError(f"the condition sets of this Experiment's Runs hold more than {MAX_INLINE_VALUES:,} "
                                "values in all (they travel inside experiment.yaml); replay fewer conditions or "
                                "split the Runs into several Experiments", where=where, key=f"runs.{name}.conditions")
    return out


def attach(run: Any, where: str, key: str) -> Any:
    if not isinstance(run, dict) or run.get("conditions") is None:
        return run
    task = task_of(run)
    if task is None:
        return run  # the environment section is wrong: the schema reports that first
    spec, ckey = run["conditions"], f"{key}.conditions"
    if isinstance(spec, str):
        spec = {"path": spec}
    if not isinstance(spec, dict):
        raise UserError("give the path of a condition set file, or {path: FILE, counts: K}", where=where, key=ckey)
    replay = _inline(spec, task, where, ckey) if "conditions" in spec else _from_file(spec, task, where, ckey)
    _check_against_run(replay, run, where, key)
    return {**run, "conditions": replay.to_inline(), "rollout_limit": _limit(run, replay, where, key)}


def task_of(run: dict[str, Any]) -> str | None:
    """A merged Run map's task tag before validation (None when its environment section is wrong)."""
    try:
        env = TypedSection.model_validate(run.get("environment"))
    except ValidationError:
        return None
    task, labels = run.get("task"), run.get("labels")
    if not isinstance(task, str) and isinstance(labels, dict) and isinstance(labels.get("task"), str):
        task = labels["task"]  # Arena's labels.task
    return Run.model_construct(environment=env, task=task if isinstance(task, str) else None).task_tag()


def _from_file(spec: dict[str, Any], task: str, where: str, key: str) -> ReplaySet:
    for extra in spec:
        if extra not in REF_KEYS:
            raise UserError(f"unknown key {extra!r}; valid keys: {', '.join(REF_KEYS)}", where=where,
                            key=f"{key}.{extra}")
    given = spec.get("path")
    if not isinstance(given, str) or not given.strip():
        raise UserError("give the condition set's file path (relative to the Experiment file's folder)",
                        where=where, key=f"{key}.path")
    path = Path(given) if Path(given).is_absolute() else Path(where).resolve().parent / given
    text_sha, doc = read_set_file(path, where, key)
    file = str(path)
    if path.suffix.lower() == ".jsonl":
        conditions = arena_conditions(doc, text_sha, task, file)
        replay = ReplaySet(given, text_sha, task, None, conditions)
    else:
        doc = check_set_document(doc, file)
        entry = doc["tasks"].get(task)
        if entry is None:
            tasks = ", ".join(map(str, doc["tasks"]))
            close = difflib.get_close_matches(task, list(map(str, doc["tasks"])), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise UserError(f"the condition set {given} holds no conditions for this Run's task {task!r} (it holds: "
                            f"{tasks}); {hint}replay it in a Run on one of those tasks or set the Run's `task:`",
                            where=where, key=key)
        if not isinstance(entry, dict):
            raise UserError("must be a map with the task's conditions", where=file, key=f"tasks.{task}")
        conditions = parse_conditions(entry.get("conditions"), file, f"tasks.{task}.conditions")
        env_type = entry.get("environment_type")
        replay = ReplaySet(given, doc["sha256"], task, env_type if isinstance(env_type, str) else None, conditions)
    if "counts" in spec:
        replay = _with_counts(replay, spec["counts"], where, f"{key}.counts")
    return replay


def _with_counts(replay: ReplaySet, counts: Any, where: str, key: str) -> ReplaySet:
    """The Run's `counts:` (one number for every condition, or one per condition) replaces the file's."""
    n = len(replay.conditions)
    given = [counts] * n if not isinstance(counts, list) else counts
    if len(given) != n:
        raise UserError(f"{len(given)} counts for {n} conditions; give one number for all or one per condition",
                        where=where, key=key)
    for i, k in enumerate(given):
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_COUNT:
            at = key if not isinstance(counts, list) else f"{key}.{i}"
            raise UserError(f"an episode count must be a whole number in 1..{MAX_COUNT:,}, got {k!r}", where=where,
                            key=at)
    conditions = tuple(Condition(c.seed, c.initial_state, c.variations, k) for c, k in zip(replay.conditions, given))
    return ReplaySet(replay.source, replay.set_sha256, replay.task, replay.environment_type, conditions)


def _inline(spec: dict[str, Any], task: str, where: str, key: str) -> ReplaySet:
    """The resolved form read back (experiment.yaml): the same checks and its own hash."""
    for extra in spec:
        if extra not in INLINE_KEYS:
            raise UserError(f"unknown key {extra!r}; valid keys: {', '.join(INLINE_KEYS)}", where=where,
                            key=f"{key}.{extra}")
    conditions = parse_conditions(spec.get("conditions"), where, f"{key}.conditions")
    if spec.get("sha256") != content_hash(spec["conditions"]):
        raise UserError("the inline conditions do not match their sha256: they were changed after loading; "
                        "give the condition set file instead (conditions: FILE)", where=where, key=f"{key}.sha256")
    if spec.get("task") != task:
        raise UserError(f"the inline conditions are for task {spec.get('task')!r}, not {task!r}", where=where,
                        key=f"{key}.task")
    env_type = spec.get("environment_type")
    return ReplaySet(str(spec.get("source")), str(spec.get("set_sha256")), task,
                     env_type if isinstance(env_type, str) else None, conditions)


def _check_against_run(replay: ReplaySet, run: dict[str, Any], where: str, key: str) -> None:
    env_type = run["environment"]["type"]
    if replay.environment_type is not None and replay.environment_type != env_type:
        raise UserError(f"the condition set was exported from environment type {replay.environment_type!r}; this "
                        f"Run's is {env_type!r}: replay it on the same environment", where=where,
                        key=f"{key}.environment.type")
    for vname, vspec in (run.get("variations") or {}).items():
        if isinstance(vspec, dict) and vspec.get("enabled"):
            raise UserError("a Run replaying a condition set takes its variation values from the set; disable "
                            "this variation (enabled: false) or drop `conditions:`", where=where,
                            key=f"{key}.variations.{vname}.enabled")
    from evalfleet.sim.base import ENVIRONMENTS

    entry = ENVIRONMENTS.get(env_type)
    if entry is None:
        return  # an Arena type: Arena checks its own variation names
    known = entry.info.variations
    for i, condition in enumerate(replay.conditions):
        for vname, value in condition.variations.items():
            at = f"{replay.source}, tasks.{replay.task}.conditions.{i}.variations.{vname}"
            info = known.get(vname)
            if info is None:
                close = difflib.get_close_matches(vname, list(known), n=3, cutoff=0.5)
                hint = f"did you mean {', '.join(close)}?" if close else f"see `evalfleet variations {env_type}`"
                raise UserError(f"{at}: unknown variation {vname!r} for {env_type}; {hint} (or replay the set on "
                                "the environment it was exported from)", where=where, key=f"{key}.conditions")
            _check_kind(info, value, where, f"{key}.conditions", at)


def _check_kind(info: Any, value: Any, where: str, key: str, at: str) -> None:
    if info.kind == "categorical":
        return
    if info.kind == "vector":
        n = len(info.components)
        if not isinstance(value, list) or len(value) != n or any(isinstance(x, str) for x in value):
            raise UserError(f"{at}: expected a vector of {n} numbers ({', '.join(info.components)}), got {value!r}",
                            where=where, key=key)
    elif isinstance(value, (list, str, bool)):
        raise UserError(f"{at}: expected a single number, got {value!r}", where=where, key=key)


def _limit(run: dict[str, Any], replay: ReplaySet, where: str, key: str) -> dict[str, Any]:
    """`rollout_limit.num_episodes` defaults to the set's episodes; another number or `num_steps` is refused."""
    limit = run.get("rollout_limit")
    limit = dict(limit) if isinstance(limit, dict) else {}
    total = replay.total
    if total > MAX_EPISODES:
        raise UserError(f"the condition set's counts give {total:,} episodes; at most {MAX_EPISODES:,} per Run",
                        where=where, key=f"{key}.conditions")
    if limit.get("num_steps") is not None:
        raise UserError("a Run replaying a condition set runs its episodes, not a step budget; drop num_steps",
                        where=where, key=f"{key}.rollout_limit.num_steps")
    if limit.get("num_episodes") is not None and limit["num_episodes"] != total:
        raise UserError(f"num_episodes is {limit['num_episodes']!r} but the condition set gives {total} episodes "
                        "(its conditions times their counts); drop num_episodes or set it to that number",
                        where=where, key=f"{key}.rollout_limit.num_episodes")
    limit["num_episodes"] = total
    limit.pop("num_steps", None)
    return limit
