"""Condition sets (issue #25): the episodes' conditions of a plan, written once and replayed by any policy.

A condition is what decides an episode apart from the policy: its seed, its initial-state index and its
variation values. `evalfleet conditions export` writes a plan's conditions per task (experiment/
condition_export.py); a Run's `conditions: FILE` (or `{path: FILE, counts: K | [K, ...]}`) replays one task's
list. At load the file is read, its content hash checked and the task's list put into the Run itself
(`Run.conditions`, the inline form below), so `experiment.yaml` carries it to every worker and backend and
episode i stays a pure function of the resolved Experiment. Isaac Lab Arena's `episode_conditions_path`
shape (JSON lines, each with a `variations` map) is read into the same list.

Episode order: condition c with count k_c gives k_c episodes; episodes go round by round (every condition's
first repeat, then every second repeat of those with k_c >= 2, ...). Repeat 0 keeps the condition's seed;
repeat r >= 1 gets `stable_hash("condition-repeat", seed, r) mod 2**31`, the same variation values and
initial state. So two policies replaying one set with the same counts face identical episodes (paired by
(task, seed)), and repeats of one condition differ only in the simulator's seeded randomness.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from evalfleet import bounded_json
from evalfleet.arena_format import flat_variations
from evalfleet.errors import UserError
from evalfleet.experiment.safe_yaml import plain_tree, read_text_bounded
from evalfleet.experiment.schema import MAX_EPISODES, MAX_SAMPLER
from evalfleet.seeding import stable_hash

FORMAT = "evalfleet.conditions"
VERSION = 1
MAX_SET_BYTES = 4 * 1024 * 1024
MAX_CONDITIONS = 10_000  # per task
MAX_COUNT = 1_000  # episodes of one condition
MAX_VECTOR = 64  # numbers in one vector value
MAX_TEXT = 1_000  # characters in one categorical value
# Inline sets travel inside experiment.yaml, whose reader stops at safe_yaml.MAX_VALUES (100,000) values.
MAX_INLINE_VALUES = 50_000
SEED_LIMIT = 2**31  # the plan's seeds are 32-bit signed (plan.SEED_MODULUS)
INITIAL_STATE_RULE = ("the episode index the source plan gave the environment's reset: LIBERO starts from "
                      "init_states[initial_state % len(init_states)]; environments without fixed initial states "
                      "ignore it")
CONDITION_KEYS = ("seed", "initial_state", "variations", "count")
EXPORT_HINT = "export it again: evalfleet conditions export EXP.yaml --output FILE"


def content_hash(value: Any) -> str:
    """sha256 of the canonical JSON of `value` (sorted keys, no spaces, UTF-8)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def repeat_seed(seed: int, repeat: int) -> int:
    return seed if repeat == 0 else stable_hash("condition-repeat", seed, repeat) % SEED_LIMIT


@dataclass(frozen=True)
class Condition:
    seed: int
    initial_state: int | None
    variations: dict[str, Any]
    count: int = 1

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"seed": self.seed, "initial_state": self.initial_state, "variations": self.variations}
        if self.count != 1:
            out["count"] = self.count
        return out


@dataclass(frozen=True)
class ReplaySet:
    """One task's conditions as a Run replays them."""

    source: str  # the file it was read from, as the Experiment names it
    set_sha256: str  # the file's content hash (provenance)
    task: str
    environment_type: str | None
    conditions: tuple[Condition, ...]

    @property
    def total(self) -> int:
        return sum(c.count for c in self.conditions)

    @cached_property
    def order(self) -> list[tuple[int, int]]:
        """Episode index → (condition number, repeat), round by round."""
        slots = []
        for repeat in range(max((c.count for c in self.conditions), default=0)):
            slots.extend((i, repeat) for i, c in enumerate(self.conditions) if c.count > repeat)
        return slots

    def to_inline(self) -> dict[str, Any]:
        conditions = [c.to_json() for c in self.conditions]
        return {"source": self.source, "set_sha256": self.set_sha256, "task": self.task,
                "environment_type": self.environment_type, "sha256": content_hash(conditions),
                "conditions": conditions}


