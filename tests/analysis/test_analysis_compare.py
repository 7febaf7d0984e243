"""`compare`, `power` and the statistics under them against scipy / statsmodels."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportions_ztest, samplesize_proportions_2indep_onetail

from evalfleet.analysis import stats
from evalfleet.cli import main
from evalfleet.rollout.records import EpisodeRecord, RecordWriter


@pytest.mark.parametrize("b,c", [(0, 0), (0, 5), (3, 9), (9, 3), (12, 12), (1, 30), (40, 61), (250, 310), (900, 1020)])
def test_mcnemar_exact_matches_statsmodels(b: int, c: int) -> None:
    ref = mcnemar([[17, b], [c, 11]], exact=True).pvalue
    assert stats.mcnemar_exact(b, c) == pytest.approx(ref, rel=1e-9, abs=1e-300)


def test_binomial_cdf_matches_scipy_for_large_n() -> None:
    for k, n in [(10, 40), (2000, 4500), (2400, 5000), (4990, 10000)]:
        assert stats.binomial_cdf_half(k, n) == pytest.approx(sps.binom.cdf(k, n, 0.5), rel=1e-8)


@pytest.mark.parametrize("s1,n1,s2,n2", [(30, 50, 40, 50), (5, 20, 15, 22), (90, 100, 91, 100), (0, 10, 4, 12),
                                         (117, 300, 160, 310)])
def test_two_proportion_z_matches_statsmodels(s1, n1, s2, n2) -> None:
    z_ref, p_ref = proportions_ztest([s1, s2], [n1, n2])
    z, p = stats.two_proportion_ztest(s1, n1, s2, n2)
    assert z == pytest.approx(z_ref, rel=1e-12)
    assert p == pytest.approx(p_ref, rel=1e-9)


def test_holm_matches_statsmodels() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        ps = list(rng.uniform(0, 0.2, size=int(rng.integers(1, 12))))
        ps[0] = ps[-1]  # ties
        ref = multipletests(ps, method="holm")[1]
        assert stats.holm_adjust(ps) == pytest.approx(list(ref), rel=1e-12)


@pytest.mark.parametrize("p1,p2,alpha,power", [(0.6, 0.7, 0.05, 0.8), (0.2, 0.5, 0.01, 0.9), (0.9, 0.85, 0.05, 0.8)])
def test_episodes_per_arm_matches_statsmodels(p1, p2, alpha, power) -> None:
    ref = samplesize_proportions_2indep_onetail(p2 - p1, p1, power, alpha=alpha, alternative="two-sided")
    assert stats.episodes_per_arm(p1, p2, alpha, power) == int(np.ceil(ref))


def test_power_command(capsys) -> None:
    assert main(["power", "--p1", "0.6", "--p2", "0.7"]) == 0
    assert capsys.readouterr().out.startswith("356 episodes per arm")
    assert main(["power", "--p1", "0.6", "--p2", "0.6"]) == 2
    assert "--p1 and --p2 are equal" in capsys.readouterr().err
    assert main(["power", "--p1", "1.2", "--p2", "0.6"]) == 2


def _write(path: Path, run: str, task: str, policy: str, outcomes, seeds, variations=None) -> None:
    with RecordWriter(path / run / "episode_results.jsonl", fsync=False) as w:
        for i, (ok, seed) in enumerate(zip(outcomes, seeds)):
            w.append(EpisodeRecord(run=run, task=task, policy=policy, episode=i, seed=int(seed),
                                   status="success" if ok else "failure", success=bool(ok), episode_length=10,
                                   duration_s=0.1, variations=dict(variations or {})))


def test_compare_paired_and_unpaired_match_references(tmp_path: Path, capsys) -> None:
    rng = np.random.default_rng(11)
    out = tmp_path / "out"
    expected = {}
    # task_a: both policies face the same 80 seeds -> exact McNemar on the pairs
    base_a = rng.uniform(size=80) < 0.55
    cand_a = np.where(rng.uniform(size=80) < 0.7, base_a, rng.uniform(size=80) < 0.8)
    seeds_a = np.arange(1000, 1080)
    _write(out, "task_a_base", "task_a", "base", base_a, seeds_a)
    _write(out, "task_a_cand", "task_a", "cand", cand_a, seeds_a)
    table = [[int(np.sum(base_a & cand_a)), int(np.sum(base_a & ~cand_a))],
             [int(np.sum(~base_a & cand_a)), int(np.sum(~base_a & ~cand_a))]]
    expected["task_a"] = mcnemar(table, exact=True).pvalue
    # task_b: disjoint seeds -> two-proportion z test
    base_b = rng.uniform(size=60) < 0.4
    cand_b = rng.uniform(size=70) < 0.65
    _write(out, "task_b_base", "task_b", "base", base_b, np.arange(60))
    _write(out, "task_b_cand", "task_b", "cand", cand_b, np.arange(500, 570))
    expected["task_b"] = proportions_ztest([cand_b.sum(), base_b.sum()], [70, 60])[1]
    # task_c: the same seeds, the candidate with a variation on (as the quickstart's noisy expert): still pairs
    base_c = rng.uniform(size=50) < 0.5
    cand_c = rng.uniform(size=50) < 0.5
    _write(out, "task_c_base", "task_c", "base", base_c, np.arange(50))
    _write(out, "task_c_cand", "task_c", "cand", cand_c, np.arange(50), variations={"robot.action_noise": 0.3})
    table_c = [[int(np.sum(base_c & cand_c)), int(np.sum(base_c & ~cand_c))],
               [int(np.sum(~base_c & cand_c)), int(np.sum(~base_c & ~cand_c))]]
    expected["task_c"] = mcnemar(table_c, exact=True).pvalue
    # task_d: only the baseline ran it
    _write(out, "task_d_base", "task_d", "base", [True, False], [1, 2])
    # pooled: not every task is paired -> z test on the pooled counts of the tasks both ran
    s_base = int(base_a.sum() + base_b.sum() + base_c.sum())
    s_cand = int(cand_a.sum() + cand_b.sum() + cand_c.sum())
    expected["(pooled)"] = proportions_ztest([s_cand, s_base], [200, 190])[1]

    json_out = tmp_path / "cmp.json"
    assert main(["compare", str(out), "--baseline", "base", "--output", str(json_out)]) == 0
    printed = capsys.readouterr().out
    assert "task_a" in printed and "McNemar" in printed and "N/A" in printed
    result = json.loads(json_out.read_text())
    rows = {r["task"]: r for r in result["comparisons"]}
    assert rows["task_a"]["test"] == "mcnemar_exact" and rows["task_a"]["pairs"] == 80
    assert rows["task_a"]["discordant"] == {"baseline_only": table[0][1], "policy_only": table[1][0]}
    assert rows["task_c"]["test"] == "mcnemar_exact" and rows["task_c"]["pairs"] == 50
    assert rows["task_b"]["test"] == rows["(pooled)"]["test"] == "two_proportion_z"
    assert rows["task_d"]["test"] is None and "no records of cand" in rows["task_d"]["note"]
    tested = ["task_a", "task_b", "task_c", "(pooled)"]
    for task in tested:
        assert rows[task]["p_value"] == pytest.approx(expected[task], rel=1e-9), task
    holm = multipletests([expected[t] for t in tested], method="holm")[1]
    for task, adj in zip(tested, holm):
        assert rows[task]["p_holm"] == pytest.approx(adj, rel=1e-9)
        assert rows[task]["significant"] == (adj < 0.05)
    assert result["family_size"] == 4
    diff_b = cand_b.mean() - base_b.mean()
    assert rows["task_b"]["difference"] == pytest.approx(diff_b)
    lo, hi = rows["task_b"]["difference_ci"]
    assert lo < diff_b < hi


def test_compare_pooled_mcnemar_when_every_task_paired(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    out = tmp_path / "out"
    b_total = c_total = 0
    for t in range(3):
        base = rng.uniform(size=40) < 0.5
        cand = rng.uniform(size=40) < 0.6
        seeds = np.arange(40) + 100 * t
        _write(out, f"t{t}_base", f"t{t}", "base", base, seeds)
        _write(out, f"t{t}_cand", f"t{t}", "cand", cand, seeds)
        b_total += int(np.sum(base & ~cand))
        c_total += int(np.sum(~base & cand))
    json_out = tmp_path / "cmp.json"
    assert main(["compare", str(out), "--baseline", "base", "-o", str(json_out)]) == 0
    pooled = [r for r in json.loads(json_out.read_text())["comparisons"] if r["task"] == "(pooled)"][0]
    assert pooled["test"] == "mcnemar_exact" and pooled["pairs"] == 120
    assert pooled["p_value"] == pytest.approx(mcnemar([[0, b_total], [c_total, 0]], exact=True).pvalue, rel=1e-9)


@pytest.mark.parametrize("s1,n1,s2,n2", [(30, 50, 40, 50), (5, 20, 15, 22), (0, 10, 4, 12), (117, 300, 160, 310)])
def test_newcombe_interval_matches_statsmodels(s1, n1, s2, n2) -> None:
    from statsmodels.stats.proportion import confint_proportions_2indep

    # statsmodels gives the interval of p1 - p2; ours is of p2 - p1 (policy minus baseline)
    lo_ref, hi_ref = confint_proportions_2indep(s1, n1, s2, n2, method="newcomb", compare="diff")
    lo, hi = stats.newcombe_difference_interval(s2, n2, s1, n1)
    assert (lo, hi) == pytest.approx((lo_ref, hi_ref), rel=1e-9)


def test_compare_pairs_within_arms_holding_a_run_and_its_control(tmp_path: Path) -> None:
    """Each policy ran the task twice: with a variation on and with it off (its control). Same seeds in all four
    Runs; pairs must match on-with-on and off-with-off, never across."""
    rng = np.random.default_rng(8)
    out = tmp_path / "out"
    seeds = np.arange(30)
    outcomes = {}
    for policy in ("base", "cand"):
        for arm in ("on", "off"):
            outcomes[policy, arm] = rng.uniform(size=30) < (0.3 if arm == "on" else 0.8)
        # the "on" Runs draw the same value per seed, as the plan does
        with RecordWriter(out / f"lift_{policy}_on" / "episode_results.jsonl", fsync=False) as w:
            for i, seed in enumerate(seeds):
                ok = bool(outcomes[policy, "on"][i])
                w.append(EpisodeRecord(run=f"lift_{policy}_on", task="lift", policy=policy, episode=i, seed=int(seed),
                                       status="success" if ok else "failure", success=ok, episode_length=1,
                                       duration_s=0.1, variations={"object.mass": float(seed) / 10}))
        _write(out, f"lift_{policy}_off", "lift", policy, outcomes[policy, "off"], seeds)
    b = c = 0
    for arm in ("on", "off"):
        x, y = outcomes["base", arm], outcomes["cand", arm]
        b += int(np.sum(x & ~y))
        c += int(np.sum(~x & y))
    json_out = tmp_path / "cmp.json"
    assert main(["compare", str(out), "--baseline", "base", "-o", str(json_out)]) == 0
    [row] = json.loads(json_out.read_text())["comparisons"]
    assert row["test"] == "mcnemar_exact" and row["pairs"] == 60
    assert row["discordant"] == {"baseline_only": b, "policy_only": c}
    assert row["p_value"] == pytest.approx(mcnemar([[0, b], [c, 0]], exact=True).pvalue, rel=1e-9)
