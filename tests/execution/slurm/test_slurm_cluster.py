"""Issue #24 on the local single-node Slurm cluster (`slurm_cluster`, scripts/slurm-local.sh; skipped, saying
why, only where it cannot start): every dry-run script passes `sbatch --test-only`; `run --backend slurm` of
two Runs (one served) gives the per-episode records `--backend local` gives; a cancelled array task shows in
run_status.json and experiment_result.json with its job id and state, and `--resume` completes the folder with
nothing lost or duplicated; a task killed for memory shows with Slurm's OUT_OF_MEMORY."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalfleet.cli import main
from evalfleet.backends.slurm.render import read_jobs
from evalfleet.backends.slurm.paths import SlurmPaths

TIMING = ("timestamp", "duration_s", "policy_latency_ms")  # what differs between any two runs of one Experiment


def write(tmp_path: Path, runs: dict[str, Any], episodes: int, name: str = "slurm_tiny", **top: Any) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "seed": 0, "shared": {"rollout_limit": {"num_episodes": episodes}},
                                    **top, "runs": runs}, sort_keys=False))
    return path


EXPERT = {"environment": {"type": "metaworld", "task": "push-v3"}, "policy": {"type": "metaworld_expert"}}
SERVED = {"environment": {"type": "metaworld", "task": "push-v3"},
          "policy": {"type": "openpi_remote", "serve": {"type": "metaworld_expert"}, "allow_unauthenticated": True}}
SMALL = ["slurm.time=10", "slurm.cpus_per_task=1", "slurm.server_cpus=1"]


def records(out: Path, run: str) -> dict[int, dict[str, Any]]:
    lines = (out / run / "episode_results.jsonl").read_text().splitlines()
    got: dict[int, dict[str, Any]] = {}
    for line in lines:
        rec = {k: v for k, v in json.loads(line).items() if k not in TIMING}
        assert rec["episode"] not in got, f"episode {rec['episode']} of {run} recorded twice"
        got[rec["episode"]] = rec
    return got


def assert_same_as_local(on_slurm: Path, local: Path, run: str) -> list[dict[str, Any]]:
    """The records that count equal `--backend local`'s but for `attempt`: an episode a server's move hit is
    recorded `server_lost` at its attempt and played again as the next (rollout/inflight.py), whether one was in
    flight when the server moved depends on timing. Returns those superseded error records."""
    got, want = records(on_slurm, run), records(local, run)
    assert all(r["status"] in ("success", "failure") for r in got.values()), got
    assert {i: {**r, "attempt": 1} for i, r in got.items()} == want
    hit = [r for path in (on_slurm / run / "parts").glob("*.jsonl") for line in path.read_text().splitlines()
           if (r := json.loads(line))["status"] == "error"]
    assert all(r["failure_code"] == "server_lost" and r["attempt"] < got[r["episode"]]["attempt"] for r in hit), hit
    return hit


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.5)


PLUGINS = Path(__file__).resolve().parents[2] / "plugins"


@pytest.fixture
def gated_plugins(monkeypatch) -> None:
    """evalfleet_test_plugins (the gated expert) for this process and for the jobs, which inherit its
    environment."""
    monkeypatch.setenv("EVALFLEET_PLUGINS", "evalfleet_test_plugins")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")])))
    monkeypatch.syspath_prepend(str(PLUGINS))  # for this process's own `submit` and `run`, whose registries
    importlib.import_module("evalfleet_test_plugins")  # may have been loaded before EVALFLEET_PLUGINS was set


def gated(gate: Path) -> dict[str, Any]:
    """The expert held at `gate` once a runner process has started one episode of it
    (evalfleet_test_plugins.GatedExpert): what a test interrupts there still holds work, on any machine."""
    gate.mkdir(exist_ok=True)
    return {**EXPERT, "policy": {"type": "test_gated_expert", "gate": str(gate), "after_episodes": 1}}


def array_task_of(pid: int) -> str | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None  # gone
    return next((v.split(b"=", 1)[1].decode() for v in environ if v.startswith(b"SLURM_ARRAY_TASK_ID=")), None)


def waiting_tasks(gate: Path) -> set[str]:
    """The array tasks (SLURM_ARRAY_TASK_ID) with a live runner waiting at `gate`."""
    return {t for p in gate.glob("*.waiting") if (t := array_task_of(int(p.name.split(".")[0]))) is not None}


def test_every_dry_run_script_passes_sbatch_test_only(slurm_cluster, tmp_path: Path, past_its_time_limit) -> None:
    folder = tmp_path / "dry"
    assert main(["submit", str(write(tmp_path, {"expert": EXPERT, "served": SERVED}, 4)), "--backend", "slurm",
                 "--dry-run", "--output-dir", str(folder), f"slurm.partition={slurm_cluster.partition}",
                 "slurm.time=1:00:00", "slurm.mem=1G", "slurm.max_parallel=2", *SMALL[1:]]) == 0
    scripts = sorted(folder.glob("*.sbatch"))
    assert len(scripts) == 3
    for script in scripts:
        proc = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and "to start at" in proc.stderr, (script.name, proc.stderr)


def part_lines(out: Path, run: str) -> int:
    return sum(p.read_text().count("\n") for p in (out / run / "parts").glob("*.jsonl"))


def requeue_midway(out: Path, gate: Path, errors: list[BaseException], ended: threading.Event) -> None:
    """Once the served Run has a record, `scontrol requeue` its server's job; once array task 1's runner waits at
    the expert Run's gate (it holds an unfinished shard), requeue task 1 (Slurm stops it and starts it again with
    SLURM_RESTART_COUNT=1), then release the gate."""
    try:
        paths = SlurmPaths(out.absolute())
        wait_for(lambda: ended.is_set() or (paths.jobs.exists() and (out / "served" / "parts").is_dir()
                                            and part_lines(out, "served") >= 1), 300, "the served Run's first record")
        if ended.is_set():
            return  # the run ended early: its exit code says why
        jobs = read_jobs(paths)
        subprocess.run(["scontrol", "requeue", *jobs["server_jobs"].values()], check=True)
        wait_for(lambda: ended.is_set() or "1" in waiting_tasks(gate), 300, "array task 1 at the expert Run's gate")
        if ended.is_set():
            return
        subprocess.run(["scontrol", "requeue", f"{jobs['runners']}_1"], check=True)
    except BaseException as exc:  # noqa: BLE001 - re-raised by the test's thread
        errors.append(exc)
    finally:
        (gate / "release").touch()


def run_beside(act: Any, out: Path, gate: Path, argv: list[str]) -> tuple[int, list[BaseException]]:
    """`evalfleet ARGV` in this process while `act(out, gate, errors, ended)` interrupts it from a thread (it stops
    waiting once `ended` is set); the exit code and what the thread raised."""
    errors: list[BaseException] = []
    ended = threading.Event()
    helper = threading.Thread(target=act, args=(out, gate, errors, ended))
    helper.start()
    try:
        code = main(argv)
    finally:
        ended.set()
        helper.join()
    return code, errors


def test_run_on_slurm_gives_the_records_local_gives_through_requeues(slurm_cluster, gated_plugins,
                                                                     tmp_path: Path) -> None:
    """Must-show 1 and 2: two Runs (one served) on Slurm and locally, identical per-episode records; on Slurm
    the server's job and a running array task are requeued midway: resumed, nothing lost or duplicated, the
    episodes the server's outage hit are retried (no failure, no error left)."""
    gate = tmp_path / "gate"
    exp = write(tmp_path, {"expert": gated(gate), "served": SERVED}, 6)
    on_slurm, local = tmp_path / "slurm", tmp_path / "local"
    # Shards of 2 episodes: the expert Run has three, so task 1 reaches one while task 0 holds another.
    code, errors = run_beside(requeue_midway, on_slurm, gate, ["run", str(exp), *SMALL, "--backend", "slurm",
                              "--workers", "2", "--shard-size", "2", "--output", str(on_slurm), "--no-progress"])
    assert not errors, errors
    assert code == 0
    assert main(["run", str(exp), "--workers", "2", "--output", str(local), "--no-progress"]) == 0  # gate released
    for run in ("expert", "served"):
        assert_same_as_local(on_slurm, local, run)
        assert len(records(on_slurm, run)) == 6
    paths = SlurmPaths(on_slurm.absolute())
    jobs = read_jobs(paths)
    assert "restart 1" in paths.runner_log(1).read_text()  # the requeued task ran again
    assert "restarted at a new address" in paths.runner_log(0).read_text() + paths.runner_log(1).read_text()
    states = subprocess.run(["sacct", "-n", "-P", "-X", "-o", "JobID,State", "-j", jobs["runners"]],
                            capture_output=True, text=True, check=True).stdout.split()
    assert states == [f"{jobs['runners']}_0|COMPLETED", f"{jobs['runners']}_1|COMPLETED"]


