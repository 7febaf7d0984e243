"""Issue #27 must-show 1: a real browser (Debian chromium via Playwright) on the live report of a running
Experiment sees the numbers change and ends at the final values of experiment_result.json: `evalfleet run ...
--serve-report 127.0.0.1:0`, and `evalfleet watch s3://...` on a SeaweedFS bucket a run's output is collected
into while it runs. The run's policy waits at a gate the test opens (the test plugins' GatedExpert), so the
page is looked at while episodes are pending, however fast the machine; the page is waited on, never the clock."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import yaml
from evalfleet_testkit import ROOT, evalfleet_cmd, plugin_env
from outputs_helpers import s3fs_client

from evalfleet.outputs.report import fmt_rate
from evalfleet.outputs.summary import success_rate

EPISODES = 4
RUN = "push_expert"
BOUND_S = 300  # a bound on a hang, never a timing
EPISODES_CELL = f"#live tr[data-run='{RUN}'] td.episodes"


def gated_experiment(tmp_path: Path) -> tuple[Path, Path]:
    gate = tmp_path / "gate"
    gate.mkdir()
    doc = {"name": "live", "seed": 0,
           "shared": {"rollout_limit": {"num_episodes": EPISODES},
                      "policy": {"type": "test_gated_expert", "gate": str(gate), "after_episodes": 1}},
           "runs": {RUN: {"environment": {"type": "metaworld", "task": "push-v3"}, "policy_name": "expert"}}}
    exp = tmp_path / "live.yaml"
    exp.write_text(yaml.safe_dump(doc, sort_keys=False))
    return exp, gate


def wait_for(what: str, done, proc: subprocess.Popen | None = None, log: Path | None = None):
    deadline = time.monotonic() + BOUND_S
    while not (value := done()):
        if (proc is not None and proc.poll() is not None) or time.monotonic() > deadline:
            raise AssertionError(f"never saw {what}: " + (log.read_text()[-3000:] if log and log.exists() else ""))
        time.sleep(0.05)
    return value


def url_line(log: Path) -> str | None:
    for line in log.read_text().splitlines() if log.exists() else []:
        if line.startswith("live report: "):
            return line.split(": ", 1)[1].strip()
    return None


def see_one_of_four(page, url: str) -> None:
    """The live page, updating in place: one episode of four, one success, its rate and interval."""
    page.goto(url)
    page.wait_for_function(f"document.querySelector(\"{EPISODES_CELL}\")?.textContent === '1 / {EPISODES}'",
                           timeout=BOUND_S * 1000)
    row = f"#live tr[data-run='{RUN}']"
    assert page.inner_text(f"{row} td.success") == "1"
    assert page.inner_text(f"{row} td.rate") == fmt_rate(*success_rate(1, 1))


def see_final(page, read_result) -> None:
    """The page became the collected index.html, with experiment_result.json's figures (read once it is)."""
    page.wait_for_selector(f"#summary tbody tr[data-run='{RUN}']", timeout=BOUND_S * 1000)
    run = read_result()["runs"][RUN]
    row = page.eval_on_selector(f"#summary tbody tr[data-run='{RUN}']", "r => [r.dataset.status, r.innerText]")
    assert row[0] == run["status"] == "completed"
    assert fmt_rate(run["success_rate"], run["ci95"]) in row[1] and run["counts"]["success"] == EPISODES


def stop(proc: subprocess.Popen, gate: Path) -> None:
    """A failed test's run stopped as a user would (Ctrl-C stops its runners; a SIGKILL would orphan them at the
    gate), the gate opened so nothing waits on it."""
    (gate / "release").write_text("")
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=BOUND_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_run_serves_its_live_report(chromium, tmp_path: Path) -> None:
    exp, gate = gated_experiment(tmp_path)
    out, log = tmp_path / "out", tmp_path / "run.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(evalfleet_cmd("run", str(exp), "--output", str(out), "--workers", "1", "--no-progress",
                                              "--serve-report", "127.0.0.1:0"), cwd=ROOT, env=plugin_env(),
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    context = chromium.new_context()
    try:
        url = wait_for("the live report's URL", lambda: url_line(log), proc, log)
        wait_for("a runner at the gate", lambda: list(gate.glob("*.waiting")), proc, log)
        page = context.new_page()
        see_one_of_four(page, url)
        (gate / "release").write_text("")
        see_final(page, lambda: json.loads((out / "experiment_result.json").read_text()))
        with urllib.request.urlopen(url, timeout=30) as resp:  # the served page IS collect's index.html
            assert resp.read() == (out / "index.html").read_bytes()
        proc.stdin.close()  # stdin is not a terminal: the final page is served until stdin is closed
        assert proc.wait(timeout=BOUND_S) == 0, log.read_text()[-3000:]
    finally:
        context.close()
        stop(proc, gate)


def test_watch_follows_a_bucket(chromium, s3_env, tmp_path: Path) -> None:
    endpoint, _key, _secret, bucket = s3_env
    target = f"s3://{bucket}/live-{tmp_path.name}"
    exp, gate = gated_experiment(tmp_path)
    out, log, watch_log = tmp_path / "out", tmp_path / "run.log", tmp_path / "watch.log"
    env = plugin_env()
    with open(log, "w") as err:
        proc = subprocess.Popen(evalfleet_cmd("run", str(exp), "--output", str(out), "--workers", "1", "--no-progress"),
                                cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True)
    watch = None
    context = chromium.new_context()
    try:
        wait_for("a runner at the gate", lambda: list(gate.glob("*.waiting")), proc, log)
        # What a cluster task does while it runs: its output so far, uploaded to the bucket.
        subprocess.run(evalfleet_cmd("collect", str(out), "--output", target, "--no-report"), cwd=ROOT, env=env,
                       check=True, capture_output=True, timeout=BOUND_S)
        with open(watch_log, "w") as werr:
            watch = subprocess.Popen(evalfleet_cmd("watch", target, "--port", "0"), cwd=ROOT, env=env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=werr, text=True)
        line = watch.stdout.readline()
        assert line.startswith("live report: http://127.0.0.1:"), watch_log.read_text()
        page = context.new_page()
        see_one_of_four(page, line.split(": ", 1)[1].strip())
        (gate / "release").write_text("")
        assert proc.wait(timeout=BOUND_S) == 0, log.read_text()[-3000:]
        subprocess.run(evalfleet_cmd("collect", str(out), "--output", target), cwd=ROOT, env=env, check=True,
                       capture_output=True, timeout=BOUND_S)
        fs = s3fs_client(endpoint, s3_env[1], s3_env[2])
        see_final(page, lambda: json.loads(fs.cat_file(f"{target[5:]}/experiment_result.json")))
    finally:
        context.close()
        stop(proc, gate)
        if watch is not None and watch.poll() is None:
            watch.kill()
            watch.wait()
