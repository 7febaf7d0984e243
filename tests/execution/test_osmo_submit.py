"""Submission through a stand-in `osmo` on PATH, the rendered task scripts run by bash (injection attempts,
failure handling), and one rendered runner + collect task run for real."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalfleet.backends.osmo.task_steps import finish_run
from evalfleet.backends.osmo.workflow import render_workflows
from evalfleet.experiment.loading import load_experiment
from test_osmo_rules import validate_workflow

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
STAND_IN = Path(__file__).resolve().parent / "stand_in_osmo"
URL = "s3://bucket/evals/{{workflow_id}}"


def submit(*args: str, env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evalfleet.cli", "submit", *args], capture_output=True,
                          text=True, cwd=cwd, env=env)


@pytest.fixture
def osmo_env(tmp_path):
    env = dict(os.environ)
    env["PATH"] = f"{STAND_IN}{os.pathsep}{env['PATH']}"
    env["OSMO_STANDIN_LOG"] = str(tmp_path / "osmo_calls.jsonl")
    env["OSMO_STANDIN_DIR"] = str(tmp_path / "osmo_state")
    return env


def calls(env: dict[str, str]) -> list[dict[str, Any]]:
    path = Path(env["OSMO_STANDIN_LOG"])
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_submit_quickstart_through_stand_in(osmo_env, tmp_path):
    out = tmp_path / "rendered"
    proc = submit(str(QUICKSTART), "--backend", "osmo", "--output-dir", str(out), "osmo.pool=dev-pool",
                  "osmo.priority=low", f"osmo.output_url={URL}", env=osmo_env)
    assert proc.returncode == 0, proc.stderr
    [call] = calls(osmo_env)
    file = str(out / "quickstart.yaml")
    assert call["argv"][1:] == ["workflow", "submit", file, "-t", "json", "--pool", "dev-pool", "--priority", "LOW"]
    submitted = Path(call["copy"]).read_text()
    dry = submit(str(QUICKSTART), "--backend", "osmo", "--dry-run", "osmo.pool=dev-pool", "osmo.priority=low",
                 f"osmo.output_url={URL}", env=osmo_env)
    # exactly what the dry-run shows, but for the submission's metadata its collect task carries
    assert carried(yaml.safe_load(dry.stdout)) == {}  # a dry run writes nothing of it
    assert without_carried(yaml.safe_load(submitted)) == yaml.safe_load(dry.stdout)
    meta = carried(yaml.safe_load(submitted))["experiment_metadata.json"]
    assert "--output-dir" in meta["command"] and meta["backend"] == "osmo"
    assert meta["status"] == "submitted" and meta["submission"]["workflow_id"] == "{{workflow_id}}"
    validate_workflow(yaml.safe_load(submitted))
    assert "quickstart-1" in proc.stdout and proc.stdout.strip().endswith("workflow IDs: quickstart-1")


def carried(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The submission's metadata files in a workflow's collect task, by name."""
    task = spec["workflow"]["groups"][-1]["tasks"][0]
    return {Path(f["path"]).name: json.loads(f["contents"]) for f in task["files"] if f["path"].endswith(".json")}


def without_carried(spec: dict[str, Any]) -> dict[str, Any]:
    """`spec` without the submission's metadata files."""
    task = spec["workflow"]["groups"][-1]["tasks"][0]
    task["files"] = [f for f in task["files"] if not f["path"].endswith(".json")]
    return spec


SECRET = "sk-evalfleet-secret-0123456789"