def test_a_cancelled_array_task_is_reported_and_resume_completes(slurm_cluster, gated_plugins, tmp_path: Path,
                                                                  capsys) -> None:
    # Both array tasks are held at the gate after their first episode, so task 1 is cancelled while it still
    # holds work, on any machine.
    gate = tmp_path / "gate"
    exp = write(tmp_path, {"expert": gated(gate)}, 10, name="slurm_cancel", tracking={"tensorboard": {}})
    out = tmp_path / "out"
    assert main(["submit", str(exp), "slurm.workers=2", *SMALL, "--backend", "slurm", "--output-dir", str(out)]) == 0
    jobs = read_jobs(SlurmPaths(out.absolute()))
    meta = json.loads((out / "experiment_metadata.json").read_text())  # submit wrote it: the jobs' ids
    assert meta["status"] in ("submitted", "finished") and meta["backend"] == "slurm"
    assert meta["submission"] == {"runner_array": jobs["runners"], "collect_job": jobs["collect"], "server_jobs": {}}
    assert meta["git"]["commit"] and meta["config_sha256"] and (out / "experiment_manifest.json").is_file()
    wait_for(lambda: waiting_tasks(gate) == {"0", "1"}, 300, "both array tasks at the gate")
    task = f"{jobs['runners']}_1"
    subprocess.run(["scancel", task], check=True)
    wait_for(lambda: not subprocess.run(["squeue", "-h", "-j", task], capture_output=True, text=True).stdout.strip(),
             300, f"{task} to leave the queue")
    (gate / "release").touch()  # task 0 runs what is left unclaimed; task 1's claimed shard stays unfinished
    result_file = out / "experiment_result.json"
    wait_for((out / "index.html").exists, 300, "the collect job's index.html")
    status = json.loads((out / "expert" / "run_status.json").read_text())
    assert status["state"] == "failed"
    assert f"Slurm job {task} CANCELLED" in status["reason"]
    assert f"Slurm job {task} CANCELLED" in result_file.read_text()
    assert f"Slurm job {task} CANCELLED" in (out / "index.html").read_text()
    # The collect job ended the submission's metadata (it ran: finished, though a Run failed) and logged to the
    # Experiment's tracking: sinks, as evalfleet run does.
    wait_for(lambda: json.loads((out / "experiment_metadata.json").read_text())["status"] != "submitted", 120,
             "the collect job's final metadata")
    meta = json.loads((out / "experiment_metadata.json").read_text())
    result = json.loads(result_file.read_text())
    assert meta["status"] == "finished" and meta["finished_at"] and meta["submission"]["collect_job"] == jobs["collect"]
    assert set(result["timings"]["runs"]["expert"]["hosts"]) <= set(meta["hosts"])
    assert result["experiment_metadata"]["document"] == meta
    copy = out / "tracking" / "tensorboard.jsonl"  # written once the sink has run, after the final status
    wait_for(lambda: copy.is_file() and copy.read_text().endswith("\n"), 120, "the collect job's tracking")
    [line] = [json.loads(t) for t in copy.read_text().splitlines()]
    assert line["delivered"] is True and line["config"]["provenance"]["status"] == "finished"
    assert line["metrics"]["expert/status/error"] == result["runs"]["expert"]["counts"]["error"]
    assert line["metrics"]["expert/episodes_decided"] == result["runs"]["expert"]["decided"]
    capsys.readouterr()
    assert main(["run", str(exp), *SMALL, "--resume", "--backend", "slurm", "--workers", "2", "--output", str(out),
                 "--no-progress"]) == 0
    got = records(out, "expert")
    assert sorted(got) == list(range(10))
    assert json.loads((out / "expert" / "run_status.json").read_text())["state"] == "completed"
    resumed = json.loads((out / "experiment_metadata.json").read_text())
    assert resumed["status"] == "finished" and resumed["previous"][-1]["submission"] == meta["submission"]


