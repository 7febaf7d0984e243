"""The floors of an Experiment (`floors:`, experiment/floors.py) in experiment_result.json and the report: per task,
each floor's success rate, whether the task discriminates (no floor succeeds in FLOOR_TOO_HIGH of its episodes or
more), and each policy against each floor by a one-sided exact McNemar test on the episodes both decided, paired by
episode index (same seed and variation values), Holm across every (policy, floor, task) test.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from typing import Any

from evalfleet.analysis.stats import binomial_cdf_half, holm_adjust, wilson_interval
from evalfleet.experiment.floors import is_floor_run

FLOOR_TOO_HIGH = 0.25  # a floor that succeeds this often leaves little of the task's rate to the policy
ALPHA = 0.05


def _outcomes(records: Iterable[dict[str, Any]]) -> dict[int, bool]:
    """episode -> success, for the decided episodes."""
    return {r["episode"]: r["status"] == "success" for r in records
            if r.get("status") in ("success", "failure") and isinstance(r.get("episode"), int)}


def floors_result(runs: list[dict[str, Any]], records: Mapping[str, Iterable[dict[str, Any]]]) -> dict[str, Any] | None:
    """experiment_result.json's `floors` (None without floor Runs)."""
    floors = [r for r in runs if is_floor_run(r["run"], r.get("policy"))]
    if not floors:
        return None
    outcomes = {r["run"]: _outcomes(records.get(r["run"], [])) for r in runs}
    tasks: dict[str, dict[str, Any]] = {}
    tests: list[dict[str, Any]] = []
    for floor in floors:
        task = tasks.setdefault(str(floor.get("task")), {"floors": {}, "policies": {}})
        wins = sum(outcomes[floor["run"]].values())
        decided = len(outcomes[floor["run"]])
        task["floors"][floor["policy"]] = {"run": floor["run"], "successes": wins, "decided": decided,
                                           "rate": wins / decided if decided else None,
                                           "ci95": list(wilson_interval(wins, decided)) if decided else None}
    for run in runs:
        task = tasks.get(str(run.get("task")))
        if task is None or is_floor_run(run["run"], run.get("policy")):
            continue
        mine = outcomes[run["run"]]
        entry = {"policy": run.get("policy"), "rate": run.get("success_rate"), "versus": {}}
        for kind, floor in task["floors"].items():
            theirs = outcomes[floor["run"]]
            both = set(mine) & set(theirs)
            above = sum(1 for e in both if mine[e] and not theirs[e])
            below = sum(1 for e in both if theirs[e] and not mine[e])
            # one-sided: P(at least `above` of the discordant pairs go the policy's way | no difference)
            p = 1.0 - binomial_cdf_half(above - 1, above + below) if above else 1.0
            test = {"pairs": len(both), "policy_only": above, "floor_only": below, "p_value": p}
            entry["versus"][kind] = test
            tests.append(test)
        task["policies"][run["run"]] = entry
    for test, adjusted in zip(tests, holm_adjust([t["p_value"] for t in tests])):
        test["p_holm"] = adjusted
        test["above"] = adjusted < ALPHA
    for task in tasks.values():
        task["discriminates"] = all(f["rate"] is None or f["rate"] < FLOOR_TOO_HIGH for f in task["floors"].values())
    return {"tasks": tasks, "too_high": FLOOR_TOO_HIGH, "alpha": ALPHA,
            "method": "one-sided exact McNemar (policy above floor) on episodes paired by index, Holm across every "
                      "policy, floor and task"}


def floors_lines(result: dict[str, Any]) -> list[str]:
    """What the floors flag: tasks that do not discriminate, policies not above a floor (empty: nothing)."""
    floors = result.get("floors") or {}
    lines = []
    for task, entry in (floors.get("tasks") or {}).items():
        if not entry.get("discriminates"):
            high = ", ".join(f"{k} {f['rate']:.0%}" for k, f in entry["floors"].items()
                             if f["rate"] is not None and f["rate"] >= floors["too_high"])
            lines.append(f"{task}: the floor succeeds too often to discriminate ({high})")
        for run, policy in entry["policies"].items():
            for kind, test in policy["versus"].items():
                if not test.get("above"):
                    lines.append(f"{task}: {run} ({policy['policy']}) is not above the {kind} floor "
                                 f"(p_holm={test['p_holm']:.3g}, {test['policy_only']} vs {test['floor_only']} pairs)")
    return lines


def floors_section(result: dict[str, Any]) -> str:
    """The report's Floors section (nothing without floors)."""
    floors = result.get("floors")
    if not isinstance(floors, dict) or not floors.get("tasks"):
        return ""

    def e(v: Any) -> str:
        return html.escape("" if v is None else str(v), quote=True)

    def rate(v: Any) -> str:
        return "—" if v is None else f"{v:.1%}"

    rows = []
    for task, entry in floors["tasks"].items():
        floor_text = ", ".join(f"{k} {rate(f['rate'])} (n={f['decided']})" for k, f in entry["floors"].items())
        flag = "" if entry.get("discriminates") else ' <span class="badge trust-flagged">does not discriminate</span>'
        for run, policy in entry["policies"].items():
            for kind, test in policy["versus"].items():
                verdict = "above" if test.get("above") else "not above"
                p_holm = f"{test['p_holm']:.3g}"
                rows.append(f'<tr data-task="{e(task)}" data-run="{e(run)}" data-floor="{e(kind)}">'
                            f'<td>{e(task)}{flag}</td><td class="floors">{e(floor_text)}</td><td>{e(run)}</td>'
                            f'<td class="num">{e(rate(policy["rate"]))}</td><td class="num">{e(test["policy_only"])} / '
                            f'{e(test["floor_only"])}</td><td class="num p">{e(p_holm)}</td>'
                            f'<td class="verdict">{e(verdict)} {e(kind)}</td></tr>')
    return ('<section id="floors"><h2>Floors</h2><p class="note">each task\'s no-op and random policies on the same '
            f'episodes; a floor at {floors["too_high"]:.0%} or more leaves the task little to discriminate; a policy '
            'is above a floor when it wins significantly more of their discordant pairs (one-sided exact McNemar, '
            'Holm)</p><table id="floor-table" class="grid"><thead><tr><th>Task</th><th>Floors</th><th>Run</th>'
            '<th>Success rate</th><th>Pairs won / lost</th><th>p (Holm)</th><th>Verdict</th></tr></thead><tbody>'
            + "".join(rows) + "</tbody></table></section>")
