"""Must-show 5 of issue #25: the report shows the sequential decisions, their valid intervals and the ranking,
in a real browser (Debian chromium via Playwright), opened from disk; one browser launch. The output folder is a
real sequential Experiment's (Meta-World, 3 policies x 2 tasks, wave 2, cap 12), its comparisons and ranking made by
`evalfleet.run`; only the verdict it cannot give (`better`: its baseline is the best policy) and a hostile policy
name are constructed entries beside the real ones."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from test_outputs_report_browser import open_report

import evalfleet
from evalfleet.outputs.finalize import write_report

CAP = 12
HOSTILE = "<script>window.pwned = 1</script>"
CS = "Beta(1/2,1/2) confidence sequence"


def run(task: str, policy: str, noise: float | None) -> str:
    noisy = ("\n    variations: {robot.action_noise: {enabled: true, distribution: uniform, "
             f"low: {noise}, high: {noise}}}}}") if noise is not None else ""
    return (f"  {task}_{policy}:\n    environment: {{type: metaworld, task: {task}-v3, max_steps: 100}}\n"
            f"    policy_name: {policy}{noisy}")


# Three policies on two tasks: the expert (the baseline), a shaky expert (strong action noise: worse on push,
# decided before the cap; fewer discordant pairs on reach, undecided) and a steady one (faint noise: never
# discordant, undecided at the cap).
EXPERIMENT = f"""\
name: decisions
stopping:
  wave: 2
  max_episodes: {CAP}
  compare: {{baseline: expert}}
shared:
  policy: {{type: metaworld_expert}}
  rollout_limit: {{num_episodes: {CAP}}}
