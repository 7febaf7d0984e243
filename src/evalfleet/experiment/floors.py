"""Floors (#55): `floors: [noop, random]` adds, for each task of the Experiment, a Run of the no-op policy (the zero
action) and of the uniformly random policy, as paired arms: the task's environment, variations and episodes, so
every floor episode has the same seed and variation values as the policies' (the plan's seeds depend on the task
tag and the index). Their results say how much of a success rate the task gives away for nothing; the report and
`trust` flag a task whose floor succeeds too often and a policy that is not above its floor (outputs/floors.py).

A floor Run is named `floor_<kind>_<task>` (its task tag, other characters as `_`) and tagged with policy_name
`<kind>`. The expansion is idempotent: a resolved experiment.yaml that already holds the floor Runs keeps them.
"""

from __future__ import annotations

import copy
import re
from typing import Any

FLOOR_POLICIES = {"noop": "zero", "random": "random"}  # floor kind -> the built-in policy type that plays it
FLOOR_PREFIX = "floor_"


def floor_run_name(kind: str, task: str) -> str:
    return (FLOOR_PREFIX + kind + "_" + re.sub(r"[^A-Za-z0-9_-]", "_", task))[:100]


def is_floor_run(name: str, policy_tag: str | None) -> bool:
    """Whether a Run (by its name and policy tag) is a floor this module added."""
    return name.startswith(FLOOR_PREFIX) and policy_tag in FLOOR_POLICIES


def with_floors(runs: dict[str, Any], experiment: Any) -> dict[str, Any]:
    """`runs` (merged Run documents) with a floor Run per task and floor kind of `experiment.floors` (the same
    Experiment validated without them), after the Runs of each task."""
    kinds = list(experiment.floors or [])
    if not kinds:
        return runs
    first_of_task: dict[str, str] = {}
    episodes: dict[str, int] = {}  # the most any policy's Run plays on the task: the floors play as many
    for name, run in experiment.runs.items():
        if is_floor_run(name, run.policy_tag()):
            continue
        task = run.task_tag()
        first_of_task.setdefault(task, name)
        episodes[task] = max(episodes.get(task, 0), run.rollout_limit.num_episodes or 0)
    out = dict(runs)
    for task, name in first_of_task.items():
        source, base = runs[name], experiment.runs[name]
        for kind in kinds:
            floor = floor_run_name(kind, task)
            if floor in out:
                continue  # a resolved experiment.yaml keeps the floors it was run with
            out[floor] = {
                "environment": copy.deepcopy(source["environment"]),
                "policy": {"type": FLOOR_POLICIES[kind]},
                "policy_name": kind,
                "task": task,
                "rollout_limit": ({"num_episodes": episodes[task]} if episodes[task]
                                  else copy.deepcopy(source["rollout_limit"])),  # a num_steps Run: the same budget
                "environment_builder": copy.deepcopy(source.get("environment_builder") or {}),
                "variations": copy.deepcopy(source.get("variations") or {}),
                "max_attempts": base.max_attempts,
            }
    return out
