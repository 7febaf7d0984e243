"""Floors (#55, must show 1): `floors: [noop, random]` on the quickstart adds the no-op and random policies on each
task as paired arms (the same seeds episode by episode); the no-op succeeds about never, the expert is above it with
the p-value computed here by hand from the records (one-sided exact McNemar, Holm across every test), and the
result, the trust check and the report say so. The resolved experiment.yaml loads again with the same Runs."""

from __future__ import annotations

import json
import math

import evalfleet
from evalfleet_testkit import ROOT

from evalfleet.experiment.loading import load_experiment

FLOORS = ("noop", "random")
TASKS = ("push-v3", "pick-place-v3")


def records_of(out, run: str) -> dict[int, dict]:
    return {r["episode"]: r for r in map(json.loads, (out / run / "episode_results.jsonl").read_text().splitlines())}


def one_sided(above: int, below: int) -> float:
    n = above + below
    return sum(math.comb(n, k) for k in range(above, n + 1)) / 2**n if above else 1.0


def holm(pvalues: list[float]) -> list[float]:
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    adjusted, running = [0.0] * len(pvalues), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def test_floors_on_the_quickstart(tmp_path) -> None:
    out = tmp_path / "out"
    overrides = ["floors=[noop, random]", "shared.rollout_limit.num_episodes=12", "shared.environment.max_steps=200"]
    result = evalfleet.run(ROOT / "examples" / "quickstart.yaml", output=out, workers=2, progress=False,
                           log=lambda _: None, overrides=overrides)
    floor_runs = {f"floor_{kind}_{task}" for kind in FLOORS for task in TASKS}
    assert floor_runs <= set(result.runs)
    policies = {"push-v3": ("push_expert", "push_expert_noisy"),
                "pick-place-v3": ("pick_place_expert", "pick_place_expert_noisy")}
    expected, tests = {}, []
    for task, runs in policies.items():
        for kind in FLOORS:
            floor = records_of(out, f"floor_{kind}_{task}")
            assert {e: r["seed"] for e, r in floor.items()} == \
                {e: r["seed"] for e, r in records_of(out, runs[0]).items()}  # paired: the same seeds
            for run in runs:
                mine = records_of(out, run)
                both = [e for e in mine if e in floor and {mine[e]["status"], floor[e]["status"]} <= {"success",
                                                                                                    "failure"}]
                above = sum(1 for e in both if mine[e]["success"] and not floor[e]["success"])
                below = sum(1 for e in both if floor[e]["success"] and not mine[e]["success"])
                expected[(task, run, kind)] = (above, below, one_sided(above, below))
                tests.append((task, run, kind))
    adjusted = dict(zip(tests, holm([expected[t][2] for t in tests])))

    floors = json.loads((out / "experiment_result.json").read_text())["floors"]
    for (task, run, kind), (above, below, p) in expected.items():
        got = floors["tasks"][task]["policies"][run]["versus"][kind]
        assert (got["policy_only"], got["floor_only"]) == (above, below)
        assert math.isclose(got["p_value"], p) and math.isclose(got["p_holm"], adjusted[(task, run, kind)])
        assert got["above"] == (adjusted[(task, run, kind)] < 0.05)
    for task in TASKS:
        noop = floors["tasks"][task]["floors"]["noop"]
        assert noop["decided"] == 12 and noop["rate"] <= 1 / 12  # the zero action about never succeeds
        expert = floors["tasks"][task]["policies"][policies[task][0]]["versus"]["noop"]
        assert expert["above"] and expert["p_holm"] < 0.01  # the expert is above the no-op floor

    trust = {c["check"]: c for c in result.trust}
    not_above = [t for t in tests if not (adjusted[t] < 0.05)]
    assert trust["floors"]["outcome"] == ("flagged" if not_above else "passed")
    page = (out / "index.html").read_text()
    assert page.count('data-floor="noop"') == 4 and page.count('data-floor="random"') == 4
    # the resolved file keeps its floors: loading it again gives the same Runs, none twice
    again = load_experiment(out / "experiment.yaml")
    assert list(again.experiment.runs) == list(result.runs)
