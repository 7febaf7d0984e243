"""Where sequential stopping stands, from the rules and the outcomes recorded so far (issue #25; docs/statistics.md).

Pure: rules and outcomes by episode index in, needs and decisions out. The state is replayed in rounds: at round
r every Run still going is looked at after its r-th look (r * wave, at most the cap), on the outcomes of its
episodes below that look only. A round is decided once every Run still going has a record for each of those
episodes; the first round that is not is where the Runs stand, and each of them needs its round-r look. So the
decisions, and which episodes are run at all, depend only on the outcomes by episode index, never on how many
records beyond a look happen to exist (a partial wave after a SIGKILL, a baseline kept running for another
comparison, the order records arrived in): --resume recomputes the same state from the records.

At each round: each Run's `precision` (`sequential.rate_confidence_sequence`, 95%); each family of comparisons
sharing a baseline, alpha and spending, by sequential Holm (a comparison decided earlier counts as rejected; the
rest are tested at alpha / (m - rejected) with `sequential.decide` on their prefix, until nothing new is
rejected); `no_difference` when a margin is given and the difference's anytime interval lies inside it; at the cap
what is left is `undecided`. A Run stops once every rule it has is met (all of its comparisons, as policy or as
baseline, decided, and its precision reached), or at its cap. Outcomes: 1, 0, or None (no decision: an error);
a pair where either side is None is dropped, i.e. counts as concordant (it carries nothing for the test)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from evalfleet.analysis.sequential import decide, rate_confidence_sequence, spending_label
from evalfleet.experiment.schema import Experiment
from evalfleet.experiment.stopping import comparisons
from evalfleet.rollout.records import is_decided

OUTCOME = {"success": 1, "failure": 0}


def decided_outcomes(records: Iterable[Mapping[str, Any]], max_attempts: int) -> dict[int, int | None]:
    """Episode index → 1 (success) / 0 (failure) / None (an error that used up its attempts), for the decided
    records among a Run's latest records (the last record of an episode wins): what the stopping state reads."""
    found: dict[int, int | None] = {}
    for record in records:
        episode = record.get("episode")
        if isinstance(episode, int) and not isinstance(episode, bool) and is_decided(record, max_attempts):
            found[episode] = OUTCOME.get(str(record.get("status")))
    return found

RATE_METHOD = "Beta(1/2,1/2) confidence sequence"
RATE_ALPHA = 0.05  # precision's interval is 95%


@dataclass(frozen=True)
class RunRule:
    name: str
    wave: int
    cap: int
    half_width: float | None = None  # precision's rule, when the Run has one


@dataclass(frozen=True)
class PairRule:
    task: str
    policy: str
    baseline: str
    run: str
    baseline_run: str
    wave: int  # both Runs' (the schema makes them equal)
    cap: int
    alpha: float = 0.05
    spending: str = "obrien_fleming"
    margin: float | None = None
    gamma: float | None = None  # hwang_shih_decani's parameter (None: its default)


@dataclass
class RunState:
    need: int  # the episodes it needs now: its next look while it goes on, else where it stopped
    stopped_at: int | None = None
    reason: str | None = None
    interval: tuple[float, float] = (0.0, 1.0)  # the Beta(1/2,1/2) confidence sequence at its last decided look
    look: int = 0  # its last decided look


@dataclass
class PairState:
    rule: PairRule
    family_size: int = 1
    verdict: str = "continue"  # better | worse | no_difference | undecided, or continue
    stopped_at: int | None = None
    decided_round: int | None = None
    counts: dict = field(default_factory=dict)  # pairs, discordant, policy_only, baseline_only at its last look
    statistic: float = 0.0
    interval: tuple[float, float] = (-1.0, 1.0)


@dataclass
class StoppingState:
    runs: dict[str, RunState]
    pairs: list[PairState]
    rounds: int  # rounds decided so far

    @property
    def done(self) -> bool:
        return all(r.stopped_at is not None for r in self.runs.values())


def complete_prefix(recorded: Mapping[int, int | None]) -> int:
    """How many episodes from index 0 on have a record."""
    n = 0
    while n in recorded:
        n += 1
    return n


def difference_interval(policy_only: int, baseline_only: int, pairs: int, alpha: float) -> tuple[float, float]:
    """An anytime-valid interval for p_A - p_B from paired outcomes: with delta the discordance rate and q the
    policy-only share of discordant pairs, p_A - p_B = delta (2q - 1); a Beta(1/2,1/2) confidence sequence for each
    at alpha / 2 (q's over the discordant pairs only), combined by a union bound: valid at every n at once with
    probability >= 1 - alpha. The product is bilinear, so the extremes lie at the corners."""
    lo, hi = difference_intervals(np.asarray(policy_only), np.asarray(baseline_only), np.asarray(pairs), alpha)
    return float(lo), float(hi)


