"""compare also compares progress pair by pair: Wilcoxon signed-rank on (task, seed) pairs, Mann-Whitney U when
the arms share no seeds; the progress rows join the Holm family and are printed."""

from __future__ import annotations

import random

import pytest

from evalfleet.analysis.compare import compare, table_lines
from evalfleet.analysis.grouping import Arm


def records(policy: str, task: str, seeds: list[int], shift: float, rng: random.Random) -> list[tuple[Arm, dict]]:
    out = []
    for seed in seeds:
        score = min(1.0, max(0.0, rng.random() * 0.6 + shift))
        out.append((Arm(task, policy), {"run": f"{task}_{policy}", "task": task, "policy": policy, "seed": seed,
                                        "status": "success" if score > 0.9 else "failure",
                                        "progress": {"overall_score": score, "all_complete": score > 0.9}}))
    return out


def test_shared_seeds_are_compared_pair_by_pair_with_wilcoxon() -> None:
    from scipy import stats

    rng = random.Random(3)
    seeds = list(range(40))
    labelled = records("base", "t", seeds, 0.0, rng) + records("better", "t", seeds, 0.35, rng)
    result = compare(labelled, "base", ["base", "better"])
    [row] = [r for r in result["comparisons"] if r["outcome"] == "progress"]
    assert row["test"] == "wilcoxon_signed_rank" and row["pairs"] == 40
    base = {r["seed"]: r["progress"]["overall_score"] for a, r in labelled if a.policy == "base"}
    diffs = [r["progress"]["overall_score"] - base[r["seed"]] for a, r in labelled if a.policy == "better"]
    assert row["p_value"] == pytest.approx(stats.wilcoxon(diffs).pvalue)
    assert row["difference"] == pytest.approx(sum(diffs) / len(diffs)) and row["significant"]
    assert result["family_size"] == 2  # the success-rate row and the progress row
    success = next(r for r in result["comparisons"] if r["outcome"] == "success")
    low, high = sorted([row["p_value"], success["p_value"]])  # Holm over the two: 2 * smallest, then monotone
    holm = {low: min(1.0, 2 * low), high: max(min(1.0, 2 * low), high)}
    assert row["p_holm"] == pytest.approx(holm[row["p_value"]])
    text = " ".join(" ".join(table_lines(result, 200)).split())
    assert "Wilcoxon, 40 pairs" in text


def test_without_shared_seeds_mann_whitney_and_no_difference_is_not_significant() -> None:
    rng = random.Random(5)
    labelled = records("base", "t", list(range(30)), 0.1, rng) + records("same", "t", list(range(100, 130)), 0.1, rng)
    result = compare(labelled, "base", ["base", "same"])
    [row] = [r for r in result["comparisons"] if r["outcome"] == "progress"]
    assert row["test"] == "mann_whitney_u" and not row["significant"]
    assert "Mann-Whitney" in " ".join(table_lines(result, 200))


def test_no_progress_rows_without_progress() -> None:
    labelled = [(Arm("t", p), {"task": "t", "policy": p, "seed": s, "status": "success"})
                for p in ("a", "b") for s in range(5)]
    assert all(r["outcome"] == "success" for r in compare(labelled, "a", ["a", "b"])["comparisons"])
