"""Arena Runs run Arena's own runner inside the OSMO task (must-show 2 and 3): the dry-run renders Arena's runner
command in Arena's image under evalfleet's watchdog, wired to the Run's server task; the rendered task scripts,
run by bash against a stand-in for Arena's runner that writes Arena's record format, leave records collect reads,
restart a crash without losing what it wrote, stop a hang, and let a silent cold start be."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalfleet.backends.osmo.workflow import render_workflows
from evalfleet.experiment.loading import load_experiment
from evalfleet.outputs.collect import collect
from test_osmo_rules import validate_workflow

DATA = Path(__file__).resolve().parents[1] / "data" / "arena"
STAND_IN = Path(__file__).resolve().parent / "arena_runner_stand_in.py"
GROOT = DATA / "droid_pnp_gr00t_experiment.yaml"
ROBOLAB = DATA / "robolab_2_tasks_pi0_and_cosmos.yaml"
RUN = "droid_pnp_gr00t"


def task_files(task: dict[str, Any]) -> dict[str, str]:
    return {f["path"]: f["contents"] for f in task["files"]}


def test_dry_run_renders_arenas_runner_per_run_wired_to_its_server() -> None:
    """pi0, Cosmos (robolab file) and GR00T: Arena's image, Arena's runner command under the watchdog, and the
    single-Run file (in Arena's key names) pointing at the Run's own server task."""
    cases = []
    for path, overrides in ((ROBOLAB, ["experiment_runner.record_camera_video=true"]), (GROOT, [])):
        loaded = load_experiment(path, ["experiment_runner.image=registry.example/arena:1", *overrides])
        [wf] = render_workflows(loaded)
        validate_workflow(yaml.safe_load(wf.to_yaml()))
        for group in wf.spec["workflow"]["groups"][:-1]:
            cases.append((loaded, group, bool(overrides)))  # the robolab file records camera videos
    policies = set()
    for loaded, group, camera in cases:
        runner, server = group["tasks"]
        assert runner["image"] == "registry.example/arena:1" and server["image"] != runner["image"]
        files = task_files(runner)
        run_sh, attempt_sh = files["/tmp/evalfleet/run.sh"], files["/tmp/evalfleet/arena_attempt.sh"]
        assert "-m evalfleet.execution.watchdog" in run_sh and "--liveness-from-files" in run_sh
        assert "--startup-timeout 1800" in run_sh  # experiment_runner.startup_grace_s
        assert "-- bash \"$TASK_DIR\"/arena_attempt.sh" in run_sh
        command = next(line for line in attempt_sh.splitlines() if "experiment_runner.py" in line)
        argv = shlex.split(command.split(" 2>&1 |")[0])
        assert argv[:3] == ["/isaac-sim/python.sh", "isaaclab_arena/evaluation/experiment_runner.py",
                            "--experiment_config"]
        assert argv[4:] == ["--experiment_output_directory", "$DIR", "--viz", "none", "--enable_cameras",
                            *(["--record_camera_video"] if camera else [])]
        doc = yaml.safe_load(files["/tmp/evalfleet/experiment.yaml"])
        [(run, cfg)] = doc["runs"].items()
        policy = cfg["policy"]
        assert policy["remote_host"] == f"{{{{host:{server['name']}}}}}"
        port = policy["remote_port"]
        serve = task_files(server)["/tmp/evalfleet/serve.sh"]
        assert f"SERVER_PORT={port}" in run_sh and re.search(rf"--port[= ]{port}\b", serve)
        assert "recording" not in cfg and "max_attempts" not in cfg  # Arena's keys only
        assert cfg["environment"]["type"] == loaded.experiment.runs[run].environment.type
        policies.add(policy["type"].rsplit(".", 1)[-1])
    assert policies == {"Pi0RemotePolicy", "CosmosRemotePolicy", "Gr00tRemoteClosedloopPolicy"}


# ------------------------------------------------------------------ the scripts, run by bash


def free_listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    return sock


def run_task(tmp_path: Path, *overrides: str, env: dict[str, str] | None = None, timeout: float = 120,
             episodes: int = 4) -> tuple[subprocess.CompletedProcess, Path, Path, int]:
    """Render GR00T's Run, fill OSMO's tokens (output folder, host of the server task = a real listener on
    127.0.0.1), and run run.sh with bash. Returns (process, output folder, stand-in state folder, port)."""
    loaded = load_experiment(GROOT, [f"runs.{RUN}.rollout_limit.num_episodes={episodes}",
                                     f"experiment_runner.python={STAND_IN}", "experiment_runner.restart_backoff_s=0.2",
                                     *overrides])
    [wf] = render_workflows(loaded)
    runner = wf.spec["workflow"]["groups"][0]["tasks"][0]
    task_dir, out, state = tmp_path / "task", tmp_path / "out", tmp_path / "state"
    task_dir.mkdir()
    listener = free_listener()
    port = listener.getsockname()[1]
    try:
        for path, text in task_files(runner).items():
            text = text.replace("{{output}}", str(out)).replace("/tmp/evalfleet", str(task_dir))
            text = re.sub(r"\{\{host:[^}]+\}\}", "127.0.0.1", text)
            text = text.replace("SERVER_PORT=5555", f"SERVER_PORT={port}").replace("remote_port: 5555",
                                                                                    f"remote_port: {port}")
            (task_dir / Path(path).name).write_text(text)
        full_env = {**os.environ, "STAND_IN_STATE": str(state), **(env or {})}
        proc = subprocess.run(["bash", str(task_dir / "run.sh")], env=full_env, capture_output=True, text=True,
                              timeout=timeout)
    finally:
        listener.close()
    return proc, out, state, port


def statuses(out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    run_status = json.loads((out / RUN / "run_status.json").read_text())
    result = json.loads((out / "experiment_runner_result.json").read_text())
    return run_status, result


def collected(out: Path, tmp_path: Path) -> list[dict[str, Any]]:
    dest = tmp_path / "collected"
    collect([str(out)], str(dest))
    return [json.loads(x) for x in (dest / RUN / "episode_results.jsonl").read_text().splitlines()]


def test_rendered_task_runs_arenas_runner_and_collect_reads_its_records(tmp_path: Path) -> None:
    proc, out, state, port = run_task(tmp_path, "experiment_runner.record_camera_video=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_status, result = statuses(out)
    assert run_status["state"] == "completed" and run_status["restarts"] == 0, run_status
    assert run_status["planned_episodes"] == 4 and run_status["attempts"][0]["episodes_recorded"] == 4
    assert result["execution_status"] == "completed" and result["process_exit_code"] == 0
    assert RUN in result["runs"]
    # What Arena's runner was given: its documented arguments and the policy wired to the server task.
    [launch] = [json.loads(p.read_text()) for p in state.glob("launch-*")]
    assert launch["argv"][1:3] == ["--experiment_config", str(tmp_path / "task" / "arena_experiment.yaml")]
    assert "--record_camera_video" in launch["argv"]
    policy = launch["config"]["runs"][RUN]["policy"]
    assert (policy["remote_host"], policy["remote_port"]) == ("127.0.0.1", port)
    records = collected(out, tmp_path)
    assert [r["episode"] for r in records] == [0, 1, 2, 3]
    assert all(r["status"] in ("success", "failure") and r["run"] == RUN for r in records)
    assert all("overall_score" in r["progress"] for r in records)
    assert sum(1 for r in records if r.get("video")) == 4


def test_a_crash_midway_is_restarted_and_what_it_wrote_is_kept(tmp_path: Path) -> None:
    proc, out, state, _ = run_task(tmp_path, "experiment_runner.max_restarts=2",
                                   env={"STAND_IN_MODE": "crash_once", "CRASH_AFTER": "2"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_status, result = statuses(out)
    assert run_status["state"] == "completed" and run_status["restarts"] == 1, run_status
    first, second = run_status["attempts"]
    assert first["outcome"] == "exit_code" and first["episodes_recorded"] == 2
    assert second["outcome"] == "completed" and second["episodes_recorded"] == 4
    assert "reran the Run from its first episode" in run_status["reran"] and first["folder"] in run_status["reran"]
    kept = out / first["folder"] / RUN / "episode_results_rebuild0.jsonl"
    assert [json.loads(x)["global_episode_index"] for x in kept.read_text().splitlines()] == [0, 1]
    assert len(list(state.glob("launch-*"))) == 2
    assert result["execution_status"] == "completed"
    assert [r["episode"] for r in collected(out, tmp_path)] == [0, 1, 2, 3]


def test_a_hang_after_the_first_output_is_detected_as_stalled(tmp_path: Path) -> None:
    proc, out, _, _ = run_task(tmp_path, "experiment_runner.stall_s=2", "experiment_runner.max_restarts=0",
                               env={"STAND_IN_MODE": "hang"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_status, result = statuses(out)
    assert run_status["state"] == "failed" and "stalled" in run_status["reason"], run_status
    assert run_status["attempts"][0]["outcome"] == "stalled"
    assert result["execution_status"] == "failed" and result["process_exit_code"] != 0
    assert [r["episode"] for r in collected(out, tmp_path)] == [0]  # the one episode it recorded counts


def test_a_silent_cold_start_within_the_grace_is_not_killed(tmp_path: Path) -> None:
    # The cold start (10 s silent) is longer than the stall limit (4 s, 20 times a 0.2 s episode, so a slow
    # machine never looks stalled once it runs): only the startup grace keeps it alive.
    proc, out, state, _ = run_task(tmp_path, "experiment_runner.stall_s=4", "experiment_runner.startup_grace_s=60",
                                   env={"COLD_START_S": "10"}, episodes=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_status, _ = statuses(out)
    assert run_status["state"] == "completed" and run_status["restarts"] == 0, run_status
    assert len(list(state.glob("launch-*"))) == 1
    assert [r["episode"] for r in collected(out, tmp_path)] == [0, 1]


def test_a_cold_start_longer_than_the_grace_is_stopped(tmp_path: Path) -> None:
    proc, out, _, _ = run_task(tmp_path, "experiment_runner.startup_grace_s=1.5", "experiment_runner.max_restarts=0",
                               env={"COLD_START_S": "60"}, episodes=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_status, result = statuses(out)
    assert run_status["state"] == "failed" and run_status["attempts"][0]["outcome"] in ("no_heartbeat",
                                                                                       "startup_timeout")
    assert result["execution_status"] == "failed"


@pytest.mark.parametrize("flag", ["{nope}", "{attempt:q}"])
def test_liveness_glob_with_an_unknown_field_is_a_usage_error(flag: str, tmp_path: Path) -> None:
    from evalfleet.cli.watchdog import main

    assert main(["--liveness-from-files", str(tmp_path / flag), "--", "true"]) == 2


def test_a_literal_secret_never_reaches_the_rendered_task_and_arena_config_puts_it_back(tmp_path: Path) -> None:
    from evalfleet.cli.osmo_task import main as _main

    secret = "tok-9f8e7d6c5b4a"
    loaded = load_experiment(GROOT, [f"runs.{RUN}.policy.remote_api_token={secret}"])
    [wf] = render_workflows(loaded)
    text = wf.to_yaml()
    assert secret not in text
    runner = wf.spec["workflow"]["groups"][0]["tasks"][0]
    [(credential, variables)] = runner["credentials"].items()
    [name] = variables
    template = tmp_path / "experiment.yaml"
    template.write_text(task_files(runner)["/tmp/evalfleet/experiment.yaml"])
    assert yaml.safe_load(template.read_text())["runs"][RUN]["policy"]["remote_api_token_env"] == name
    os.environ[name] = secret
    try:
        assert _main(["arena-config", "--template", str(template), "--output", str(tmp_path / "arena.yaml")]) == 0
    finally:
        del os.environ[name]
    assert yaml.safe_load((tmp_path / "arena.yaml").read_text())["runs"][RUN]["policy"]["remote_api_token"] == secret
    assert _main(["arena-config", "--template", str(template), "--output", str(tmp_path / "again.yaml")]) == 2
