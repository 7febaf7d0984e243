"""Secrets never appear in a file or a printed line: a run with a served, authenticated policy, `overrides`,
`plan`, and OSMO and Ray dry-runs with an API key and bucket credentials (a test that greps for the values)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from evalfleet.secrets import env_name, extract, looks_secret, mask_url
from evalfleet_testkit import ROOT
from test_osmo_rules import validate_workflow

API_KEY = "sk-evalfleet-TOPSECRET-4242"
BUCKET_KEY, BUCKET_SECRET = "AKIAEVALFLEETKEYID", "bucket-SECRET-9f8e7d"
SECRETS = (API_KEY, BUCKET_KEY, BUCKET_SECRET)

EXPERIMENT = {
    "name": "secret_test",
    "seed": 0,
    "runs": {
        "push_served": {
            "environment": {"type": "metaworld", "task": "push-v3"},
            "policy": {"type": "openpi_remote", "api_key": API_KEY, "serve": {"type": "metaworld_expert"},
                       "server_resources": {"gpus": 0}},
            "rollout_limit": {"num_episodes": 2},
        },
    },
}


def evalfleet(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "evalfleet.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def leaks(*texts: str, folder: Path | None = None) -> list[str]:
    found = [f"output line: {line}" for text in texts for line in text.splitlines() if any(s in line for s in SECRETS)]
    for path in (folder.rglob("*") if folder else ()):
        if path.is_file() and any(s.encode() in path.read_bytes() for s in SECRETS):
            found.append(str(path))
    return found


def test_a_run_with_an_api_key_writes_and_prints_no_secret(tmp_path):
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump(EXPERIMENT))
    out = tmp_path / "out"
    proc = evalfleet("run", str(exp), "--output", str(out), "--workers", "1", "--no-progress", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the key reached the client and the server (the Run succeeded through an authenticated server) ...
    status = yaml.safe_load((out / "experiment_result.json").read_text())["runs"]["push_served"]
    assert status["status"] == "completed" and status["counts"]["success"] == 2
    # ... but no file and no line holds it: the written Experiment names the variable it travelled in
    assert not leaks(proc.stdout, proc.stderr, folder=out), leaks(proc.stdout, proc.stderr, folder=out)
    written = yaml.safe_load((out / "experiment.yaml").read_text())
    assert written["runs"]["push_served"]["policy"]["api_key_env"] == env_name("runs.push_served.policy.api_key")
    assert "api_key" not in written["runs"]["push_served"]["policy"]
    # resuming with the original file finds the same Experiment (nothing to run, nothing leaked)
    again = evalfleet("run", str(exp), "--output", str(out), "--resume", "--workers", "1", "--no-progress",
                      cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert not leaks(again.stdout, again.stderr, folder=out)


def test_listings_and_dry_runs_hold_no_secret(tmp_path):
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump(EXPERIMENT))
    url = "osmo.output_url=s3://bucket/evals/{{workflow_id}}"
    outputs = []
    # Bucket keys written into osmo.output_url are refused (exit 2), listed or rendered, and never printed.
    with_keys = f"osmo.output_url=s3://{BUCKET_KEY}:{BUCKET_SECRET}@bucket/evals/{{{{workflow_id}}}}"
    for args in (["overrides", str(exp), with_keys], ["submit", str(exp), "--backend", "osmo", "--dry-run", with_keys,
                                                       "--output-dir", str(tmp_path / "refused")]):
        proc = evalfleet(*args, cwd=tmp_path)
        assert proc.returncode == 2 and "osmo.output_url" in proc.stderr, (args, proc.stderr[-2000:])
        assert not leaks(proc.stdout, proc.stderr) and not (tmp_path / "refused").exists()
    for args in (["overrides", str(exp), url], ["plan", str(exp)], ["plan", str(exp), "--json"],
                 ["submit", str(exp), "--backend", "osmo", "--dry-run", url, "--output-dir", str(tmp_path / "wf")],
                 ["submit", str(exp), "--backend", "ray", "--dry-run", "--ray-address", "http://127.0.0.1:8265"]):
        proc = evalfleet(*args, cwd=tmp_path)
        assert proc.returncode == 0, (args, proc.stderr[-2000:])
        outputs += [proc.stdout, proc.stderr]
    assert not leaks(*outputs, folder=tmp_path / "wf")
    overrides = outputs[0]
    assert "runs.push_served.policy.api_key='***'" in overrides
    assert "osmo.output_url=s3://bucket/evals/{{workflow_id}}" in overrides

    # The workflow hands the secrets over through OSMO's credential mechanism, and stays valid.
    (spec_file,) = (tmp_path / "wf").glob("*.yaml")
    spec = yaml.safe_load(spec_file.read_text())
    validate_workflow(spec)
    tasks = {t["name"]: t for g in spec["workflow"]["groups"] for t in g["tasks"]}
    name = env_name("runs.push_served.policy.api_key")
    server = next(t for n, t in tasks.items() if n.startswith("server-"))
    runner = next(t for n, t in tasks.items() if n.startswith("runner-"))
    for task in (server, runner):
        assert task["credentials"] == {"evalfleet-secrets": {name: name}}
    assert f"--api-key-env {name}" in server["files"][0]["contents"]
    assert "credentials" not in tasks["collect"]
    assert "s3://bucket/evals/{{workflow_id}}" in tasks["collect"]["files"][0]["contents"]


def test_non_secret_settings_are_not_masked():
    assert not looks_secret("XLA_PYTHON_CLIENT_MEM_FRACTION") and not looks_secret("api_key_env")
    assert looks_secret("api_key") and looks_secret("remote_api_token") and looks_secret("EVALFLEET_SERVE_API_KEY")
    assert mask_url("s3://bucket/prefix") == "s3://bucket/prefix"
    assert mask_url("https://user:pw@host/x") == "https://***@host/x"
    doc, found = extract({"runs": {"r": {"policy": {"api_key": "k", "api_key_env": None, "port": 1}}}})
    assert found == {env_name("runs.r.policy.api_key"): "k"} and doc["runs"]["r"]["policy"]["port"] == 1


def test_one_masking_rule_for_credentials_in_urls():
    """AWS secret keys hold `/` and `+`, passwords `@`: the credentials end at the line's last `@`, wherever
    the URL stands in a line (quoted, in parentheses). Beside another URL the line is ambiguous (the password
    could hold the text between them): both are masked as one span, never a credential left."""
    from evalfleet.secrets import carries_credentials

    for secret in ("SEC/RET+x", "p@ss:w/rd", "a+b/c@d"):
        line = f"cannot write to 's3://KEY:{secret}@bucket/evals' (see the docs)"
        assert mask_url(line) == "cannot write to 's3://***@bucket/evals' (see the docs)"
        two = mask_url(f"'s3://KEY:{secret}@bucket/evals' (see http://u:{secret}@h:9/x)")
        assert two == "'s3://***@h:9/x)", two
        assert carries_credentials(f"s3://KEY:{secret}@bucket/evals")
    # a path that holds an @ is not taken for credentials
    assert mask_url("s3://bucket/run@2/x") == "s3://bucket/run@2/x"
    assert not carries_credentials("s3://bucket/run@2/x")


def test_validation_errors_never_echo_a_secret_value(tmp_path):
    """A numeric api_key (or a list) fails validation; the message says what is expected, never the value;
    a host URL with a password is refused (it would reach experiment.yaml and the logs) and not echoed."""
    cases = {
        "policy: {type: openpi_remote, api_key: 987654321}": "987654321",
        "policy: {type: openpi_remote, api_key: [987654321]}": "987654321",
        "policy: {type: openpi_remote, host: 'ws://user:PW-Zq81x@example.org'}": "PW-Zq81x",
    }
    for policy, secret in cases.items():
        exp = tmp_path / "exp.yaml"
        exp.write_text("runs:\n  r:\n    environment: {type: metaworld, task: push-v3}\n"
                       f"    {policy}\n    rollout_limit: {{num_episodes: 2}}\n")
        for command in (["plan", str(exp)], ["run", str(exp), "--output", str(tmp_path / "out")]):
            proc = evalfleet(*command, cwd=tmp_path)
            assert proc.returncode == 2, proc.stderr
            assert secret not in proc.stdout + proc.stderr, proc.stderr
            assert "runs.r.policy." in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
            assert not (tmp_path / "out").exists()
    # given as an override, the same
    proc = evalfleet("plan", str(exp), "runs.r.policy.api_key=[55555]", cwd=tmp_path)
    assert proc.returncode == 2 and "55555" not in proc.stderr, proc.stderr


def test_an_override_error_never_quotes_a_secret_value(tmp_path):
    """An override that fails (a bad value, a Run that does not exist) is quoted in the message: a secret key's
    value as ***, a URL without its credentials. (The file itself is valid, so the override is what is blamed.)"""
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump(EXPERIMENT))
    cases = {"runs.push_served.policy.api_key=[55555]": "runs.push_served.policy.api_key=***",
             "runs.nope.policy.api_key=55555": "runs.nope.policy.api_key=***",
             "runs.push_served.policy.host=ws://user:55555@example.org": "runs.push_served.policy.host=ws://***@",
             "tracking.mlflow.tracking_uri=https://user:55555@mlflow.example": "https://***@mlflow.example"}
    for override, shown in cases.items():
        proc = evalfleet("plan", str(exp), override, cwd=tmp_path)
        assert proc.returncode == 2 and "55555" not in proc.stderr, proc.stderr
        assert shown in proc.stderr, proc.stderr