def test_a_submission_carries_its_metadata_and_never_a_secret(osmo_env, tmp_path, write_experiment):
    import hashlib

    path = write_experiment({"served": {
        "environment": {"type": "metaworld", "task": "push-v3"}, "rollout_limit": {"num_episodes": 2},
        "policy": {"type": "openpi_remote", "serve": {"type": "metaworld_expert"}}}}, name="secretive")
    proc = submit(str(path), "--backend", "osmo", "--output-dir", str(tmp_path / "rendered"), "osmo.gpus=0",
                  f"runs.served.policy.api_key={SECRET}", env=osmo_env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [call] = calls(osmo_env)
    text = Path(call["copy"]).read_text()
    assert SECRET not in text
    spec = validate_workflow(yaml.safe_load(text))
    files = carried({"workflow": spec})
    meta, manifest = files["experiment_metadata.json"], files["experiment_manifest.json"]
    assert "runs.served.policy.api_key=***" in meta["command"]
    assert meta["status"] == "submitted" and meta["backend"] == "osmo" and meta["experiment"] == "secretive"
    assert meta["submission"] == {"workflow_id": "{{workflow_id}}", "workflow": "secretive", "part": 1, "parts": 1}
    assert meta["git"]["commit"] and isinstance(meta["git"]["dirty"], bool) and meta["versions"]["evalfleet"]
    collect_files = {f["path"]: f["contents"] for f in spec["groups"][-1]["tasks"][0]["files"]}
    experiment = collect_files["/tmp/evalfleet/experiment/experiment.yaml"]
    assert meta["config_sha256"] == hashlib.sha256(experiment.encode()).hexdigest()  # what collect writes
    assert [r["name"] for r in manifest["runs"]] == ["served"]


def test_a_failed_collect_step_records_failed_with_its_error(tmp_path, capsys):
    """`evalfleet collect --finish-submission` over sources holding no Run: exit 2 as before, and the carried
    metadata lands in the output as failed, with the error."""
    from evalfleet.cli import main
    from evalfleet.execution.cluster_metadata import submission_files

    loaded = load_experiment(QUICKSTART, ["osmo.gpus=0"])
    source = tmp_path / "experiment"
    source.mkdir()
    (source / "experiment.yaml").write_text(loaded.resolved_yaml())
    for name, data in submission_files(source, loaded, backend="osmo", submission={"workflow_id": "wf-1"}).items():
        (source / name).write_bytes(data)
    (tmp_path / "empty").mkdir()
    out = tmp_path / "collected"
    assert main(["collect", str(source), str(tmp_path / "empty"), "--output", str(out), "--finish-submission"]) == 2
    meta = json.loads((out / "experiment_metadata.json").read_text())
    assert meta["status"] == "failed" and "no Runs found" in meta["error"]["message"] and meta["finished_at"]
    assert meta["submission"] == {"workflow_id": "wf-1"}
    assert json.loads((out / "experiment_manifest.json").read_text())["experiment_name"] == "quickstart"


def test_split_experiment_submits_every_part(osmo_env, tmp_path, write_experiment):
    runs = {f"r{i}": {"environment": {"type": "metaworld", "task": "push-v3"}, "rollout_limit": {"num_episodes": 5},
                      "policy": {"type": "metaworld_expert"}} for i in range(30)}
    path = write_experiment(runs, name="thirty")
    proc = submit(str(path), "--backend", "osmo", f"osmo.output_url={URL}", env=osmo_env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    made = calls(osmo_env)
    assert [Path(c["file"]).name for c in made] == ["thirty-part1.yaml", "thirty-part2.yaml"]
    assert proc.stdout.strip().endswith("workflow IDs: thirty-part1-1 thirty-part2-1")
    submitted_runs = []
    for c in made:
        wf = validate_workflow(yaml.safe_load(Path(c["copy"]).read_text()))
        submitted_runs += [g["name"].removeprefix("run-") for g in wf["groups"][:-1]]
    assert submitted_runs == list(runs)


def test_failed_submission_reports_what_was_submitted(osmo_env, tmp_path, write_experiment):
    runs = {f"r{i}": {"environment": {"type": "metaworld", "task": "push-v3"}, "rollout_limit": {"num_episodes": 5},
                      "policy": {"type": "metaworld_expert"}} for i in range(30)}
    path = write_experiment(runs, name="thirty")
    proc = submit(str(path), "--backend", "osmo", f"osmo.output_url={URL}",
                  env={**osmo_env, "OSMO_STANDIN_FAIL_AFTER": "1"}, cwd=tmp_path)
    assert proc.returncode == 1
    assert "submitted thirty-part1-1" in proc.stdout
    assert "resources unavailable" in proc.stderr and "1 of 2 workflows were submitted" in proc.stderr


def test_missing_osmo_cli_is_a_clear_error(tmp_path):
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable)  # python, but no osmo
    proc = submit(str(QUICKSTART), "--backend", "osmo", "--output-dir", str(tmp_path / "o"), env=env)
    assert proc.returncode == 2
    assert "osmo" in proc.stderr and "install" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()  # nothing written


# ------------------------------------------------------------------ the task scripts, run by bash

RECORDER = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["RECORD"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
sys.exit(int(os.environ.get("STUB_EXIT", "0")))
"""


def fill_tokens(text: str, output: Path, inputs: list[Path] = (), host: str = "127.0.0.1") -> str:
    import re

    text = text.replace("{{output}}", str(output)).replace("{{workflow_id}}", "wf-1")
    text = re.sub(r"\{\{host:[^}]+\}\}", host, text)
    for i, p in enumerate(inputs):
        text = text.replace(f"{{{{input:{i}}}}}", str(p))
    return text


def stub_path(tmp_path: Path) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / "evalfleet"
    exe.write_text(RECORDER)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


EVIL = "x'; touch PWNED; echo '$(touch PWNED2)`touch PWNED3`"


def test_shell_metacharacters_cannot_inject(tmp_path, write_experiment):
    runs = {"push": {"environment": {"type": "metaworld", "task": "push-v3"}, "rollout_limit": {"num_episodes": 2},
                     "policy": {"type": "metaworld_expert"}},
            "served": {"environment": {"type": "metaworld", "task": "push-v3"}, "rollout_limit": {"num_episodes": 2},
                       "policy": {"type": "openpi_remote", "serve": {"type": "metaworld_expert"},
                                  "allow_unauthenticated": True}}}
    path = write_experiment(runs)
    loaded = load_experiment(path, [f"runs.push.policy_name={EVIL}", f"runs.push.task={EVIL}",
                                    f"runs.served.policy.serve.note={EVIL}",
                                    f"osmo.output_url=s3://b/{EVIL}/{{{{workflow_id}}}}", "osmo.gpus=0"])
    [wf] = render_workflows(loaded)
    spec = validate_workflow(yaml.safe_load(wf.to_yaml()))
    work = tmp_path / "work"
    work.mkdir()
    record = tmp_path / "record.jsonl"
    env = {**os.environ, "PATH": stub_path(tmp_path), "RECORD": str(record)}
    scripts = []
    for group in spec["groups"]:
        for task in group["tasks"]:
            script = next(f["contents"] for f in task["files"] if f["path"].endswith(".sh"))
            scripts.append((task["name"], fill_tokens(script, tmp_path / "out" / task["name"],
                                                      [tmp_path / "in0", tmp_path / "in1"])))
    for name, script in scripts:
        if name.startswith("runner-served"):
            script = script.replace("seq 900", "seq 1")  # no server listens here
        proc = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, (name, proc.stderr)
    assert list(work.iterdir()) == []  # no PWNED files
    argvs = [json.loads(line) for line in record.read_text().splitlines()]
    serve = next(a for a in argvs if a[0] == "serve")
    options = json.loads(serve[serve.index("--options-json") + 1])
    assert options["note"] == EVIL
    collect = next(a for a in argvs if a[0] == "collect")
    assert collect[collect.index("--output") + 1] == f"s3://b/{EVIL}/wf-1"
    # The runner's status file carries the task and policy tags intact.
    status = json.loads((tmp_path / "out" / "runner-push" / "push" / "run_status.json").read_text())
    assert status["task"] == EVIL and status["policy"] == EVIL and status["state"] == "completed"


def test_runner_script_exits_0_and_marks_the_run_failed_when_the_watchdog_gives_up(tmp_path):
    loaded = load_experiment(QUICKSTART, ["osmo.gpus=0"])
    [wf] = render_workflows(loaded)
    runner = wf.spec["workflow"]["groups"][0]["tasks"][0]
    script = fill_tokens(runner["files"][0]["contents"], tmp_path / "out").replace("/tmp/evalfleet", str(tmp_path))
    env = {**os.environ, "PATH": stub_path(tmp_path), "RECORD": str(tmp_path / "r.jsonl"), "STUB_EXIT": "1"}
    proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    status = json.loads((tmp_path / "out" / "push_expert" / "run_status.json").read_text())
    assert status["state"] == "failed" and "watchdog gave up (exit code 1)" in status["reason"]
    assert status["planned_episodes"] == 50 and status["run"] == "push_expert"


def test_finish_run_reads_the_watchdog_reason(tmp_path):
    ws = tmp_path / "ws.json"
    ws.write_text(json.dumps({"state": "failed", "reason": "gave up after 3 restarts: stalled"}))
    fields = finish_run(tmp_path, "r", 1, task="t", policy="p", planned=4, watchdog_status=ws)
    on_disk = json.loads((tmp_path / "r" / "run_status.json").read_text())
    assert on_disk == fields and on_disk["reason"].endswith("gave up after 3 restarts: stalled")
    finish_run(tmp_path, "r", 0)
    assert json.loads((tmp_path / "r" / "run_status.json").read_text())["state"] == "completed"


@pytest.mark.slow
def test_rendered_runner_and_collect_tasks_run_for_real(tmp_path):
    """The quickstart's first Run (2 episodes) through its rendered runner script, then the rendered collect
    script over the runner's output: real watchdog, runner and collect."""
    loaded = load_experiment(QUICKSTART, ["shared.rollout_limit.num_episodes=2", "osmo.gpus=0",
                                          "tracking.tensorboard.run_name=osmo-collect"])
    [wf] = render_workflows(loaded, record_submission=True)
    groups = wf.spec["workflow"]["groups"]
    runner = groups[0]["tasks"][0]
    task_dir = tmp_path / "task"
    task_dir.mkdir()
    files = {f["path"]: f["contents"] for f in runner["files"]}
    (task_dir / "experiment.yaml").write_text(files["/tmp/evalfleet/experiment.yaml"])
    script = fill_tokens(files["/tmp/evalfleet/run.sh"], tmp_path / "runner_out")
    script = script.replace("/tmp/evalfleet", str(task_dir))
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    status = json.loads((tmp_path / "runner_out" / "push_expert" / "run_status.json").read_text())
    assert status["state"] == "completed", status
    collect = groups[-1]["tasks"][0]
    cfiles = {f["path"]: f["contents"] for f in collect["files"]}
    (task_dir / "experiment").mkdir()
    for name in ("experiment.yaml", "experiment_metadata.json", "experiment_manifest.json"):
        (task_dir / "experiment" / name).write_text(fill_tokens(cfiles[f"/tmp/evalfleet/experiment/{name}"], tmp_path))
    script = fill_tokens(cfiles["/tmp/evalfleet/collect.sh"], tmp_path / "collect_out",
                         [tmp_path / "runner_out"] + [tmp_path / f"missing{i}" for i in range(1, 4)])
    script = script.replace("/tmp/evalfleet", str(task_dir))
    for i in range(1, 4):
        (tmp_path / f"missing{i}").mkdir()
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "collect_out" / "collected" / "experiment_result.json").read_text())
    text = json.dumps(result)
    assert "push_expert" in text
    lines = (tmp_path / "collect_out" / "collected" / "push_expert" / "episode_results.jsonl").read_text().splitlines()
    assert [json.loads(line)["episode"] for line in lines] == [0, 1]
    # The collect step ended the submission's metadata and logged to the Experiment's tracking: sinks.
    collected = tmp_path / "collect_out" / "collected"
    meta = json.loads((collected / "experiment_metadata.json").read_text())
    assert meta["status"] == "finished" and meta["finished_at"] and meta["submission"]["workflow_id"] == "wf-1"
    assert set(result["timings"]["runs"]["push_expert"]["hosts"]) <= set(meta["hosts"])
    assert result["experiment_metadata"]["document"] == meta
    [line] = [json.loads(t) for t in (collected / "tracking" / "tensorboard.jsonl").read_text().splitlines()]
    assert line["delivered"] is True and line["config"]["provenance"]["status"] == "finished"
    assert line["metrics"]["push_expert/success_rate"] == result["runs"]["push_expert"]["success_rate"]
    assert (collected / "tracking" / "tensorboard" / "osmo-collect").is_dir()


