"""Each Run's sequential stopping rule, resolved once at load (docs/statistics.md, "Sequential stopping").

A Run's own `stopping:` replaces the Experiment's. A stopping Run's cap is `stopping.max_episodes`, by default
its `rollout_limit.num_episodes`; the cap is what the plan covers, so the resolved Run carries
`rollout_limit.num_episodes == stopping.max_episodes` (num_episodes is only the cap's default). Checks, each a
UserError naming the key: a stopping Run counts episodes (not `num_steps`); `max_episodes >= wave`; a
`compare.baseline` names a policy some Run on that task has; no two Runs share a (task, policy) under a compare;
the two Runs of a comparison both stop sequentially with the same wave and cap (their looks pair up)."""

from __future__ import annotations

from dataclasses import dataclass

from evalfleet.errors import UserError
from evalfleet.layout import EXPERIMENT_FILE
from evalfleet.experiment.schema import Experiment, RolloutLimit, Run, Stopping


@dataclass(frozen=True)
class Comparison:
    """One policy-vs-baseline pair of Runs on a task, as the resolved rules define it."""

    task: str
    policy: str
    baseline: str
    run: str  # the policy's Run
    baseline_run: str


def resolve_stopping(exp: Experiment, where: str) -> None:
    """Give every Run its effective rule (`run.stopping`, with `max_episodes` set) and its cap as num_episodes."""
    for name, run in exp.runs.items():
        own = run.stopping is not None
        rule = run.stopping if own else exp.stopping
        if rule is None:
            continue
        key = f"runs.{name}.stopping" if own else "stopping"
        if run.rollout_limit.num_episodes is None:
            raise UserError(
                f"Run {name!r} stops sequentially, which counts episodes: give rollout_limit.num_episodes "
                f"(the cap's default) instead of num_steps", where=where, key=f"runs.{name}.rollout_limit.num_steps")
        cap = rule.max_episodes or run.rollout_limit.num_episodes
        if cap < rule.wave:
            raise UserError(
                f"the cap ({cap} episodes{'' if rule.max_episodes else ', from rollout_limit.num_episodes'}) is "
                f"below one wave ({rule.wave}): set max_episodes >= wave", where=where, key=f"{key}.max_episodes")
        run.stopping = Stopping.model_validate({**rule.model_dump(), "max_episodes": cap})
        run.rollout_limit = RolloutLimit(num_episodes=cap)
    comparisons(exp, where)


def comparisons(exp: Experiment, where: str = EXPERIMENT_FILE) -> list[Comparison]:
    """Every (task, policy, baseline) the resolved rules ask for, in the Experiment's Run order; a UserError for a
    baseline no Run on the task has, two Runs with one (task, policy), or a pair whose looks do not pair up."""
    out: list[Comparison] = []
    for name, run in exp.runs.items():
        rule = run.stopping
        if rule is None or rule.compare is None:
            continue
        task, policy, baseline = run.task_tag(), run.policy_tag(), rule.compare.baseline
        same = [n for n, r in exp.runs.items() if r.task_tag() == task]
        twin = [n for n in same if n != name and exp.runs[n].policy_tag() == policy]
        if twin:
            raise UserError(
                f"Runs {name!r} and {twin[0]!r} both run policy {policy!r} on task {task!r}, so a comparison with "
                f"baseline {baseline!r} cannot tell them apart: give one of them another policy_name",
                where=where, key=f"runs.{twin[0]}.policy_name")
        base = [n for n in same if exp.runs[n].policy_tag() == baseline]
        if not base:
            present = ", ".join(sorted({exp.runs[n].policy_tag() for n in same}))
            raise UserError(
                f"compare.baseline {baseline!r}: no Run on task {task!r} runs that policy (policies there: "
                f"{present}); name one of them", where=where, key=f"{_rule_key(exp, name)}.compare.baseline")
        if policy == baseline:
            continue  # the baseline's own Run
        other = exp.runs[base[0]]
        _check_pairs_up(name, run, base[0], other, exp, where)
        out.append(Comparison(task, policy, baseline, name, base[0]))
    return out


def _rule_key(exp: Experiment, name: str) -> str:
    """The key a Run's rule came from: its own `stopping` when it sets one, else the Experiment's."""
    return "stopping" if exp.stopping is not None and exp.runs[name].stopping == _inherited(exp, name) else \
        f"runs.{name}.stopping"


def _inherited(exp: Experiment, name: str) -> Stopping | None:
    if exp.stopping is None:
        return None
    cap = exp.stopping.max_episodes or exp.runs[name].rollout_limit.num_episodes
    return Stopping.model_validate({**exp.stopping.model_dump(), "max_episodes": cap})


def _check_pairs_up(name: str, run: Run, base_name: str, base: Run, exp: Experiment, where: str) -> None:
    rule, other = run.stopping, base.stopping
    assert rule is not None
    if other is None:
        raise UserError(
            f"Run {name!r} is compared with baseline Run {base_name!r}, which does not stop sequentially: give "
            f"{base_name!r} a stopping rule with the same wave and max_episodes", where=where,
            key=f"runs.{base_name}.stopping")
    if (other.wave, other.max_episodes) != (rule.wave, rule.max_episodes):
        raise UserError(
            f"Run {name!r} (wave {rule.wave}, cap {rule.max_episodes}) is compared with baseline Run {base_name!r} "
            f"(wave {other.wave}, cap {other.max_episodes}): paired looks need the same wave and max_episodes",
            where=where, key=f"{_rule_key(exp, base_name)}.wave")
