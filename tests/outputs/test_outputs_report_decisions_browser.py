"""Must-show 5 of issue #25: the report shows the sequential decisions, their valid intervals and the ranking,
in a real browser (Debian chromium via Playwright), opened from disk; one browser launch."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
from outputs_helpers import record, write_jsonl, write_status
from test_outputs_report_browser import open_report

from evalfleet.outputs.collect import collect
from evalfleet.outputs.finalize import write_report

TASKS = ("reach", "push")
STRENGTHS = {"strong": 1.5, "middle": 0.0, "weak": -1.5}  # log-odds, the same on both tasks
EPISODES = 120
HOSTILE = "<script>window.pwned = 1</script>"
METHOD = ("group-sequential exact binomial on discordant pairs, Lan-DeMets O'Brien-Fleming spending; Holm across "
          "3 comparisons")
CS = "Beta(1/2,1/2) confidence sequence"


def write_runs(root: Path) -> None:
    """Three policies on two tasks, episodes paired by index: logit P(success) = strength + the episode's
    difficulty, drawn once per (task, episode) from a fixed seed."""
    rng = np.random.default_rng(7)
    for task in TASKS:
        difficulty = rng.normal(0.0, 1.0, EPISODES)
        for policy, strength in STRENGTHS.items():
            run = f"{task}_{policy}"
            won = rng.random(EPISODES) < 1 / (1 + np.exp(-(strength + difficulty)))
            write_jsonl(root / run / "parts" / "s.jsonl",
                        [record(run, e, "success" if won[e] else "failure", task=task, policy=policy)
                         for e in range(EPISODES)])
            write_status(root / run, planned=EPISODES, state="completed", task=task, policy=policy)


def comparison(task: str, policy: str, verdict: str, **fields) -> dict:
    return {"task": task, "policy": policy, "baseline": "middle", "runs": [f"{task}_{policy}", f"{task}_middle"],
            "verdict": verdict, "max_episodes": 200, "interval_method": "repeated confidence interval at the stop",
            "alpha": 0.05, "method": METHOD, **fields}


def add_decisions(out: Path) -> dict:
    """S's `comparisons` and a Run's `stopping`, in the shape issue #25 fixes, beside the real Runs' result."""
    path = out / "experiment_result.json"
    result = json.loads(path.read_text())
    result["comparisons"] = [
        comparison("reach", "strong", "better", stopped_at=30, pairs=30, discordant=12, policy_only=11,
                   baseline_only=1, statistic=2.89, difference=0.333, interval=[0.081, 0.586]),
        comparison("reach", "weak", "worse", stopped_at=50, pairs=50, discordant=15, policy_only=2, baseline_only=13,
                   statistic=-2.84, difference=-0.22, interval=[-0.41, -0.03]),
        comparison("push", "weak", "undecided", stopped_at=200, pairs=200, discordant=40, policy_only=17,
                   baseline_only=23, statistic=-0.95, difference=-0.03, interval=[-0.11, 0.05]),
        comparison("push", HOSTILE, "undecided", stopped_at=200, pairs=200, discordant=0, policy_only=0,
                   baseline_only=0, statistic=0.0, difference=0.0, interval=[-0.02, 0.02]),
    ]
    result["runs"]["reach_strong"]["stopping"] = {"stopped_at": 30, "max_episodes": 200, "reason": "compare decided",
                                                  "interval": [0.52, 0.93], "interval_method": CS}
    path.write_text(json.dumps(result))
    return result


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_report_shows_decisions_valid_intervals_and_ranking(chromium, tmp_path: Path):
    out = tmp_path / "out"
    write_runs(out)
    collect([str(out)], str(out))
    result = add_decisions(out)
    ranking = result["ranking"]  # made by collect from the records: the real ranking
    assert [p["policy"] for p in ranking["policies"]] == ["strong", "middle", "weak"]
    assert all(p["rank_interval"] == [p["rank"], p["rank"]] for p in ranking["policies"])
    write_report(out)
    context, page, seen = open_report(chromium, out / "index.html")
    try:
        assert page.is_visible("#decisions-section") and page.is_visible("#ranking-section")
        rows = page.eval_on_selector_all(
            "#decisions tbody tr", "rows => rows.map(r => [r.dataset.task, r.dataset.policy, r.dataset.verdict, "
            "Array.from(r.children).map(c => c.innerText.trim())])")
        by_key = {(task, policy): (verdict, cells) for task, policy, verdict, cells in rows}
        verdict, cells = by_key[("reach", "strong")]
        assert verdict == "better" and cells[1].startswith("strong vs middle") and cells[2] == "better"
        assert cells[3] == "30 / 200" and cells[4] == "12 (11 / 1)"
        assert cells[5].startswith("+33.3 points [+8.1, +58.6]")
        assert "repeated confidence interval at the stop" in cells[5]
        assert page.inner_text(".decisions-method") == f"Method: {METHOD}"  # one method: said once
        verdict, cells = by_key[("reach", "weak")]
        assert verdict == "worse" and cells[2] == "worse" and cells[5].startswith("-22.0 points [-41.0, -3.0]")
        verdict, cells = by_key[("push", "weak")]
        assert verdict == "undecided" and cells[3] == "200 / 200"
        more = cells[2].splitlines()[-1]
        assert more.startswith("≈ ") and more.endswith(" more episodes would likely decide it")
        assert int(more.split()[1]) > 0
        # No discordance: nothing to estimate from, said as a dash; the hostile name is text, never run.
        verdict, cells = by_key[("push", HOSTILE)]
        assert cells[1].startswith(HOSTILE) and cells[2].splitlines()[-1] == "—"
        assert page.evaluate("typeof window.pwned") == "undefined"

        # The stopping Run's rate carries its confidence sequence, labelled; the others say Wilson.
        stopped = page.inner_text("#summary tr[data-run='reach_strong'] td.rate-cell")
        assert "[52.0–93.0]" in stopped and "stopped at 30 / 200: compare decided" in stopped and CS in stopped
        fixed = page.inner_text("#summary tr[data-run='reach_middle'] td.rate-cell")
        assert "Wilson" in fixed and "confidence sequence" not in fixed

        ranks = page.eval_on_selector_all(
            "#ranking tbody tr", "rows => rows.map(r => [r.dataset.policy, r.querySelector('.rank').innerText, "
            "r.querySelector('.strength').innerText, r.querySelector('.mean-success').innerText, "
            "r.querySelector('svg.strength-bar') !== null])")
        assert [(p, rank) for p, rank, *_ in ranks] == [("strong", "1"), ("middle", "2"), ("weak", "3")]
        for (policy, _, strength, mean, has_bar), entry in zip(ranks, ranking["policies"]):
            lo, hi = entry["interval"]
            assert strength == f"{entry['strength']:.2f} [{lo:.2f}, {hi:.2f}]" and has_bar
            assert mean == f"{100 * entry['mean_success']:.1f}%"
        assert "reach" in page.inner_text(".ranking-method") and "Bradley-Terry" in page.inner_text(".ranking-method")
        shot = tmp_path / "decisions.png"
        page.locator("#decisions-section").scroll_into_view_if_needed()
        page.screenshot(path=str(shot), full_page=True)
        width, height = png_size(shot)
        assert width >= 1000 and height >= 800 and shot.stat().st_size > 20_000
    finally:
        context.close()
    assert seen["pageerror"] == [] and seen["console"] == [], seen
    assert seen["blocked"] == [] and all(u.startswith("file://") for u in seen["requests"]), seen["requests"]
