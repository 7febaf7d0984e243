"""`evalfleet sensitivity`: what is pooled is said; `--per-task` gives one panel per task; slopes are explained."""

from __future__ import annotations

import json
import math
from pathlib import Path

from analysis_synth import assert_real_image, write_run
from evalfleet.cli import main

# Opposite effects on two tasks: pooled, they cancel; per task, each sign is recovered.
EFFECT = {"lift": (0.9, -0.7), "push": (0.2, +0.7)}
POLICIES = ("expert", "noisy")


def two_tasks(out: Path) -> Path:
    mass = {"gripper.object_mass": lambda rng: float(rng.uniform(0.0, 1.0))}
    for t, (task, (a, b)) in enumerate(EFFECT.items()):
        for policy in POLICIES:
            shift = 0.0 if policy == "expert" else -0.05
            write_run(out, f"{task}_{policy}", task=task, policy=policy, task_index=t, episodes=500,
                      success_prob=lambda v, a=a, b=b, s=shift: a + s + b * v["gripper.object_mass"],
                      variations=mass, outcome_seed=7 * t + len(policy))
    return out


def test_pooled_is_said_in_the_print_the_title_and_the_json(tmp_path: Path, capsys) -> None:
    out = two_tasks(tmp_path / "out")
    png = tmp_path / "pooled.png"
    assert main(["sensitivity", str(out), "--factors", "object_mass", "--output", str(png)]) == 0
    text = capsys.readouterr().out
    assert "curves: 2 tasks pooled into one curve per policy" in text and "--per-task" in text
    assert "log-odds of success per unit of gripper.object_mass; odds x e^slope per unit" in text
    data = json.loads(png.with_suffix(".json").read_text())
    [panel] = data["panels"]
    assert panel["pooled"] is True and panel["tasks"] == ["lift", "push"] and data["per_task"] is False
    assert "(2 tasks pooled: lift, push)" in text


def test_per_task_one_panel_per_task_policies_overlaid(tmp_path: Path, capsys) -> None:
    out = two_tasks(tmp_path / "out")
    png = tmp_path / "per_task.png"
    assert main(["sensitivity", str(out), "--factors", "object_mass", "--per-task", "--output", str(png)]) == 0
    text = capsys.readouterr().out
    assert "curves: one panel per task" in text
    data = json.loads(png.with_suffix(".json").read_text())
    assert data["per_task"] is True
    panels = {p["task"]: p for p in data["panels"]}
    assert set(panels) == {"lift", "push"} and all(p["pooled"] is False for p in panels.values())
    assert_real_image(png, (2 * 540, 420))  # two panels side by side
    for task, panel in panels.items():
        assert set(panel["policies"]) == set(POLICIES)  # overlaid in the task's panel
        for policy, entry in panel["policies"].items():
            assert entry["n"] == 500
            fit = entry["fit"]
            sign = math.copysign(1, EFFECT[task][1])
            assert sign * fit["slope_ci"][0] > 0, (task, policy, fit["slope_ci"])  # the task's own sign
            # The printed line names the task and the odds ratio e^slope.
            line = next(x for x in text.splitlines() if f"/ {policy} (task {task})" in x)
            assert f"(x{math.exp(fit['slope']):.3g})" in line
