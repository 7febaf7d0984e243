"""`evalfleet conditions export`: a plan's episode conditions per task, as a condition set (the format is in
experiment/conditions.py and docs/experiments.md)."""

from __future__ import annotations

from typing import Any, Iterable

from evalfleet.errors import UserError
from evalfleet.experiment.conditions import FORMAT, INITIAL_STATE_RULE, MAX_CONDITIONS, VERSION, content_hash
from evalfleet.experiment.loading import LoadedExperiment
from evalfleet.experiment.plan import run_plan


def export_conditions(loaded: LoadedExperiment, runs: Iterable[str] | None = None) -> dict[str, Any]:
    """The condition set of the Experiment's Runs (all, or those named): per task, every planned episode's seed,
    initial state and variation values in episode order, and the content hash of it all."""
    exp = loaded.experiment
    names = list(runs) if runs else list(exp.runs)
    for name in names:
        if name not in exp.runs:
            raise UserError(f"there is no Run named {name!r} in {loaded.path}; Runs: {', '.join(exp.runs)}",
                            where="command line", key="--run")
    tasks: dict[str, dict[str, Any]] = {}
    for name in names:
        rp = run_plan(name, exp.runs[name], exp.seed)
        if rp.num_episodes is None:
            raise UserError("a Run with a step budget (num_steps) has no fixed list of episodes to export; give it "
                            "num_episodes or leave it out with --run", where=loaded.path,
                            key=f"runs.{name}.rollout_limit.num_steps")
        if rp.num_episodes > MAX_CONDITIONS:
            raise UserError(f"{rp.num_episodes:,} episodes; a condition set holds at most {MAX_CONDITIONS:,} per "
                            "task", where=loaded.path, key=f"runs.{name}.rollout_limit.num_episodes")
        conditions = [{"seed": e.seed, "initial_state": e.index if e.initial_state is None else e.initial_state,
                       "variations": e.variations} for e in rp.episodes()]
        entry = tasks.get(rp.task)
        if entry is None:
            tasks[rp.task] = {"environment_type": rp.run.environment.type, "initial_state": INITIAL_STATE_RULE,
                              "runs": [name], "conditions": conditions}
        elif entry["conditions"] == conditions and entry["environment_type"] == rp.run.environment.type:
            entry["runs"].append(name)
        else:
            raise UserError(f"Runs {entry['runs'][0]!r} and {name!r} are both on task {rp.task!r} but face different "
                            "conditions (their variations, episode counts or environments differ); export one of "
                            "them: --run NAME", where="command line", key="--run")
    doc: dict[str, Any] = {"format": FORMAT, "version": VERSION, "experiment": exp.name, "seed": exp.seed,
                           "tasks": tasks}
    doc["sha256"] = content_hash(doc)
    return doc


def seeds_document(task: str, environment_type: str, seeds: Iterable[int], *, runs: Iterable[str] = (),
                   experiment: str = "seeds") -> dict[str, Any]:
    """A condition set replaying exactly `seeds`, in order, on one task with no variations: e.g. the seeds another
    tool plays (`lerobot-eval --seed=S` plays S, S+1, ...), so evalfleet's episodes are that tool's."""
    seeds = [int(seed) for seed in seeds]
    conditions = [{"seed": seed, "initial_state": i, "variations": {}} for i, seed in enumerate(seeds)]
    doc: dict[str, Any] = {"format": FORMAT, "version": VERSION, "experiment": experiment,
                           "seed": seeds[0] if seeds else 0,
                           "tasks": {task: {"environment_type": environment_type, "initial_state": INITIAL_STATE_RULE,
                                            "runs": list(runs), "conditions": conditions}}}
    doc["sha256"] = content_hash(doc)
    return doc
