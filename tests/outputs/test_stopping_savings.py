"""What sequential stopping saved against the fixed-N plan (issue #57), from experiment_result.json's Run entries:
episodes counted, runner-seconds and wall seconds with the plan's estimated from each stopping Run's mean episode
duration times its cap; and the line the report shows under its Decisions."""

from __future__ import annotations

from evalfleet.outputs.report_decisions import savings_line
from evalfleet.outputs.stopping_result import stopping_savings


def run(recorded: int, mean_s: float, span: tuple[float, float], cap: int | None = None) -> dict:
    entry = {"episodes_recorded": recorded,
             "timings": {"total_duration_s": recorded * mean_s, "mean_duration_s": mean_s,
                         "first_timestamp": span[0], "last_timestamp": span[1]}}
    if cap is not None:
        entry["stopping"] = {"stopped_at": recorded, "max_episodes": cap}
    return entry


def test_episodes_runner_seconds_and_wall_against_the_fixed_n_plan():
    runs = {"expert": run(20, 0.5, (100.0, 130.0), cap=80), "noisy": run(20, 1.5, (100.0, 140.0), cap=80),
            "fixed": run(40, 1.0, (100.0, 150.0))}  # a fixed-N Run counts the same in both
    saved = stopping_savings(runs)
    assert saved["episodes"] == {"used": 80, "fixed_n": 200, "saved": 120, "ratio": 0.4}
    # 20 × 0.5 + 20 × 1.5 + 40 = 80 s used; 80 × 0.5 + 80 × 1.5 + 40 = 200 s for the plan
    assert saved["runner_seconds"] == {"used": 80.0, "fixed_n_estimate": 200.0, "ratio": 0.4}
    assert saved["wall_seconds"] == {"used": 50.0, "fixed_n_estimate": 125.0, "ratio": 0.4}
    line = savings_line(saved)
    assert "Against the fixed-N plan: 80 of 200 episodes (0.40×); 80.0 of 200.0 (est.) runner-seconds (0.40×); " \
           "50.0 of 125.0 (est.) wall s (0.40×)" in line


def test_nothing_without_a_stopping_run_or_durations():
    assert stopping_savings({"fixed": run(40, 1.0, (0.0, 10.0))}) is None
    assert stopping_savings({"a": {"episodes_recorded": 3, "stopping": {"max_episodes": 9}}}) is None
    assert stopping_savings({}) is None
    assert savings_line(None) == "" and savings_line({"episodes": "x"}) == ""
