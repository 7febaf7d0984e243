"""`evalfleet history` (#53): a checkpoint series evaluated with evaluate(step=...) into a store, checked against
numbers computed by hand from the output folders' records: rates and Wilson intervals per step, the paired
counts against a baseline (same seed), exact McNemar p-values Holm-adjusted over the steps, the first step that
is better; a step run in an environment with one more variation is a series of its own and the command names
the variation."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from evalfleet_testkit import ROOT, run_evalfleet

import evalfleet
from evalfleet.analysis.stats import holm_adjust, mcnemar_exact, wilson_interval

EPISODES = 10
STEPS = {100: 1.5, 200: 0.8, 300: 0.0}  # training step → the noise of the "trained" policy


def outcomes(out: Path) -> dict[int, bool]:
    """seed → success of the decided episodes of the output's one Run."""
    path = next(out.glob("*/episode_results.jsonl"))
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {r["seed"]: r["status"] == "success" for r in records if r["status"] in ("success", "failure")}


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    root = tmp_path_factory.mktemp("history")
    spec = importlib.util.spec_from_file_location("evaluate_during_training",
                                                  ROOT / "examples" / "evaluate_during_training.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    store = root / "store"
    quickstart = str(ROOT / "examples" / "quickstart.yaml")
    common = dict(runs=["push_expert"], workers=2, log=lambda _: None)
    small = [f"shared.rollout_limit.num_episodes={EPISODES}", f"store={store}"]
    evalfleet.evaluate(example.NoisyExpert(1.5), quickstart, output=root / "base", policy_name="baseline",
                       overrides=small, **common)
    for step, noise in STEPS.items():
        evalfleet.evaluate(example.NoisyExpert(noise), quickstart, output=root / f"s{step}", policy_name="trained",
                           step=step, overrides=small, **common)
    evalfleet.evaluate(example.NoisyExpert(0.0), quickstart, output=root / "other_env", policy_name="trained",
                       step=400, overrides=[*small, "runs.push_expert.variations.robot.action_noise.enabled=true"],
                       **common)
    return root, store


def test_history_matches_the_records_by_hand(series) -> None:
    root, store = series
    proc = run_evalfleet("history", "trained", "--baseline", "baseline", "--store", str(store), "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    base = outcomes(root / "base")
    expected = []
    for step in STEPS:
        mine = outcomes(root / f"s{step}")
        wins = sum(mine.values())
        better = sum(1 for seed, won in mine.items() if seed in base and won and not base[seed])
        worse = sum(1 for seed, won in mine.items() if seed in base and base[seed] and not won)
        expected.append((step, wins, len(mine), wilson_interval(wins, len(mine)), better, worse,
                         sum(1 for seed in mine if seed in base), mcnemar_exact(better, worse)))
    adjusted = holm_adjust([e[-1] for e in expected])
    main = next(s for s in result["series"] if any(p["step"] == 100 for p in s["points"]))
    assert [p["step"] for p in main["points"]] == list(STEPS)
    for point, exp, p_holm in zip(main["points"], expected, adjusted):
        step, wins, n, ci, better, worse, pairs, p = exp
        assert (point["successes"], point["decided"]) == (wins, n)
        assert point["ci95"] == pytest.approx(list(ci))
        v = point["versus_baseline"]
        assert (v["better"], v["worse"], v["pairs"]) == (better, worse, pairs)
        assert v["p"] == pytest.approx(p)
    # Holm runs over every tested point, the other environment's too: recompute with it
    other_env = next(s for s in result["series"] if s is not main)
    assert [p["step"] for p in other_env["points"]] == [400]
    assert other_env["points"][0]["versus_baseline"] == {"pairs": 0}  # no baseline in that environment
    for point, p_holm in zip(main["points"], adjusted):
        assert point["versus_baseline"]["p_holm"] == pytest.approx(p_holm)
    first = next((e[0] for e, a in zip(expected, adjusted) if a < 0.05 and e[4] > e[5]), None)
    assert main["first_better_step"] == first
    assert first is not None  # the noiseless step is better than the noisy baseline: the test can tell
    assert any("variations.robot.action_noise" in note and "never pooled" in note for note in result["notes"])


def test_history_table_plot_and_refusals(series, tmp_path: Path) -> None:
    _, store = series
    plot = tmp_path / "h.png"
    proc = run_evalfleet("history", "trained", "--baseline", "baseline", "--store", str(store), "--plot", str(plot))
    assert proc.returncode == 0, proc.stderr
    assert "first step better than baseline" in proc.stdout and plot.read_bytes()[:4] == b"\x89PNG"
    proc = run_evalfleet("history", "nobody", "--store", str(store))
    assert proc.returncode == 2 and "no results of policy 'nobody'" in proc.stderr and "trained" in proc.stderr
    proc = run_evalfleet("history", "trained", "--baseline", "ghost", "--store", str(store))
    assert proc.returncode == 2 and "baseline 'ghost'" in proc.stderr
    proc = run_evalfleet("history", "trained", "--store", str(store), "--plot", str(tmp_path / "h.txt"))
    assert proc.returncode == 2 and "--plot" in proc.stderr


def test_the_board_keeps_each_checkpoint_a_revision_of_its_own(series) -> None:
    """The same series on `evalfleet board`: each step a revision of `trained` (told apart by its step alone: the
    in-process server's port is wiring, not identity), every row's counts as the records say, and the step run
    with one more variation a row of its own environment, the variation named."""
    root, store = series
    proc = run_evalfleet("board", "--store", str(store), "--json")
    assert proc.returncode == 0, proc.stderr
    board = json.loads(proc.stdout)
    rows = {(r["environment_fingerprint"], r["policy_name"], r["successes"], r["decided"]) for r in board["rows"]}
    by_output = {"base": "baseline", **{f"s{step}": "trained" for step in STEPS}, "other_env": "trained"}
    hand = set()
    for folder, name in by_output.items():
        mine = outcomes(root / folder)
        hand.add((name, sum(mine.values()), len(mine)))
    assert {(n, s, d) for _fp, n, s, d in rows} == hand
    assert len(board["rows"]) == len(by_output)
    assert any("trained" in note and "step" in note and "port" not in note for note in board["notes"])
    assert any("variations.robot.action_noise" in note for note in board["notes"])
