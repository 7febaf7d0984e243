"""A policy's results over its checkpoints (`evalfleet history POLICY`): per task and training step (or, without
steps, per Experiment in time) its success with a 95% interval, and, against a named baseline, a paired test per
point (exact McNemar on episodes of the same environment fingerprint, seed and variations), Holm-adjusted over
every point, and the first step that is better.

A task whose Runs ran in different environments (another option, simulator version or protocol) gives one series
per environment, never a pooled one, with the fields that differ named (`identity.differences`). Everything that
grows with the episodes is aggregated in DuckDB; Python sees one row per point.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from evalfleet.analysis.stats import holm_adjust, mcnemar_exact, wilson_interval
from evalfleet.errors import UserError
from evalfleet.outputs.storage import storage_errors
from evalfleet.store.identity import differences
from evalfleet.store.store import Store

ALPHA = 0.05
DECIDED = "p.status IN ('success', 'failure')"  # errors are infrastructure: in no rate, in no pair

POINTS = f"""
SELECT r.task, r.environment_fingerprint AS fingerprint, any_value(r.environment_identity) AS identity,
       r.step, r.policy_revision AS revision, min(e.started_at) AS started_at,
       count(DISTINCT r.experiment_id) AS experiments,
       sum(CASE WHEN p.status = 'success' THEN 1 ELSE 0 END) AS successes, count(*) AS decided
FROM runs r JOIN experiments e USING (experiment_id) JOIN episodes p USING (experiment_id, run)
WHERE r.policy = $policy AND {DECIDED} AND ($task IS NULL OR r.task = $task)
GROUP BY ALL ORDER BY r.task, fingerprint, r.step NULLS LAST, started_at
"""

# One outcome per (revision, block): a block is an environment fingerprint, a seed and the variations' values; a
# block the policy (or the baseline) played more than once counts its latest added Experiment's episode.
PAIRS = f"""
WITH latest AS (
  SELECT r.policy, r.environment_fingerprint AS fingerprint, r.policy_revision AS revision, p.seed, p.variations,
         p.status = 'success' AS won,
         row_number() OVER (PARTITION BY r.policy, r.environment_fingerprint,
                            CASE WHEN r.policy = $policy THEN r.policy_revision END, p.seed, p.variations
                            ORDER BY e.added_at DESC, p.experiment_id DESC, p.episode) AS k
  FROM runs r JOIN experiments e USING (experiment_id) JOIN episodes p USING (experiment_id, run)
  WHERE r.policy IN ($policy, $baseline) AND {DECIDED} AND ($task IS NULL OR r.task = $task))
SELECT a.fingerprint, a.revision, count(*) AS pairs,
       sum(CASE WHEN a.won AND NOT b.won THEN 1 ELSE 0 END) AS better,
       sum(CASE WHEN b.won AND NOT a.won THEN 1 ELSE 0 END) AS worse
FROM latest a JOIN latest b USING (fingerprint, seed, variations)
WHERE a.policy = $policy AND b.policy = $baseline AND a.k = 1 AND b.k = 1
GROUP BY ALL
"""


@dataclass
class Point:
    step: int | None
    revision: str
    started_at: str | None
    experiments: int
    successes: int
    decided: int
    rate: float | None
    ci95: tuple[float, float]
    versus_baseline: dict[str, Any] | None = None


@dataclass
class Series:
    task: str
    fingerprint: str
    points: list[Point] = field(default_factory=list)
    first_better_step: int | None = None


@dataclass
class History:
    policy: str
    baseline: str | None
    series: list[Series]
    notes: list[str]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def history(store: Store, policy: str, *, baseline: str | None = None, task: str | None = None) -> History:
    """`policy`'s points per task and environment; UserError when the store holds none of it."""
    with storage_errors(store.location.display()):
        con = store.connect()
        try:
            params = {"policy": policy, "task": task}
            rows = con.execute(POINTS, params).fetchall()
            names = [d[0] for d in con.description]
            points = [dict(zip(names, row)) for row in rows]
            if not points:
                known = sorted({r[0] for r in con.execute("SELECT DISTINCT policy FROM runs").fetchall()
                                if r[0] is not None})
                raise UserError(f"no results of policy {policy!r}" + (f" on task {task!r}" if task else "")
                                + f" in the store; it holds: {', '.join(known) or 'nothing'}",
                                where=store.location.display(), key="POLICY")
            pairs = {}
            if baseline is not None:
                found = con.execute("SELECT count(*) FROM runs WHERE policy = $b", {"b": baseline}).fetchone()[0]
                if not found:
                    raise UserError(f"no results of the baseline {baseline!r} in the store",
                                    where=store.location.display(), key="--baseline")
                for fp, rev, n, b, c in con.execute(PAIRS, {**params, "baseline": baseline}).fetchall():
                    pairs[(fp, rev)] = (int(n), int(b), int(c))
        finally:
            con.close()
    return assemble(policy, baseline, points, pairs)