def difference_intervals(policy_only: np.ndarray, baseline_only: np.ndarray, pairs: np.ndarray, alpha: float
                         ) -> tuple[np.ndarray, np.ndarray]:
    """`difference_interval` on arrays of counts (the coverage test's many sequences at once)."""
    disc = policy_only + baseline_only
    d_lo, d_hi = rate_confidence_sequence(disc, pairs, alpha / 2)
    q_lo, q_hi = rate_confidence_sequence(policy_only, disc, alpha / 2)
    corners = np.stack([d * (2 * q - 1) for d in (d_lo, d_hi) for q in (q_lo, q_hi)])
    return np.maximum(-1.0, corners.min(axis=0)), np.minimum(1.0, corners.max(axis=0))


def interval_method(alpha: float, family_size: int) -> str:
    level = alpha / family_size
    return (f"anytime-valid {100 * (1 - level):.4g}% interval (Bonferroni over {family_size} comparison"
            f"{'s' if family_size > 1 else ''}): Beta(1/2,1/2) confidence sequences for the discordance rate and "
            f"the policy-only share of discordant pairs, union bound")


def _pair_arrays(a: Mapping[int, int | None], b: Mapping[int, int | None], look: int) -> tuple[list[int], list[int]]:
    """Outcomes of episodes 0..look-1 pair by pair, a pair with a None on either side made concordant (0, 0)."""
    xs, ys = [], []
    for i in range(look):
        x, y = a.get(i), b.get(i)
        keep = x is not None and y is not None
        xs.append(int(bool(x)) if keep else 0)
        ys.append(int(bool(y)) if keep else 0)
    return xs, ys


def _count(a: Mapping[int, int | None], b: Mapping[int, int | None], look: int) -> dict[str, int]:
    kept = [(a[i], b[i]) for i in range(look) if a.get(i) is not None and b.get(i) is not None]
    c = sum(1 for x, y in kept if x and not y)
    d = sum(1 for x, y in kept if y and not x)
    return {"pairs": len(kept), "discordant": c + d, "policy_only": c, "baseline_only": d}


def _rate_interval(outcomes: Mapping[int, int | None], look: int) -> tuple[float, float]:
    decided = [outcomes[i] for i in range(look) if outcomes.get(i) is not None]
    lo, hi = rate_confidence_sequence(sum(1 for x in decided if x), len(decided), RATE_ALPHA)
    return float(lo), float(hi)


def state(rules: Sequence[RunRule], pair_rules: Sequence[PairRule],
          outcomes: Mapping[str, Mapping[int, int | None]]) -> StoppingState:
    """The state of every stopping Run and comparison, replayed round by round from `outcomes` (Run → episode
    index → 1 / 0 / None, an index present only when it has a record)."""
    families: dict[tuple, list[int]] = {}
    for i, p in enumerate(pair_rules):
        families.setdefault((p.baseline, p.alpha, p.spending, p.gamma), []).append(i)
    pairs = [PairState(p) for p in pair_rules]
    for members in families.values():
        for i in members:
            pairs[i].family_size = len(members)
    runs = {r.name: RunState(need=min(r.wave, r.cap)) for r in rules}
    met_precision: set[str] = set()
    prefix = {r.name: complete_prefix(outcomes.get(r.name, {})) for r in rules}
    rnd = 0
    while True:
        active = [r for r in rules if runs[r.name].stopped_at is None]
        if not active:
            return StoppingState(runs, pairs, rnd)
        look = {r.name: min((rnd + 1) * r.wave, r.cap) for r in active}
        for r in active:
            runs[r.name].need = look[r.name]
        if any(prefix[r.name] < look[r.name] for r in active):
            return StoppingState(runs, pairs, rnd)
        rnd += 1
        for r in active:
            runs[r.name].look = look[r.name]
            runs[r.name].interval = _rate_interval(outcomes.get(r.name, {}), look[r.name])
            lo, hi = runs[r.name].interval
            if r.half_width is not None and (hi - lo) / 2 <= r.half_width:
                met_precision.add(r.name)
        for members in families.values():
            _decide_family(pairs, members, look, outcomes, rnd)
        for r in active:
            _maybe_stop(r, runs[r.name], look[r.name], pairs, met_precision)


def _decide_family(pairs: list[PairState], members: list[int], look: Mapping[str, int],
                   outcomes: Mapping[str, Mapping[int, int | None]], rnd: int) -> None:
    """One round of sequential Holm over one family (one baseline, alpha and spending)."""
    open_ = [i for i in members if pairs[i].verdict == "continue"]
    if not open_:
        return
    m = len(members)
    rejected = sum(1 for i in members if pairs[i].verdict in ("better", "worse"))
    while True:
        new = []
        for i in open_:
            p, rule = pairs[i], pairs[i].rule
            n = look[rule.run]
            a, b = outcomes.get(rule.run, {}), outcomes.get(rule.baseline_run, {})
            xs, ys = _pair_arrays(a, b, n)
            d = decide(xs, ys, rule.wave, rule.cap, rule.alpha / (m - rejected), rule.spending, rule.gamma)
            if d.verdict in ("better", "worse"):
                p.verdict = d.verdict
                new.append(i)
        for i in new:
            _settle(pairs[i], look, outcomes, rnd)
        rejected += len(new)
        open_ = [i for i in open_ if i not in new]
        if not new or not open_:
            break
    for i in open_:
        p, rule = pairs[i], pairs[i].rule
        n = look[rule.run]
        counts = _count(outcomes.get(rule.run, {}), outcomes.get(rule.baseline_run, {}), n)
        lo, hi = difference_interval(counts["policy_only"], counts["baseline_only"], counts["pairs"],
                                     rule.alpha / p.family_size)
        if rule.margin is not None and -rule.margin < lo and hi < rule.margin:
            p.verdict = "no_difference"
        elif n >= rule.cap:
            p.verdict = "undecided"
        _settle(p, look, outcomes, rnd)
        if p.verdict == "continue":
            p.decided_round, p.stopped_at = None, None


