"""Each policy's difference from a baseline, per task and pooled.

Two policies evaluated on the same task face the same episodes (the plan derives seeds from the task and the
episode index), so their records pair up by (task, seed) (see `matched_outcomes`). When matched pairs cover at
least half of the smaller arm, the test is the exact McNemar test on the pairs and the difference's interval is
the paired Wald interval; otherwise a pooled two-proportion z test with Newcombe's score interval. Every test
reported (per-task and pooled) forms one family for Holm's correction.

Progress (`progress`: a number or Arena's map with `overall_score`) is compared too, per task, where both arms
carry it: the Wilcoxon signed-rank test on the (task, seed) pairs when they cover enough of the arms, else the
Mann-Whitney U test; these rows (`outcome: progress`) join the same Holm family.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from evalfleet.analysis.grouping import Arm
from evalfleet.analysis.stats import (
    holm_adjust,
    mcnemar_exact,
    newcombe_difference_interval,
    paired_difference_interval,
    two_proportion_ztest,
    wilson_interval,
)

PAIRED_MIN_FRACTION = 0.5


@dataclass
class ArmData:
    records: list[dict[str, Any]]
    successes: int
    n: int
    variation_keys: frozenset[str]


def _arm_data(records: list[dict[str, Any]]) -> ArmData:
    keys = frozenset(k for r in records for k in (r.get("variations") or {}))
    return ArmData(records, sum(r["status"] == "success" for r in records), len(records), keys)


def _episode_key(rec: dict[str, Any], common: list[str]) -> tuple[Any, ...]:
    variations = rec.get("variations") or {}
    return (rec.get("seed"), *(json.dumps(variations.get(k, "<off>"), sort_keys=True, default=str) for k in common))


def matched_outcomes(base: ArmData, other: ArmData) -> list[tuple[bool, bool]]:
    """(baseline success, policy success) of every matched episode.

    A pair is the same seed of the same task; when an arm holds several Runs of a task (say one with a variation
    on and its control with it off), the values of the variations both arms have tell them apart. A variation
    only one arm has is part of what is being compared (e.g. action noise on the candidate) and does not split.
    """
    common = sorted(base.variation_keys & other.variation_keys)

    def index(arm: ArmData) -> dict[tuple[Any, ...], bool]:
        out = {}
        for rec in arm.records:
            if rec.get("seed") is not None:
                out[_episode_key(rec, common)] = rec["status"] == "success"  # the last record wins
        return out

    a, b = index(base), index(other)
    return [(a[k], b[k]) for k in a.keys() & b.keys()]


def _scores(arm: ArmData, common: list[str]) -> dict[tuple[Any, ...], float]:
    from evalfleet.analysis.loading import progress_score

    out = {}
    for i, rec in enumerate(arm.records):
        score = progress_score(rec.get("progress"))
        if score is not None and rec.get("status") != "error":
            key = _episode_key(rec, common) if rec.get("seed") is not None else ("<no seed>", i)
            out[key] = score
    return out


def progress_test(base: ArmData, other: ArmData) -> dict[str, Any] | None:
    """Progress of `other` against `base`: Wilcoxon signed-rank on matched episodes, else Mann-Whitney U.
    None when either arm has no progress."""
    from scipy import stats

    common = sorted(base.variation_keys & other.variation_keys)
    a, b = _scores(base, common), _scores(other, common)
    if not a or not b:
        return None
    keys = [k for k in a if k in b and k[0] != "<no seed>"]
    row: dict[str, Any] = {"outcome": "progress", "baseline_mean": sum(a.values()) / len(a), "baseline_n": len(a),
                           "policy_mean": sum(b.values()) / len(b), "policy_n": len(b)}
    if keys and len(keys) >= PAIRED_MIN_FRACTION * min(len(a), len(b)):
        diffs = [b[k] - a[k] for k in keys]
        if all(d == 0 for d in diffs):
            statistic, p = 0.0, 1.0
        else:
            res = stats.wilcoxon(diffs, zero_method="wilcox")
            statistic, p = float(res.statistic), float(res.pvalue)
        row.update(test="wilcoxon_signed_rank", pairs=len(keys), difference=sum(diffs) / len(diffs))
    else:
        xs, ys = list(a.values()), list(b.values())
        if len(set(xs + ys)) == 1:
            statistic, p = 0.0, 1.0
        else:
            res = stats.mannwhitneyu(ys, xs, alternative="two-sided")
            statistic, p = float(res.statistic), float(res.pvalue)
        row.update(test="mann_whitney_u", difference=row["policy_mean"] - row["baseline_mean"])
    row.update(statistic=statistic, p_value=p)
    return row


def _rate(s: int, n: int) -> dict[str, Any]:
    lo, hi = wilson_interval(s, n)
    return {"successes": s, "n": n, "rate": s / n, "ci": [lo, hi]}


def _paired(base: ArmData, other: ArmData) -> tuple[int, int, int, int, int] | None:
    """(b, c, pairs, baseline successes, policy successes) over the matched pairs when they cover enough of
    the arms to compare pair by pair, else None. b: baseline succeeded and the policy failed; c: the reverse."""
    pairs = matched_outcomes(base, other)
    if not pairs or len(pairs) < PAIRED_MIN_FRACTION * min(base.n, other.n):
        return None
    b = sum(1 for x, y in pairs if x and not y)
    c = sum(1 for x, y in pairs if y and not x)
    return b, c, len(pairs), sum(x for x, _ in pairs), sum(y for _, y in pairs)


def _test_paired(b: int, c: int, pairs: int, base_s: int, other_s: int) -> dict[str, Any]:
    lo, hi = paired_difference_interval(b, c, pairs)
    return {
        "test": "mcnemar_exact",
        "pairs": pairs,
        "discordant": {"baseline_only": b, "policy_only": c},
        "paired_rates": {"baseline": base_s / pairs, "policy": other_s / pairs},
        "difference": (c - b) / pairs,
        "difference_ci": [lo, hi],
        "statistic": float(min(b, c)),
        "p_value": mcnemar_exact(b, c),
    }


def _test_unpaired(base_s: int, base_n: int, other_s: int, other_n: int) -> dict[str, Any]:
    z, p = two_proportion_ztest(other_s, other_n, base_s, base_n)
    lo, hi = newcombe_difference_interval(base_s, base_n, other_s, other_n)
    return {
        "test": "two_proportion_z",
        "difference": other_s / other_n - base_s / base_n,
        "difference_ci": [lo, hi],
        "statistic": z,
        "p_value": p,
    }


def compare(
    labelled: list[tuple[Arm, dict[str, Any]]], baseline: str, policies: list[str], alpha: float = 0.05
) -> dict[str, Any]:
    groups: dict[Arm, list[dict[str, Any]]] = {}
    for arm, rec in labelled:
        groups.setdefault(arm, []).append(rec)
    tasks = sorted({arm.task for arm in groups})
    data = {arm: _arm_data(recs) for arm, recs in groups.items()}
    rows: list[dict[str, Any]] = []
    for policy in policies:
        if policy == baseline:
            continue
        pooled_paired = [0, 0, 0, 0, 0]  # b, c, pairs, baseline successes in pairs, policy successes in pairs
        pooled = [0, 0, 0, 0]  # baseline s, n, policy s, n
        all_paired = True
        shared_tasks = 0
        for task in tasks:
            base, other = data.get(Arm(task, baseline)), data.get(Arm(task, policy))
            row: dict[str, Any] = {"task": task, "policy": policy, "baseline": baseline,
                                   "baseline_rate": _rate(base.successes, base.n) if base else None,
                                   "policy_rate": _rate(other.successes, other.n) if other else None}
            if base is None or other is None:
                row.update({"test": None, "p_value": None,
                            "note": f"no records of {'baseline ' + baseline if base is None else policy} on this task"})
                rows.append(row)
                continue
            shared_tasks += 1
            pooled = [pooled[0] + base.successes, pooled[1] + base.n, pooled[2] + other.successes, pooled[3] + other.n]
            paired = _paired(base, other)
            if paired:
                b, c, pairs, bs, os_ = paired
                pooled_paired = [pooled_paired[0] + b, pooled_paired[1] + c, pooled_paired[2] + pairs,
                                 pooled_paired[3] + bs, pooled_paired[4] + os_]
                row.update(_test_paired(b, c, pairs, bs, os_))
            else:
                all_paired = False
                row.update(_test_unpaired(base.successes, base.n, other.successes, other.n))
            rows.append(row)
            progress = progress_test(base, other)
            if progress is not None:
                rows.append({"task": task, "policy": policy, "baseline": baseline, **progress})
        if shared_tasks >= 2:
            row = {"task": "(pooled)", "policy": policy, "baseline": baseline,
                   "baseline_rate": _rate(pooled[0], pooled[1]), "policy_rate": _rate(pooled[2], pooled[3])}
            if all_paired:
                row.update(_test_paired(*pooled_paired))
            else:
                row.update(_test_unpaired(*pooled))
            rows.append(row)
    for r in rows:
        r.setdefault("outcome", "success")
    tested = [r for r in rows if r.get("p_value") is not None]
    for r, adj in zip(tested, holm_adjust([r["p_value"] for r in tested])):
        r["p_holm"] = adj
        r["significant"] = adj < alpha
    return {
        "baseline": baseline,
        "policies": [p for p in policies if p != baseline],
        "alpha": alpha,
        "correction": "holm",
        "family_size": len(tested),
        "paired_rule": f"exact McNemar on (task, seed) pairs when pairs cover >= {PAIRED_MIN_FRACTION:.0%} of the "
                       "smaller arm; else pooled two-proportion z test; progress: Wilcoxon signed-rank on the same"
                       " pairs, else Mann-Whitney U",
        "comparisons": rows,
    }


def gate(result: dict[str, Any]) -> dict[str, Any]:
    """The CI gate over a comparison (`evalfleet compare --gate`): a candidate fails when its success rate on a task
    is lower than the baseline's and the difference is significant after Holm's correction over the per-task
    success tests (pooled and progress rows are not in this family: a regression on any one task fails). Returns
    {"passed", "worse": [{policy, task, baseline_rate, policy_rate, p_value, p_holm, test}], "family_size",
    "alpha", "rule"}."""
    alpha = result["alpha"]
    rows = [r for r in result["comparisons"] if r.get("outcome") == "success" and r["task"] != "(pooled)"
            and r.get("p_value") is not None]
    worse = []
    for r, adjusted in zip(rows, holm_adjust([r["p_value"] for r in rows])):
        if adjusted < alpha and r["policy_rate"]["rate"] < r["baseline_rate"]["rate"]:
            worse.append({"policy": r["policy"], "task": r["task"], "baseline_rate": r["baseline_rate"]["rate"],
                          "policy_rate": r["policy_rate"]["rate"], "p_value": r["p_value"], "p_holm": adjusted,
                          "test": r.get("test")})
    return {"passed": not worse, "worse": worse, "family_size": len(rows), "alpha": alpha,
            "rule": "fails when a policy's success rate on a task is below the baseline's with Holm-adjusted "
                    f"p < {alpha:g} over the per-task tests (paired McNemar where the arms share seeds)"}


def sequential_gate(comparisons: list[dict[str, Any]], baseline: str) -> dict[str, Any] | None:
    """The gate from an Experiment's own sequential comparisons (`stopping.compare`, experiment_result.json's
    `comparisons`) against `baseline`: a candidate fails where its pair stopped on "worse". Those decisions hold
    at whatever episode each pair stopped; a fixed-sample test of the same stopped data would not (stopping when
    a difference shows inflates its false alarms), so an Experiment that stopped sequentially is gated by them.
    None where the Experiment compared nothing with `baseline` sequentially."""
    mine = [c for c in comparisons if isinstance(c, dict) and c.get("baseline") == baseline]
    if not mine:
        return None
    worse = [{"policy": c.get("policy"), "task": c.get("task"), "difference": c.get("difference"),
              "interval": c.get("interval"), "stopped_at": c.get("stopped_at"), "test": "sequential"}
             for c in mine if c.get("verdict") == "worse"]
    open_ = [f"{c.get('task')}/{c.get('policy')}" for c in mine if c.get("verdict") not in ("better", "worse",
                                                                                            "no_difference")]
    return {"passed": not worse, "worse": worse, "family_size": len(mine), "alpha": mine[0].get("alpha"),
            "undecided": open_, "sequential": True,
            "rule": "fails when a policy's sequential comparison with the baseline (stopping.compare) stopped on "
                    "'worse': group-sequential exact binomial on discordant pairs, Holm across the comparisons"}


def gate_lines(verdict: dict[str, Any], baseline: str) -> list[str]:
    """What the gate says, one line per regression (and, for a sequential gate, the pairs left undecided)."""
    if verdict.get("sequential"):
        lines = [f"gate: FAILED: {w['policy']} is worse than {baseline} on {w['task']}: difference "
                 f"{w['difference']:+.1%} in [{w['interval'][0]:+.1%}, {w['interval'][1]:+.1%}], stopped at "
                 f"{w['stopped_at']} episodes (sequential)" for w in verdict["worse"]]
        if verdict["passed"]:
            lines.append(f"gate: passed: no sequential comparison with {baseline} stopped on worse "
                         f"({verdict['family_size']} comparisons, alpha {verdict['alpha']:g})")
        if verdict["undecided"]:
            lines.append(f"gate: note: undecided at the episode cap: {', '.join(verdict['undecided'])}")
        return lines
    if verdict["passed"]:
        return [f"gate: passed: no policy is worse than {baseline} on any task "
                f"({verdict['family_size']} per-task tests, Holm, alpha {verdict['alpha']:g})"]
    return [f"gate: FAILED: {w['policy']} is worse than {baseline} on {w['task']}: {w['policy_rate']:.1%} against "
            f"{w['baseline_rate']:.1%} ({w['test']}, p_holm={w['p_holm']:.3g})" for w in verdict["worse"]]


def sequential_gate_of(output: str, baseline: str) -> dict[str, Any] | None:
    """`sequential_gate` of an output folder's experiment_result.json (None: no such file, or no sequential
    comparison with `baseline` in it)."""
    import os

    from evalfleet.bounded_json import loads
    from evalfleet.layout import RESULT_FILE

    path = os.path.join(output, RESULT_FILE)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            result = loads(f.read())
    except (OSError, ValueError):
        return None
    comparisons = result.get("comparisons") if isinstance(result, dict) else None
    return sequential_gate(comparisons, baseline) if isinstance(comparisons, list) else None


def gate_output(output: str, baseline: str, *, alpha: float = 0.05) -> dict[str, Any]:
    """The CI gate of one output folder against `baseline` (what `evalfleet compare OUT --baseline B --gate` and
    `ExperimentResult.gate` decide): the Experiment's own sequential comparisons with `baseline` where it stopped
    sequentially (`sequential_gate`), else the per-task paired tests over its records (`gate`)."""
    from evalfleet.analysis.grouping import ordered_policies
    from evalfleet.analysis.loading import load_records
    from evalfleet.analysis.success import labelled_records
    from evalfleet.errors import UserError

    verdict = sequential_gate_of(output, baseline)
    if verdict is not None:
        return verdict
    labelled = labelled_records(load_records([output]), None, None, where=output, flag="baseline")
    policies = ordered_policies(labelled, None)
    if baseline not in policies or len(policies) < 2:
        raise UserError(f"no records of baseline policy {baseline!r} beside another policy's (policies: "
                        f"{', '.join(policies) or 'none'})", where=output, key="baseline")
    return gate(compare(labelled, baseline, [baseline] + [p for p in policies if p != baseline], alpha=alpha))


def print_table(result: dict[str, Any], width: int | None = None) -> None:
    for line in table_lines(result, width):
        print(line)


def table_lines(result: dict[str, Any], width: int | None = None) -> list[str]:
    """The comparison as text for `width` columns (default: the terminal's, 80 when piped); names never cut."""
    from evalfleet.textlayout import Column, output_width, table_lines as layout, wrap_fields

    width = output_width() if width is None else width
    columns = [Column("task"), Column("policy"), Column("baseline rate", "right"), Column("policy rate", "right"),
               Column("difference [95% CI]", "right"), Column("test"), Column("p", "right"),
               Column("p (Holm)", "right"), Column("significant")]

    def rate(r: dict[str, Any] | None) -> str:
        if not r:
            return "N/A"
        return f"{r['rate']:.1%} [{r['ci'][0]:.0%}, {r['ci'][1]:.0%}] n={r['n']}"

    rows = []
    for row in result["comparisons"]:
        if row.get("outcome") == "progress":
            test = (f"Wilcoxon, {row['pairs']} pairs" if row["test"] == "wilcoxon_signed_rank" else "Mann-Whitney")
            rows.append([row["task"], row["policy"], f"progress {row['baseline_mean']:.1%} n={row['baseline_n']}",
                         f"progress {row['policy_mean']:.1%} n={row['policy_n']}", f"{row['difference']:+.1%}",
                         test, f"{row['p_value']:.3g}", f"{row['p_holm']:.3g}",
                         "yes" if row["significant"] else "no"])
            continue
        if row.get("test") is None:
            rows.append([row["task"], row["policy"], rate(row["baseline_rate"]), rate(row["policy_rate"]),
                         "-", "-", "-", "-", f"not tested ({row.get('note', 'no test')})"])
            continue
        lo, hi = row["difference_ci"]
        test = f"McNemar, {row['pairs']} pairs" if row["test"] == "mcnemar_exact" else "z (unpaired)"
        rows.append([
            row["task"], row["policy"], rate(row["baseline_rate"]), rate(row["policy_rate"]),
            f"{row['difference']:+.1%} [{lo:+.1%}, {hi:+.1%}]", test, f"{row['p_value']:.3g}",
            f"{row['p_holm']:.3g}", "yes" if row["significant"] else "no",
        ])
    title = (f"Difference from baseline {result['baseline']} (policy rate - baseline rate); "
             f"significant: Holm-corrected p < {result['alpha']} over {result.get('family_size', len(rows))} tests")
    return [*wrap_fields(title.split(" "), width, gap=" ", hanging="  "),
            *layout(columns, rows, width, name_columns=2)]
