"""Issue #25 on the local Slurm cluster: `evalfleet run --backend slurm` of a `stopping:` Experiment runs in
waves, one runner array per wave of exactly the shards the undecided Runs need, decided as the local backend
decides (the same comparisons, the same per-episode records); the served policy's server job is submitted once
and serves every wave; `evalfleet submit --backend slurm` of it is one driver job that does the same."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import evalfleet
from evalfleet.cli import main
from evalfleet_sequential import SERVED, decisions, server_starts
from evalfleet_testkit import results_by_episode

SMALL = ["slurm.time=10", "slurm.cpus_per_task=1", "slurm.server_cpus=1"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The served sequential Experiment and its local run, which every Slurm run here must equal."""
    tmp = tmp_path_factory.mktemp("sequential")
    exp = tmp / "sequential_served.yaml"
    exp.write_text(SERVED)
    local = tmp / "local"
    assert evalfleet.run(exp, output=local, workers=2, progress=False).ok
    return exp, local


def test_a_stopping_experiment_runs_in_waves_as_local_decides(slurm_cluster, reference, tmp_path: Path, capsys) -> None:
    exp, local = reference
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


def test_submit_of_a_stopping_experiment_is_one_driver_job_deciding_as_local(slurm_cluster, reference,
                                                                            tmp_path: Path, capsys) -> None:
    """`evalfleet submit --backend slurm` returns at once with the driver job's id; the driver runs the waves
    inside the cluster and finalizes: the same comparisons and per-episode records as the local run."""
    import time

    from evalfleet.backends.slurm.commands import queued

    exp, local = reference
    out = tmp_path / "submitted"
    capsys.readouterr()
    assert main(["submit", str(exp), *SMALL, "--backend", "slurm", "--output-dir", str(out)]) == 0
    said = capsys.readouterr().out
    job = re.search(r"submitted: driver job (\d+)", said)
    assert job, said
    while queued([job[1]]):  # the driver's end, as squeue says it
        time.sleep(1)  # polling the queue, not guessing a duration
    assert (out / "experiment_result.json").exists(), (out / ".evalfleet/slurm/logs/driver.log").read_text()
    assert decisions(out) == decisions(local)
    assert results_by_episode(out) == results_by_episode(local)
