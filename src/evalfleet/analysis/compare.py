"""Each policy's difference from a baseline, per task and pooled.

Two policies evaluated on the same task face the same episodes (the plan derives seeds from the task and the
episode index), so their records pair up by (task, seed). When they do (matched pairs cover at least half of
the smaller arm; a pair also needs equal variation values), the test is the exact McNemar test on the matched pairs and the difference's interval is
the paired Wald interval; otherwise a pooled two-proportion z test with Newcombe's score interval. Every test
reported (per-task and pooled) forms one family for Holm's correction.
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
    successes: int
    n: int
    by_seed: dict[tuple[Any, str], bool]  # (seed, variation values) → success (last record wins)


def episode_key(rec: dict[str, Any]) -> tuple[Any, str]:
    """What makes two records of one task the same episode: the seed and the variation values drawn from it
    (a Run with a variation disabled has the same seeds but different inputs, so it does not pair)."""
    return (rec.get("seed"), json.dumps(rec.get("variations") or {}, sort_keys=True, default=str))


def _arm_data(records: list[dict[str, Any]]) -> ArmData:
    by_seed = {}
    for rec in records:
        if rec.get("seed") is not None:
            by_seed[episode_key(rec)] = rec["status"] == "success"
    return ArmData(successes=sum(r["status"] == "success" for r in records), n=len(records), by_seed=by_seed)


def _rate(s: int, n: int) -> dict[str, Any]:
    lo, hi = wilson_interval(s, n)
    return {"successes": s, "n": n, "rate": s / n, "ci": [lo, hi]}


def _paired(base: ArmData, other: ArmData) -> tuple[int, int, int] | None:
    """(b, c, pairs) when the arms share enough seeds to be compared pair by pair, else None.
    b: baseline succeeded and the other policy failed; c: the reverse."""
    shared = base.by_seed.keys() & other.by_seed.keys()
    if not shared or len(shared) < PAIRED_MIN_FRACTION * min(base.n, other.n):
        return None
    b = sum(1 for s in shared if base.by_seed[s] and not other.by_seed[s])
    c = sum(1 for s in shared if not base.by_seed[s] and other.by_seed[s])
    return b, c, len(shared)


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
                b, c, pairs = paired
                shared = base.by_seed.keys() & other.by_seed.keys()
                bs = sum(base.by_seed[s] for s in shared)
                os_ = sum(other.by_seed[s] for s in shared)
                pooled_paired = [pooled_paired[0] + b, pooled_paired[1] + c, pooled_paired[2] + pairs,
                                 pooled_paired[3] + bs, pooled_paired[4] + os_]
                row.update(_test_paired(b, c, pairs, bs, os_))
            else:
                all_paired = False
                row.update(_test_unpaired(base.successes, base.n, other.successes, other.n))
            rows.append(row)
        if shared_tasks >= 2:
            row = {"task": "(pooled)", "policy": policy, "baseline": baseline,
                   "baseline_rate": _rate(pooled[0], pooled[1]), "policy_rate": _rate(pooled[2], pooled[3])}
            if all_paired:
                row.update(_test_paired(*pooled_paired))
            else:
                row.update(_test_unpaired(*pooled))
            rows.append(row)
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
        "paired_rule": f"exact McNemar on (task, seed, variation values) pairs when pairs cover >= {PAIRED_MIN_FRACTION:.0%} of the "
                       "smaller arm; else pooled two-proportion z test",
        "comparisons": rows,
    }


def print_table(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Difference from baseline {result['baseline']} (Holm-corrected, alpha={result['alpha']})")
    for col in ("task", "policy", "baseline", "policy rate", "difference [95% CI]", "test", "p", "p (Holm)", ""):
        table.add_column(col, justify="left" if col in ("task", "policy", "test") else "right")

    def rate(r: dict[str, Any] | None) -> str:
        if not r:
            return "N/A"
        return f"{r['rate']:.1%} [{r['ci'][0]:.0%}, {r['ci'][1]:.0%}] n={r['n']}"

    for row in result["comparisons"]:
        if row.get("test") is None:
            table.add_row(row["task"], row["policy"], rate(row["baseline_rate"]), rate(row["policy_rate"]),
                          "-", "-", "-", "-", row.get("note", ""))
            continue
        lo, hi = row["difference_ci"]
        test = "McNemar (paired)" if row["test"] == "mcnemar_exact" else "z (unpaired)"
        if row["test"] == "mcnemar_exact":
            test += f" {row['pairs']} pairs"
        table.add_row(
            row["task"], row["policy"], rate(row["baseline_rate"]), rate(row["policy_rate"]),
            f"{row['difference']:+.1%} [{lo:+.1%}, {hi:+.1%}]", test, f"{row['p_value']:.3g}",
            f"{row['p_holm']:.3g}", "*" if row["significant"] else "",
        )
    Console(width=200).print(table)