@pytest.mark.slow
def test_rendered_server_and_runner_tasks_of_a_served_run_work_together(tmp_path, write_experiment):
    """A served Run's group for real: serve.sh starts `evalfleet serve`, run.sh waits for its port, then the
    watchdog-supervised runner plays the episodes against it (host token → 127.0.0.1, a free port)."""
    from evalfleet.serving.process import free_port

    path = write_experiment({"push_served": {
        "environment": {"type": "metaworld", "task": "push-v3"}, "rollout_limit": {"num_episodes": 2},
        "policy": {"type": "openpi_remote", "serve": {"type": "metaworld_expert"}, "allow_unauthenticated": True}}})
    [wf] = render_workflows(load_experiment(path, ["osmo.gpus=0"]))
    runner, server = wf.spec["workflow"]["groups"][0]["tasks"]
    port = str(free_port("127.0.0.1"))
    task_dir = tmp_path / "task"
    task_dir.mkdir()

    def prepare(text: str) -> str:
        text = fill_tokens(text, tmp_path / "out").replace("/tmp/evalfleet", str(task_dir))
        return text.replace("8000", port).replace("0.0.0.0", "127.0.0.1")

    files = {f["path"]: prepare(f["contents"]) for f in runner["files"] + server["files"]}
    (task_dir / "experiment.yaml").write_text(files["/tmp/evalfleet/experiment.yaml"])
    serve = subprocess.Popen(["bash", "-c", files["/tmp/evalfleet/serve.sh"]], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        proc = subprocess.run(["bash", "-c", files["/tmp/evalfleet/run.sh"]], capture_output=True, text=True,
                              timeout=300)
    finally:
        serve.terminate()
        serve.wait(timeout=30)
    assert proc.returncode == 0, proc.stderr[-2000:]
    status = json.loads((tmp_path / "out" / "push_served" / "run_status.json").read_text())
    assert status["state"] == "completed", status
    records = [json.loads(line) for p in sorted((tmp_path / "out" / "push_served" / "parts").glob("*.jsonl"))
               for line in p.read_text().splitlines()]
    assert sorted(r["episode"] for r in records) == [0, 1] and all(r["status"] != "error" for r in records)
