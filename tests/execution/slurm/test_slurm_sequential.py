"""Issues #25 and #57 on the local Slurm cluster: `evalfleet run --backend slurm` of a `stopping:` Experiment is
one runner array whose tasks start their runners once and take each look the driver releases (the shard feed on
the shared folder), decided as the local backend decides (the same comparisons, the same per-episode records);
the served policy's server job is submitted once and serves every look; `evalfleet submit --backend slurm` of it
is one driver job that does the same."""

from __future__ import annotations

import importlib
import json
import os
import re
from pathlib import Path

import pytest

import evalfleet
from evalfleet.backends.slurm.paths import SlurmPaths
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


def test_a_stopping_experiment_is_one_array_of_runners_started_once_deciding_as_local(slurm_cluster, reference,
                                                                                       tmp_path: Path, capsys) -> None:
    exp, local = reference
    out = tmp_path / "slurm"
    capsys.readouterr()
    assert main(["run", str(exp), *SMALL, "--backend", "slurm", "--workers", "2", "--output", str(out),
                 "--no-progress"]) == 0
    said = capsys.readouterr().err
    comparisons, _ = decisions(out)
    assert [(c["policy"], c["verdict"]) for c in comparisons] == [("noisy", "worse")]
    waves = comparisons[0]["stopped_at"] // 5
    assert waves >= 2, "decided at the first look: no later look reached the runners or the server"
    assert decisions(out) == decisions(local)
    assert results_by_episode(out) == results_by_episode(local)
    # One runner array for every look; each task's watchdog started its runner once (#57, must show 2).
    arrays = re.findall(r"slurm: runner array (\d+) \((\d+) tasks, taking the shards the driver releases", said)
    assert len(arrays) == 1 and arrays[0][1] == "2", said
    paths = SlurmPaths(out.absolute())
    statuses = [json.loads(paths.status(task).read_text()) for task in range(2)]
    assert [(s["state"], len(s["attempts"]), s["restarts"]) for s in statuses] == [("completed", 1, 0)] * 2
    assert f"wave {waves}: push-v3/noisy vs expert: worse at {5 * waves} episodes" in said, said
    assert server_starts(out) == 1  # one server job for every look
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


def test_a_task_that_gives_up_ends_the_fed_array_instead_of_leaving_it_waiting(slurm_cluster, monkeypatch,
                                                                               write_experiment, tmp_path: Path,
                                                                               capsys) -> None:
    """Two Runs that never differ, looked at every 2 episodes up to 8; one SIGKILLs its runner at its episode 1 on
    every attempt and the watchdog may not restart it: that task leaves the queue while the feed is open, the
    driver closes the feed, the other task finishes what it took, and the run ends with the Run failed."""
    from evalfleet.experiment.loading import load_experiment
    from evalfleet.experiment.plan import make_plan
    from evalfleet_testkit import PLUGINS_DIR

    plugins = "evalfleet_test_plugins,evalfleet_failure_plugins"
    monkeypatch.setenv("EVALFLEET_PLUGINS", plugins)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(PLUGINS_DIR), os.environ.get("PYTHONPATH")])))
    monkeypatch.syspath_prepend(str(PLUGINS_DIR))  # the jobs inherit the environment; this process plans the Runs
    for module in plugins.split(","):
        importlib.import_module(module)
    run = {"environment": {"type": "test_faulty", "succeed": True}, "task": "toy",
           "rollout_limit": {"num_episodes": 8}}
    probe = write_experiment({"crash": {**run, "policy": {"type": "test_zero"}}}, filename="probe.yaml")
    seed = make_plan(load_experiment(probe, []), workers=1).runs["crash"].episode(1).seed
    path = write_experiment({"base": {**run, "policy": {"type": "test_zero"}, "policy_name": "base"},
                             "crash": {**run, "policy": {"type": "test_zero", "kill_seed": seed},
                                       "policy_name": "crash"}},
                            stopping={"wave": 2, "max_episodes": 8, "compare": {"baseline": "base"}})
    out = tmp_path / "out"
    code = main(["run", str(path), *SMALL, "--backend", "slurm", "--workers", "2", "--shard-size", "1",
                 "--max-restarts", "0", "--output", str(out), "--no-progress"])
    said = capsys.readouterr().err
    assert code != 0, said
    assert "ended while the driver could still release shards" in said, said
    result = json.loads((out / "experiment_result.json").read_text())
    assert result["runs"]["crash"]["status"] == "failed", result["runs"]["crash"]
    assert not any(result["runs"][r]["episodes_recorded"] >= 8 for r in ("base", "crash"))  # no look past it


def test_a_fixed_experiment_of_many_shards_starts_one_runner_per_array_task(slurm_cluster, write_experiment,
                                                                            tmp_path: Path) -> None:
    """#57, must show 2, fixed N on Slurm: 16 one-episode shards on a 2-task array; each task's watchdog started
    its runner once, and that runner ran every shard the task took (the pid in each shard's timings file)."""
    short = {"type": "metaworld", "task": "reach-v3", "max_steps": 60}
    path = write_experiment({name: {"environment": short, "policy": {"type": "metaworld_expert"},
                                    "rollout_limit": {"num_episodes": 8}} for name in ("a", "b")})
    out = tmp_path / "out"
    assert main(["run", str(path), *SMALL, "--backend", "slurm", "--workers", "2", "--shard-size", "1",
                 "--output", str(out), "--no-progress"]) == 0
    assert len(results_by_episode(out)) == 16
    paths = SlurmPaths(out.absolute())
    statuses = [json.loads(paths.status(task).read_text()) for task in range(2)]
    started = [a["pid"] for s in statuses for a in s["attempts"]]
    assert len(started) == 2 and all(s["restarts"] == 0 for s in statuses)
    ran_shards = {int(p.stem.rsplit("-", 1)[1]) for p in out.glob("*/timings/*.json")}
    assert len(list(out.glob("*/timings/*.json"))) == 16 and ran_shards <= set(started), (ran_shards, started)