def assemble(policy: str, baseline: str | None, points: list[dict[str, Any]],
             pairs: dict[tuple[str, str], tuple[int, int, int]]) -> History:
    series: dict[tuple[str, str], Series] = {}
    identities: dict[str, dict[str, str]] = {}
    for row in points:
        key = (row["task"], row["fingerprint"])
        s = series.setdefault(key, Series(str(row["task"]), str(row["fingerprint"])))
        identities.setdefault(str(row["task"]), {})[str(row["fingerprint"])] = row["identity"]
        n, wins = int(row["decided"]), int(row["successes"])
        point = Point(row["step"], row["revision"], row["started_at"], int(row["experiments"]), wins, n,
                      wins / n if n else None, wilson_interval(wins, n))
        if baseline is not None:
            found = pairs.get((row["fingerprint"], row["revision"]))
            point.versus_baseline = ({"pairs": 0} if found is None else
                                     {"pairs": found[0], "better": found[1], "worse": found[2],
                                      "p": mcnemar_exact(found[1], found[2])})
        s.points.append(point)
    tested = [p for s in series.values() for p in s.points if p.versus_baseline and p.versus_baseline["pairs"]]
    for p, adjusted in zip(tested, holm_adjust([p.versus_baseline["p"] for p in tested])):
        p.versus_baseline["p_holm"] = adjusted
        p.versus_baseline["is_better"] = adjusted < ALPHA and p.versus_baseline["better"] > p.versus_baseline["worse"]
    for s in series.values():
        s.first_better_step = next((p.step for p in s.points if (p.versus_baseline or {}).get("is_better")), None)
    notes = []
    for task, found in identities.items():
        if len(found) > 1:
            parsed = [json.loads(v) for v in found.values()]
            fields = sorted({d for other in parsed[1:] for d in differences(parsed[0], other)})
            notes.append(f"{task}: {len(found)} environments, which differ in {', '.join(fields)}: one series each, "
                         "never pooled")
    return History(policy, baseline, list(series.values()), notes)


def table_lines(result: History) -> list[str]:
    """The terminal table: one line per point."""
    lines = [f"history of {result.policy}" + (f" against {result.baseline}" if result.baseline else "")]
    for s in result.series:
        lines.append(f"{s.task} (environment {s.fingerprint})")
        for p in s.points:
            at = f"step {p.step}" if p.step is not None else (p.started_at or "?")
            rate = "—" if p.rate is None else f"{p.rate:.1%} [{p.ci95[0]:.1%}, {p.ci95[1]:.1%}]"
            line = f"  {at:>16}  {rate:>24}  n={p.decided}"
            v = p.versus_baseline
            if v and v.get("pairs"):
                line += (f"  vs baseline: +{v['better']}/-{v['worse']} of {v['pairs']} pairs, "
                         f"p_holm={v['p_holm']:.3g}" + ("  better" if v["is_better"] else ""))
            elif v is not None:
                line += "  vs baseline: no paired episodes"
            lines.append(line)
        if result.baseline:
            lines.append(f"  first step better than {result.baseline}: "
                         + ("none" if s.first_better_step is None else str(s.first_better_step)))
    lines.extend(f"note: {n}" for n in result.notes)
    return lines


def write_plot(result: History, path: str) -> None:
    """Success over steps (or Experiments in time) per series, with the 95% intervals as a band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for s in result.series:
        xs = [p.step if p.step is not None else i for i, p in enumerate(s.points)]
        ax.plot(xs, [p.rate for p in s.points], marker="o", label=f"{s.task} ({s.fingerprint[:8]})")
        ax.fill_between(xs, [p.ci95[0] for p in s.points], [p.ci95[1] for p in s.points], alpha=0.2)
    ax.set_xlabel("training step")
    ax.set_ylabel("success rate")
    ax.set_ylim(0, 1)
    ax.set_title(f"{result.policy}: success with 95% intervals")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
