"""Issue #26 must-show 2: a run writes experiment_metadata.json (status finished, git commit, dirty flag, config
hash), experiment_manifest.json (labels and their source) and timings.json (per Run and phase, merged from the
shards' files); an interrupted run's metadata says interrupted (a real `evalfleet run` stopped by SIGINT once it
has records; one SIGKILLed is found interrupted by `--resume`). The command line never holds a secret."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from evalfleet_testkit import ROOT, evalfleet_cmd, plugin_env

from evalfleet.execution.run_metadata import masked_command

QUICKSTART = ROOT / "examples" / "quickstart.yaml"


def cut_down_quickstart(tmp_path: Path, episodes: int, runs: tuple[str, ...] = ("push_expert",)) -> Path:
    """The quickstart with fewer Runs and episodes (everything else as the file has it)."""
    doc = yaml.safe_load(QUICKSTART.read_text())
    doc["runs"] = {name: doc["runs"][name] for name in runs}
    doc["shared"]["rollout_limit"]["num_episodes"] = episodes
    path = tmp_path / "quickstart.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def test_quickstart_writes_metadata_manifest_and_timings(tmp_path: Path) -> None:
    exp = cut_down_quickstart(tmp_path, 3, runs=("push_expert", "push_expert_noisy"))
    out = tmp_path / "out"
    done = subprocess.run(evalfleet_cmd("run", str(exp), "--output", str(out), "--workers", "2"), cwd=ROOT,
                          capture_output=True, text=True, env=plugin_env(), timeout=600, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    meta = read(out / "experiment_metadata.json")
    assert meta["status"] == "finished" and meta["finished_at"] and meta["running_at"]
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:  # evalfleet runs from this checkout: its commit, and a dirty flag that is a bool
        assert meta["git"]["commit"] == head.stdout.strip()
        assert isinstance(meta["git"]["dirty"], bool)
    assert meta["config_sha256"] == hashlib.sha256((out / "experiment.yaml").read_bytes()).hexdigest()
    assert meta["backend"] == "local" and meta["hosts"] and meta["versions"]["evalfleet"]
    assert meta["command"][-4:] == ["--output", str(out), "--workers", "2"]
    assert meta["runs"]["push_expert"]["seed"] == 0
    assert meta["runs"]["push_expert_noisy"]["variations"]["robot.action_noise"]["enabled"] is True

    manifest = read(out / "experiment_manifest.json")
    labels = {r["name"]: (r["task"], r["policy"], r["label_source"]) for r in manifest["runs"]}
    assert labels["push_expert"] == ("push-v3", "expert", {"task": "derived", "policy": "configured"})

    timings = read(out / "timings.json")
    for run in ("push_expert", "push_expert_noisy"):
        phases = timings["runs"][run]["phases"]
        shard_files = list((out / run / "timings").glob("*.json"))
        assert shard_files, "each shard leaves its timings file"
        merged_steps = sum(read(f)["phases"].get("sim_step", {}).get("count", 0) for f in shard_files)
        records = [json.loads(line) for line in (out / run / "episode_results.jsonl").read_text().splitlines()]
        assert phases["sim_step"]["count"] == merged_steps == sum(r["episode_length"] for r in records)
        assert phases["reset"]["count"] == len(records) == 3
        assert phases["write"]["count"] == 3 and phases["env_build"]["count"] >= 1
        for p in ("p50_ms", "p90_ms", "p99_ms"):
            assert phases["policy"][p] is not None
        assert phases["policy"]["p50_ms"] <= phases["policy"]["p90_ms"] <= phases["policy"]["p99_ms"]
    assert timings["experiment"]["collect"]["count"] == 1  # collect's own time
    assert timings["experiment"]["server_start"]["count"] == 1  # the run process's: its servers (none here)
    result = read(out / "experiment_result.json")
    assert result["experiment_metadata"]["document"]["status"] == "finished"
    assert result["timings"]["runs"].keys() == timings["runs"].keys()
    assert result["experiment_manifest"]["document"]["runs"] == manifest["runs"]


def gated(tmp_path: Path, episodes: int) -> tuple[Path, Path]:
    """The cut-down quickstart with its policy held at a gate after one episode (the test plugins' GatedExpert):
    an interruption always lands while episodes are pending, however fast the machine."""
    exp = cut_down_quickstart(tmp_path, episodes)
    gate = tmp_path / "gate"
    gate.mkdir()
    doc = yaml.safe_load(exp.read_text())
    doc["shared"]["policy"] = {"type": "test_gated_expert", "gate": str(gate), "after_episodes": 1}
    exp.write_text(yaml.safe_dump(doc, sort_keys=False))
    return exp, gate


def start_run(exp: Path, out: Path, gate: Path) -> subprocess.Popen:
    """`evalfleet run` in its own session, returned once a runner waits at the gate (it has a record)."""
    proc = subprocess.Popen(evalfleet_cmd("run", str(exp), "--output", str(out), "--workers", "1"), cwd=ROOT,
                            env=plugin_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 300  # a bound on a hang, not a timing
    while not list(gate.glob("*.waiting")):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"no runner reached the gate: {proc.communicate()[1]}")
        time.sleep(0.05)
    assert any(p.read_text().strip() for p in (out / "push_expert" / "parts").glob("*.jsonl"))
    assert read(out / "experiment_metadata.json")["status"] == "running"
    return proc


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_run_says_so(tmp_path: Path, signum: int) -> None:
    exp, gate = gated(tmp_path, 4)
    out = tmp_path / "out"
    proc = start_run(exp, out, gate)
    try:
        proc.send_signal(signum)  # the run process only, as a `kill` would: it stops its runners
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    meta = read(out / "experiment_metadata.json")
    assert (meta["status"], meta["signal"]) == ("interrupted", signal.Signals(signum).name) and meta["finished_at"]
    # The run stopped its runner before it exited (the runner waits at the gate: it would live on otherwise).
    # A Ctrl-C inside Thread.join() once let the run exit without waiting (python/cpython#90882).
    assert "child process group stopped" in (out / ".evalfleet" / "worker-0.log").read_text()
    assert not processes_naming(out), processes_naming(out)


def processes_naming(out: Path) -> list[str]:
    """Command lines of live processes that name the output folder (a forked runner keeps the run's)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next(line for line in (entry / "status").read_text().splitlines() if line.startswith("State:"))
        except (OSError, StopIteration):
            continue
        if str(out) in cmdline and "zombie" not in state:
            found.append(f"{entry.name}: {cmdline}")
    return found


def test_sigkilled_run_is_found_interrupted_on_resume(tmp_path: Path) -> None:
    exp, gate = gated(tmp_path, 4)
    out = tmp_path / "out"
    proc = start_run(exp, out, gate)
    os.killpg(proc.pid, signal.SIGKILL)  # the run and its runners: nothing says goodbye
    proc.communicate(timeout=60)
    assert read(out / "experiment_metadata.json")["status"] == "running"
    (gate / "release").write_text("")
    done = subprocess.run(evalfleet_cmd("run", str(exp), "--output", str(out), "--workers", "1", "--resume"),
                          cwd=ROOT, capture_output=True, text=True, env=plugin_env(), timeout=600,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    meta = read(out / "experiment_metadata.json")
    assert meta["status"] == "finished" and meta["resumed"] is True
    assert [(p["status"], p.get("found_on")) for p in meta["previous"]] == [("interrupted", "resume")]


@pytest.mark.parametrize("argv, secret", [
    (["evalfleet", "run", "x.yaml", "runs.a.policy.api_key=s3cr3t-value"], "s3cr3t-value"),
    (["evalfleet", "run", "x.yaml", "--api-key", "s3cr3t-value"], "s3cr3t-value"),
    (["evalfleet", "run", "x.yaml", "--output", "s3://user:pa55word@bucket/x"], "pa55word"),
    (["evalfleet", "run", "x.yaml", "runs.a.policy.url=ws://h/?t=held-secret"], "held-secret"),
])
def test_command_line_never_holds_a_secret(argv: list[str], secret: str) -> None:
    shown = masked_command(argv, {"EVALFLEET_SECRET_X": "held-secret"})
    assert not any(secret in arg for arg in shown) and shown[:3] == argv[:3]