def test_a_task_killed_for_memory_shows_slurms_reason(slurm_cluster, gated_plugins, tmp_path: Path) -> None:
    # The runner is held at a gate never released before its first episode, so it lives (over its memory) until
    # Slurm's sampler, once a second, sees it: unheld, two quick episodes could end between two samples.
    held = gated(tmp_path / "gate")
    held["policy"]["after_episodes"] = 0
    exp = write(tmp_path, {"expert": held}, 2, name="slurm_oom")
    out = tmp_path / "out"
    assert main(["run", str(exp), "--backend", "slurm", "--workers", "1", "--output", str(out), "--no-progress",
                 "slurm.mem=40M", *SMALL]) == 1
    status = json.loads((out / "expert" / "run_status.json").read_text())
    # With cgroups Slurm says OUT_OF_MEMORY; the local cluster (OverMemoryKill, no cgroups) says FAILED and writes
    # why into the task's log: either way the reason names the job and the memory limit.
    reason = status["reason"]
    assert status["state"] == "failed" and "Slurm job " in reason, status
    # slurmstepd says "Exceeded job memory limit" or "StepId=N.batch exceeded memory limit (X > Y)", whichever
    # of its lines comes last.
    assert "OUT_OF_MEMORY" in reason or "memory limit" in reason.lower(), reason
    assert reason.split("; ")[1] in (out / "experiment_result.json").read_text()
    assert "memory" in (out / "index.html").read_text()