runs:
""" + "\n".join(run(task, policy, noise) for task in ("reach", "push")
                for policy, noise in (("expert", None), ("shaky", 1.5), ("steady", 0.05))) + "\n"


def add_constructed(out: Path) -> dict:
    """The baseline is the best policy here, so a real run gives no `better`: one constructed `better` entry
    (and one with a hostile policy name) beside the real comparisons, in the shape the real ones have."""
    path = out / "experiment_result.json"
    result = json.loads(path.read_text())
    real = result["comparisons"][0]
    shape = {k: real[k] for k in ("max_episodes", "interval_method", "alpha", "margin", "method")}
    result["comparisons"] += [
        {**shape, "task": "reach-v3", "policy": "bold", "baseline": "expert", "runs": ["reach_bold", "reach_expert"],
         "verdict": "better", "stopped_at": 8, "pairs": 8, "discordant": 8, "policy_only": 8, "baseline_only": 0,
         "statistic": 2.83, "difference": 1.0, "interval": [0.081, 1.0]},
        {**shape, "task": "push-v3", "policy": HOSTILE, "baseline": "expert", "runs": ["push_x", "push_expert"],
         "verdict": "undecided", "stopped_at": CAP, "pairs": CAP, "discordant": 0, "policy_only": 0,
         "baseline_only": 0, "statistic": 0.0, "difference": 0.0, "interval": [-0.44, 0.44]},
    ]
    path.write_text(json.dumps(result))
    return result


def points(x: float) -> str:
    return f"{100 * x:+.1f}"


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_report_shows_decisions_valid_intervals_and_ranking(chromium, tmp_path: Path):
    experiment = tmp_path / "decisions.yaml"
    experiment.write_text(EXPERIMENT)
    out = tmp_path / "out"
    assert evalfleet.run(experiment, output=out, workers=2, progress=False).ok
    comparisons = json.loads((out / "experiment_result.json").read_text())["comparisons"]
    real = {(c["task"], c["policy"]): c for c in comparisons}
    assert {k: c["verdict"] for k, c in real.items()} == {
        ("push-v3", "shaky"): "worse", ("push-v3", "steady"): "undecided",
        ("reach-v3", "shaky"): "undecided", ("reach-v3", "steady"): "undecided"}
    worse = real[("push-v3", "shaky")]
    assert worse["stopped_at"] < CAP and worse["interval"][1] < 0
    result = add_constructed(out)
    ranking = result["ranking"]  # made by collect from the real records
    assert [p["policy"] for p in ranking["policies"]][-1] == "shaky"
    write_report(out)
    context, page, seen = open_report(chromium, out / "index.html")
    try:
        assert page.is_visible("#decisions-section") and page.is_visible("#ranking-section")
        rows = page.eval_on_selector_all(
            "#decisions tbody tr", "rows => rows.map(r => [r.dataset.task, r.dataset.policy, r.dataset.verdict, "
            "Array.from(r.children).map(c => c.innerText.trim())])")
        by_key = {(task, policy): (verdict, cells) for task, policy, verdict, cells in rows}
        assert set(real) | {("reach-v3", "bold"), ("push-v3", HOSTILE)} == set(by_key)
        verdict, cells = by_key[("push-v3", "shaky")]
        assert verdict == "worse" and cells[1].startswith("shaky vs expert") and cells[2] == "worse"
        assert cells[3] == f"{worse['stopped_at']} / {CAP}"
        assert cells[4] == f"{worse['discordant']} ({worse['policy_only']} / {worse['baseline_only']})"
        lo, hi = worse["interval"]
        assert cells[5].startswith(f"{points(worse['difference'])} points [{points(lo)}, {points(hi)}]")
        assert worse["interval_method"] in cells[5] and "anytime-valid" in cells[5]
        assert page.inner_text(".decisions-method") == f"Method: {worse['method']}"  # one method: said once
        verdict, cells = by_key[("reach-v3", "bold")]
        assert verdict == "better" and cells[2] == "better" and cells[3] == f"8 / {CAP}"
        # Undecided with discordant pairs: how many more episodes would likely decide it.
        verdict, cells = by_key[("reach-v3", "shaky")]
        assert verdict == "undecided" and cells[3] == f"{CAP} / {CAP}" and real[("reach-v3", "shaky")]["discordant"]
        more = cells[2].splitlines()[-1]
        assert more.startswith("≈ ") and more.endswith(" more episodes would likely decide it")
        assert int(more.split()[1]) > 0
        # No discordance: nothing to estimate from, said as a dash; the hostile name is text, never run.
        verdict, cells = by_key[("push-v3", "steady")]
        assert verdict == "undecided" and cells[2].splitlines()[-1] == "—"
        verdict, cells = by_key[("push-v3", HOSTILE)]
        assert cells[1].startswith(HOSTILE) and cells[2].splitlines()[-1] == "—"
        assert page.evaluate("typeof window.pwned") == "undefined"

        # Every stopping Run's rate carries its confidence sequence, labelled, and where it stopped.
        stop = result["runs"]["push_shaky"]["stopping"]
        stopped = page.inner_text("#summary tr[data-run='push_shaky'] td.rate-cell")
        lo, hi = stop["interval"]
        assert f"[{100 * lo:.1f}–{100 * hi:.1f}]" in stopped and CS in stopped
        assert f"stopped at {worse['stopped_at']} / {CAP}" in stopped and stop["reason"] in stopped
        capped = page.inner_text("#summary tr[data-run='push_expert'] td.rate-cell")
        assert f"stopped at {CAP} / {CAP}" in capped and CS in capped

        ranks = page.eval_on_selector_all(
            "#ranking tbody tr", "rows => rows.map(r => [r.dataset.policy, r.querySelector('.rank').innerText, "
            "r.querySelector('.strength').innerText, r.querySelector('.mean-success').innerText, "
            "r.querySelector('svg.strength-bar') !== null])")
        assert [(p, rank.splitlines()[0]) for p, rank, *_ in ranks] == [(p["policy"], str(p["rank"]))
                                                                        for p in ranking["policies"]]
        for (_, rank, *_), entry in zip(ranks, ranking["policies"]):  # expert and steady tie: ranks 1-2
            lo, hi = entry["rank_interval"]
            assert (f"ranks {lo}–{hi}" in rank) == (lo != hi)
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