def _settle(p: PairState, look: Mapping[str, int], outcomes: Mapping[str, Mapping[int, int | None]], rnd: int) -> None:
    rule = p.rule
    n = look[rule.run]
    p.counts = _count(outcomes.get(rule.run, {}), outcomes.get(rule.baseline_run, {}), n)
    c, b = p.counts["policy_only"], p.counts["baseline_only"]
    p.statistic = (c - b) / math.sqrt(c + b) if c + b else 0.0
    p.interval = difference_interval(c, b, p.counts["pairs"], rule.alpha / p.family_size)
    p.stopped_at, p.decided_round = n, rnd


def _maybe_stop(rule: RunRule, run: RunState, look: int, pairs: list[PairState], met_precision: set[str]) -> None:
    mine = [p for p in pairs if rule.name in (p.rule.run, p.rule.baseline_run)]
    met = []
    if rule.half_width is not None:
        if rule.name not in met_precision:
            met = None
        else:
            met.append(f"precision reached (95% interval half-width <= {rule.half_width:g})")
    if met is not None and mine:
        if all(p.verdict in ("better", "worse", "no_difference") for p in mine):
            met.append(f"{len(mine)} comparison{'s' if len(mine) > 1 else ''} decided")
        else:
            met = None
    if met:
        run.stopped_at, run.reason = look, "; ".join(met)
    elif look >= rule.cap:
        run.stopped_at, run.reason = look, f"cap of {rule.cap} episodes reached"
    run.need = look if run.stopped_at is not None else run.need




def comparison_entry(p: PairState) -> dict:
    """One entry of experiment_result.json's `comparisons`."""
    rule = p.rule
    c, b, n = p.counts.get("policy_only", 0), p.counts.get("baseline_only", 0), p.counts.get("pairs", 0)
    holm = f"Holm across {p.family_size} comparisons" if p.family_size > 1 else "one comparison (no multiplicity)"
    return {
        "task": rule.task, "policy": rule.policy, "baseline": rule.baseline, "runs": [rule.run, rule.baseline_run],
        "verdict": p.verdict, "stopped_at": p.stopped_at, "max_episodes": rule.cap, **p.counts,
        "statistic": round(p.statistic, 4), "difference": round((c - b) / n, 4) if n else 0.0,
        "interval": [round(p.interval[0], 4), round(p.interval[1], 4)],
        "interval_method": interval_method(rule.alpha, p.family_size), "alpha": rule.alpha, "margin": rule.margin,
        "method": "group-sequential exact binomial on discordant pairs, Lan-DeMets "
                  f"{spending_label(rule.spending, rule.gamma)} spending; {holm}",
    }


def run_entry(r: RunState) -> dict:
    """A stopping Run's `stopping` entry in experiment_result.json's `runs`."""
    return {"stopped_at": r.stopped_at, "reason": r.reason, "episodes_decided_on": r.look,
            "interval": [round(r.interval[0], 4), round(r.interval[1], 4)], "interval_method": RATE_METHOD}


def decision_line(p: PairState) -> str:
    """`task/policy vs baseline: better at 30 episodes (statistic 2.31, ...)` for the wave log and the summary."""
    rule = p.rule
    where = f" at {p.stopped_at} episodes" if p.stopped_at is not None else ""
    lo, hi = p.interval
    return (f"{rule.task}/{rule.policy} vs {rule.baseline}: {p.verdict.replace('_', ' ')}{where} "
            f"(statistic {p.statistic:.2f}, {p.counts.get('policy_only', 0)} vs {p.counts.get('baseline_only', 0)} "
            f"discordant, difference in [{lo:+.2f}, {hi:+.2f}])")


def rules_of(experiment: Experiment) -> tuple[list[RunRule], list[PairRule]]:
    """The rules of a loaded (resolved) Experiment: experiment/stopping.py gave every stopping Run its own."""
    runs = experiment.runs
    rules = [RunRule(name, run.stopping.wave, run.stopping.max_episodes,
                     run.stopping.precision.half_width if run.stopping.precision else None)
             for name, run in runs.items() if run.stopping is not None]
    pairs = []
    for c in comparisons(experiment):
        rule = runs[c.run].stopping
        pairs.append(PairRule(c.task, c.policy, c.baseline, c.run, c.baseline_run, rule.wave, rule.max_episodes,
                              rule.compare.alpha, rule.compare.spending, rule.compare.margin,
                              rule.compare.gamma))
    return rules, pairs
