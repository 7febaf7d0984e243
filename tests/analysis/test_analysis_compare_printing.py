"""`evalfleet compare`'s table at 80 columns and through a pipe: names whole, the significance column headed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from evalfleet.rollout.records import EpisodeRecord, RecordWriter

TASKS = ("pick-place-v3-long-task-name", "push-v3")
POLICIES = ("expert_baseline_policy", "expert_noisy_candidate", "expert_other_candidate")


def write_arms(out: Path) -> list[str]:
    runs = []
    for t, task in enumerate(TASKS):
        for p, policy in enumerate(POLICIES):
            run = f"{task}_{policy}"
            runs.append(run)
            with RecordWriter(out / run / "episode_results.jsonl", fsync=False) as w:
                for e in range(40):
                    ok = (e * (p + 1) + t) % 5 != 0 if p == 0 else (e + p) % (2 + p) == 0
                    w.append(EpisodeRecord(run=run, task=task, policy=policy, episode=e, seed=1000 + e,
                                           status="success" if ok else "failure", success=ok, episode_length=10,
                                           duration_s=0.1))
    return runs


def compare_text(out: Path, columns: int, tmp_path: Path) -> str:
    env = {**os.environ, "COLUMNS": str(columns)}
    proc = subprocess.run([sys.executable, "-m", "evalfleet.cli", "compare", str(out), "--baseline", POLICIES[0],
                           "--output", str(tmp_path / f"cmp{columns}.json")],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_compare_at_80_columns_keeps_names_whole(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_arms(out)
    text = compare_text(out, 80, tmp_path)
    assert "…" not in text
    lines = text.splitlines()
    for task in (*TASKS, "(pooled)"):
        for policy in POLICIES[1:]:
            assert f"{task} / {policy}" in lines, (task, policy, text)  # one block per comparison, head whole
    assert all(len(line) <= 80 for line in lines if not line.startswith("wrote ")), text
    assert text.count("significant: yes") + text.count("significant: no") == 2 * (len(TASKS) + 1)
    assert "Holm-corrected p < 0.05" in text


def test_compare_wide_has_a_header_for_every_column(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_arms(out)
    lines = compare_text(out, 250, tmp_path).splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("task "))
    assert lines[header].split("  ")[-1].strip() == "significant"
    rule, rows = lines[header + 1], lines[header + 2: header + 2 + 2 * (len(TASKS) + 1)]
    # Every row has a value under the significance column, and the names appear whole.
    start = rule.rindex(" ") + 1
    assert all(row[start:].strip() in ("yes", "no") for row in rows), rows
    for policy in POLICIES[1:]:
        assert sum(row.split()[1] == policy for row in rows) == len(TASKS) + 1