# ---------------------------------------------------------------------------------------------- reading


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}; each key may appear once")
        out[key] = value
    return out


def _not_a_number(text: str) -> Any:
    raise ValueError(f"{text} is not a finite number")


def parse_json(text: str, where: str, key: str | None = None) -> Any:
    try:  # the file's size is bounded by its reader (read_set_file)
        value = bounded_json.loads(text, max_bytes=None, object_pairs_hook=_no_duplicates,
                                   parse_constant=_not_a_number)
    except ValueError as exc:  # json.JSONDecodeError and bounded_json.JsonBoundsError are ones
        raise UserError(f"not valid JSON: {exc}", where=where, key=key) from None
    return plain_tree(value, where, key or "")


def read_set_file(path: Path, experiment: str, key: str) -> tuple[str, Any]:
    """(the text's sha256, the parsed document) of a condition set file: .jsonl is Arena's shape."""
    where = str(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise UserError(f"the condition set {where} does not exist; give the path of a file written by "
                        "`evalfleet conditions export` (relative to the Experiment file's folder)",
                        where=experiment, key=key) from None
    except OSError as exc:
        raise UserError(f"cannot read the condition set {where} ({exc.strerror or exc})", where=experiment,
                        key=key) from None
    if not stat.S_ISREG(info.st_mode):
        raise UserError(f"the condition set {where} is not a regular file; give a .json or .jsonl file",
                        where=experiment, key=key)
    text = read_text_bounded(path, where, limit=MAX_SET_BYTES)
    if path.suffix.lower() == ".jsonl":
        lines = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                lines.append(parse_json(line, where, f"line {number}"))
            if len(lines) > MAX_CONDITIONS:
                raise UserError(f"more than {MAX_CONDITIONS:,} lines; a condition set holds at most that many",
                                where=where)
        return hashlib.sha256(text.encode()).hexdigest(), lines
    return hashlib.sha256(text.encode()).hexdigest(), parse_json(text, where)


def check_set_document(doc: Any, where: str) -> dict[str, Any]:
    """An exported set's top level, its version and its content hash."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise UserError(f"not a condition set: the top level must be a map with format: {FORMAT} (or give Arena's "
                        "episode JSON lines in a .jsonl file)", where=where, key="format")
    if doc.get("version") != VERSION:
        raise UserError(f"condition set version {doc.get('version')!r}; this evalfleet reads version {VERSION}; "
                        + EXPORT_HINT, where=where, key="version")
    body = {k: v for k, v in doc.items() if k != "sha256"}
    if not isinstance(doc.get("sha256"), str) or doc["sha256"] != content_hash(body):
        raise UserError("the content hash does not match the conditions: the file was changed after export; "
                        "restore it or " + EXPORT_HINT, where=where, key="sha256")
    if not isinstance(doc.get("tasks"), dict) or not doc["tasks"]:
        raise UserError("`tasks` must be a map of task → its conditions", where=where, key="tasks")
    return doc


def parse_conditions(items: Any, where: str, key: str) -> tuple[Condition, ...]:
    if not isinstance(items, list) or not items:
        raise UserError("must be a non-empty list of conditions", where=where, key=key)
    if len(items) > MAX_CONDITIONS:
        raise UserError(f"{len(items):,} conditions; at most {MAX_CONDITIONS:,} in one set", where=where, key=key)
    return tuple(parse_condition(item, where, f"{key}.{i}") for i, item in enumerate(items))


def parse_condition(item: Any, where: str, key: str) -> Condition:
    if not isinstance(item, dict):
        raise UserError("a condition is a map with seed, initial_state, variations (and count)", where=where, key=key)
    for extra in item:
        if extra not in CONDITION_KEYS:
            raise UserError(f"unknown key {extra!r}; valid keys: {', '.join(CONDITION_KEYS)}", where=where,
                            key=f"{key}.{extra}")
    seed = _whole(item.get("seed"), 0, SEED_LIMIT - 1, where, f"{key}.seed", required=True)
    initial = _whole(item.get("initial_state"), 0, MAX_EPISODES, where, f"{key}.initial_state")
    count = _whole(item.get("count", 1), 1, MAX_COUNT, where, f"{key}.count", required=True)
    variations = item.get("variations", {})
    if not isinstance(variations, dict):
        raise UserError("must be a map of variation name → value", where=where, key=f"{key}.variations")
    for name, value in variations.items():
        check_value(value, where, f"{key}.variations.{name}")
    assert seed is not None and count is not None
    return Condition(seed, initial, dict(variations), count)


def _whole(value: Any, low: int, high: int, where: str, key: str, required: bool = False) -> int | None:
    if value is None and not required:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise UserError(f"must be a whole number in {low}..{high:,}, got {value!r}", where=where, key=key)
    return value


def check_value(value: Any, where: str, key: str) -> None:
    """A variation value: a finite number, text, true/false, or a short list of numbers."""
    numbers = value if isinstance(value, list) else [value]
    if isinstance(value, list) and not 0 < len(value) <= MAX_VECTOR:
        raise UserError(f"a vector value holds 1..{MAX_VECTOR} numbers, got {len(value):,}", where=where, key=key)
    if not isinstance(value, list) and isinstance(value, (str, bool)):
        if isinstance(value, str) and len(value) > MAX_TEXT:
            raise UserError(f"text of {len(value):,} characters; at most {MAX_TEXT:,}", where=where, key=key)
        return
    for x in numbers:
        if not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(x) or abs(x) > MAX_SAMPLER:
            raise UserError(f"must be a finite number within ±{MAX_SAMPLER:g} (or a list of them, or text), got "
                            f"{x!r}", where=where, key=key)


def arena_conditions(lines: list[Any], text_sha: str, task: str, where: str) -> tuple[Condition, ...]:
    """Arena's `episode_conditions_path` shape: one JSON object per line with a `variations` map (Arena's own
    episode_results_rebuild<R>.jsonl, or evalfleet's records). A line's `seed` and `episode` are kept where
    present; otherwise the seed is derived from the file's content and the line, the initial state is the line."""
    if not lines:
        raise UserError("no episode lines; Arena's shape is one JSON object per line with a `variations` map",
                        where=where)
    out = []
    for i, line in enumerate(lines):
        key = f"line {i + 1}"
        if not isinstance(line, dict):
            raise UserError("each line must be a JSON object", where=where, key=key)
        if isinstance(line.get("task"), str) and line["task"] != task:
            raise UserError(f"the line is for task {line['task']!r}, not this Run's task {task!r}; give the Run "
                            "`task:` or a file recorded on its task", where=where, key=f"{key}.task")
        seed = line.get("seed")
        if seed is None:
            seed = stable_hash("arena-condition", text_sha, i) % SEED_LIMIT
        episode = line.get("episode", i)
        # Arena writes a line's variations nested (asset → variation → value): evalfleet's names are flat.
        given = line.get("variations")
        item = {"seed": seed, "initial_state": episode,
                "variations": flat_variations(given) if isinstance(given, dict) else given or {}}
        out.append(parse_condition(item, where, key))
    return tuple(out)


# ---------------------------------------------------------------------------------------------- a Run's key


def replay_set(inline: dict[str, Any]) -> ReplaySet:
    """The ReplaySet of a Run's (already checked) inline `conditions`."""
    conditions = tuple(Condition(c["seed"], c.get("initial_state"), c.get("variations", {}), c.get("count", 1))
                       for c in inline["conditions"])
    return ReplaySet(inline["source"], inline["set_sha256"], inline["task"], inline.get("environment_type"),
                     conditions)


def inline_values(inline: dict[str, Any]) -> int:
    """How many values the inline form adds to experiment.yaml (as safe_yaml counts them)."""
    def count(node: Any) -> int:
        if isinstance(node, dict):
            return 1 + sum(count(v) for v in node.values())
        if isinstance(node, list):
            return 1 + sum(count(v) for v in node)
        return 1
    return count(inline)
