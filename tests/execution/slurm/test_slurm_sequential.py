"""Issue #25 on the local Slurm cluster: `evalfleet run --backend slurm` of a `stopping:` Experiment runs in
waves, one runner array per wave of exactly the shards the undecided Runs need, decided as the local backend
decides (the same comparisons, the same per-episode records); the served policy's server job is submitted once
and serves every wave. `evalfleet submit --backend slurm` of it is refused (test_slurm_render.py)."""

from __future__ import annotations

import re
from pathlib import Path

import evalfleet
from evalfleet.cli import main
from evalfleet_sequential import SERVED, decisions, server_starts
from evalfleet_testkit import results_by_episode

SMALL = ["slurm.time=10", "slurm.cpus_per_task=1", "slurm.server_cpus=1"]


def test_a_stopping_experiment_runs_in_waves_as_local_decides(slurm_cluster, tmp_path: Path, capsys) -> None:
    exp = tmp_path / "sequential_served.yaml"
    exp.write_text(SERVED)
    local = tmp_path / "local"
    assert evalfleet.run(exp, output=local, workers=2, progress=False).ok
    out = tmp_path / "slurm"
    capsys.readouterr()
    assert main(["run", str(exp), *SMALL, "--backend", "slurm", "--workers", "2", "--output", str(out),
                 "--no-progress"]) == 0
    said = capsys.readouterr().err
    comparisons, _ = decisions(out)
    assert [(c["policy"], c["verdict"]) for c in comparisons] == [("noisy", "worse")]
    waves = comparisons[0]["stopped_at"] // 5
    assert waves >= 2, "decided in the first wave: no later wave reached the server"
    assert decisions(out) == decisions(local)
    assert results_by_episode(out) == results_by_episode(local)
    # One runner array per wave, each of that wave's shards only: 5 episodes of each of the two Runs.
    arrays = re.findall(r"slurm: runner array (\d+) \((\d+) tasks, \d+ shards, (\d+) episodes\)", said)
    assert [int(e) for _, _, e in arrays] == [10] * waves, said
    assert len({a for a, _, _ in arrays}) == waves
    assert f"wave {waves}: push-v3/noisy vs expert: worse at {5 * waves} episodes" in said, said
    assert server_starts(out) == 1  # one server job for every wave
    assert said.count("slurm: server jobs ") == 1, said