SECRET = "sk-slurm-Zq8$(touch LEAK)-x7"


def test_ctrl_c_cancels_every_job_and_says_how_to_resume(slurm_cluster, gated_plugins, tmp_path: Path) -> None:
    """Also must-show 4 on the cluster: the served policy's api_key reaches its server and client through the
    jobs' environment, and no script, log, record or printed line holds it. The expert Run is held at a gate
    never released: the run is still going when Ctrl-C comes, on any machine."""
    keyed = {**SERVED, "policy": {"type": "openpi_remote", "serve": {"type": "metaworld_expert"}, "api_key": SECRET}}
    gate = tmp_path / "gate"
    exp = write(tmp_path, {"expert": gated(gate), "served": keyed}, 20, name="slurm_interrupt")
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "evalfleet.cli", "run", str(exp), *SMALL, "--backend", "slurm",
                             "--workers", "2", "--output", str(out), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: all((out / r / "parts").is_dir() and part_lines(out, r) >= 1 for r in ("expert", "served"))
                 and waiting_tasks(gate), 300, "the first records of both Runs and a runner at the gate")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    jobs = read_jobs(SlurmPaths(out.absolute()))
    ids = [jobs["runners"], *jobs["server_jobs"].values()]
    assert f"slurm: cancelled jobs {jobs['runners']}" in err
    assert f"Continue with: evalfleet run --resume --backend slurm --output {out}" in err
    left = subprocess.run(["squeue", "-h", "-o", "%i", "-j", ",".join(ids)], capture_output=True, text=True)
    assert not [line for line in left.stdout.split() if line.split("_")[0] in ids], left.stdout
    parts = (out / "served" / "parts").glob("*.jsonl")
    served = [json.loads(line) for p in parts for line in p.read_text().splitlines()]
    assert any(r["status"] == "success" for r in served)  # the key reached the server and its client
    assert SECRET not in err
    for path in out.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    assert not (tmp_path / "LEAK").exists()
