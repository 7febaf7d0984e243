"""#54 in a real browser (Debian chromium via Playwright), opened from disk: a real Meta-World output whose Run
records every other episode's trajectory (`episodes: every_n`, every_n 2) with a camera. The episode table links
each recorded episode's frames and camera video (playable) and no other episode's; "plot" draws an SVG whose
series are the action dimensions and the progress score, with one point per step (or MAX_POINTS for a longer
episode), the values of the Parquet file, and a last success marker that is the record's; a `<script>` policy
name is shown as text; no console error, nothing fetched beyond the folder."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from evalfleet_testkit import ROOT
from test_outputs_report_browser import open_report, visible_rows

import evalfleet
from evalfleet.outputs.report_trajectories import MAX_POINTS
from evalfleet.rollout.trajectory import read_trajectory

HOSTILE = "<script>window.pwned = 1</script>"
EPISODES, MAX_STEPS = 4, 400  # above MAX_POINTS: the failing episode runs to the limit and is sampled


def alternating_expert():
    """The example's noisy expert, clean in every episode but the third (heavy noise: it fails and runs to the
    step limit); one worker and one env run the episodes in order."""
    spec = importlib.util.spec_from_file_location("evaluate_during_training",
                                                  ROOT / "examples" / "evaluate_during_training.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)

    class Alternating(example.NoisyExpert):
        resets = 0

        def reset(self, episode_seed: int, env_id: int = 0) -> None:
            self.noise = 1.0 if self.resets % EPISODES == 2 else 0.0
            self.resets += 1
            super().reset(episode_seed, env_id)

    return Alternating(0.0)


@pytest.fixture(scope="module")
def recorded_output(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("traj") / "out"
    evalfleet.evaluate(alternating_expert(), str(ROOT / "examples" / "quickstart.yaml"), runs=["push_expert"],
                       workers=1, output=out, log=lambda _: None, policy_name=HOSTILE,
                       overrides=[f"shared.rollout_limit.num_episodes={EPISODES}",
                                  f"shared.environment.max_steps={MAX_STEPS}",
                                  "shared.recording.trajectories={episodes: every_n, every_n: 2, keys: [action, "
                                  "success, done, progress], cameras: [corner], width: 32}"])
    return out


def records(out: Path) -> dict[int, dict]:
    lines = (out / "push_expert" / "episode_results.jsonl").read_text().splitlines()
    return {rec["episode"]: rec for rec in map(json.loads, lines)}


def row_of(page, episode: int):
    return page.locator(f"#episodes tbody tr[data-row='{episode}']")


def test_recorded_episodes_are_linked_and_plotted(chromium, recorded_output: Path) -> None:
    out, recs = recorded_output, records(recorded_output)
    assert [recs[e]["status"] for e in (0, 2)] == ["success", "failure"]  # both endings are plotted
    assert recs[0]["episode_length"] < MAX_POINTS < recs[2]["episode_length"] == MAX_STEPS
    context, page, seen = open_report(chromium, out / "index.html")
    try:
        # The table: a trajectory link for the recorded episodes (0 and 2), none for the others.
        cells = {int(r["Episode"]): r["Trajectory"] for r in visible_rows(page)}
        assert {e for e, text in cells.items() if text} == {0, 2} and "trajectory" not in recs[1]
        for e in (0, 2):
            frames = row_of(page, e).locator("a.frames").get_attribute("href")
            assert frames == f"push_expert/trajectories/episode_{e:06d}.arrow" and (out / frames).is_file()
            camera = row_of(page, e).locator("a.camera").get_attribute("href")
            assert camera == f"push_expert/{recs[e]['trajectory']['videos']['corner']}" and (out / camera).is_file()
        page.check("#f-traj")
        assert sorted(int(r["Episode"]) for r in visible_rows(page)) == [0, 2]

        # Its camera video plays inline, like the record videos.
        row_of(page, 2).locator("button.play-traj").click()
        assert page.get_attribute("tr.traj-player video", "src") == "push_expert/trajectories/corner/episode_000002.mp4"

        for e in (0, 2):
            rec = recs[e]
            row_of(page, e).locator("button.plot").click()
            svg = page.wait_for_selector(f"tr.plot-row div.trajectory-plot[data-row='{e}'] svg.trajectory")
            drawn = svg.eval_on_selector_all("g.series", """gs => gs.map(g => ({
                name: g.dataset.name, points: Number(g.dataset.points),
                counted: Array.from(g.querySelectorAll('polyline'))
                    .reduce((n, p) => n + p.getAttribute('points').trim().split(/\\s+/).length, 0)}))""")
            table, _ = read_trajectory(out / "push_expert" / rec["trajectory"]["frames"])
            dims = len(table.column("action")[0].as_py())
            points = min(rec["episode_length"], MAX_POINTS)
            assert [d["name"] for d in drawn] == [f"action {k}" for k in range(dims)] + ["progress"]
            assert all(d["points"] == d["counted"] == points for d in drawn), drawn
            assert svg.get_attribute("data-steps") == str(rec["episode_length"])
            final = svg.query_selector("circle.final-success")
            assert final.get_attribute("data-success") == ("1" if rec["success"] else "0")
            assert int(final.get_attribute("data-step")) == rec["episode_length"] - 1
            spans = [int(s.get_attribute("data-step")) for s in svg.query_selector_all("rect.success-span[data-step]")]
            assert spans == ([rec["episode_length"] - 1] if rec["success"] else [])
            assert svg.query_selector_all("line.done-mark[data-step]")[-1].get_attribute("data-step") == \
                str(rec["episode_length"] - 1)
            ticks = [t.text_content() for t in svg.query_selector_all("text.x-tick")]
            assert ticks[0] == "0" and all(0 <= int(t) < rec["episode_length"] for t in ticks)
            legend = [t.text_content() for t in svg.query_selector_all("text.legend-label")]
            assert legend == [d["name"] for d in drawn] + ["success held", "done"]
            caption = page.inner_text(f"div.trajectory-plot[data-row='{e}'] .plot-caption")
            assert HOSTILE in caption and f"episode {e}" in caption  # a policy name as text, never markup

            # The progress line is the recorded progress, step for step (or at the sampled steps).
            data = page.evaluate(f"window.__evalfleet_trajectories['report_episodes/trajectories/0000-{e:06d}.js']")
            progress = np.array(table.column("next.progress").to_pylist(), dtype=float)
            np.testing.assert_allclose(data["progress"], progress[data["x"]], rtol=1e-3, atol=1e-4)
            assert data["progress"][-1] == pytest.approx(rec["progress"]["overall_score"], rel=1e-3, abs=1e-4)
        assert page.evaluate("window.pwned") is None
    finally:
        context.close()
    assert seen["pageerror"] == [] and seen["console"] == [], seen
    assert seen["blocked"] == [] and all(u.startswith("file://") for u in seen["requests"]), seen["requests"]
    assert any(u.endswith("report_episodes/trajectories/0000-000002.js") for u in seen["requests"])
