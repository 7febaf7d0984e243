"""collect through a real S3-compatible server (SeaweedFS `weed mini` on 127.0.0.1, started by the fixture)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from outputs_helpers import make_sample_output, s3fs_client

from evalfleet.errors import UserError
from evalfleet.outputs.collect import collect

pytestmark = pytest.mark.slow  # starts a SeaweedFS server (a few seconds)


def local_tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def s3_tree(fs, prefix: str) -> dict[str, bytes]:
    return {path[len(prefix) + 1:]: fs.cat_file(path) for path in sorted(fs.find(prefix))}


def test_collect_round_trip_through_s3(s3_env, tmp_path: Path):
    endpoint, key, secret, bucket = s3_env
    fs = s3fs_client(endpoint, key, secret)
    src = make_sample_output(tmp_path / "out", episodes_a=40)

    # Upload: local shard logs -> s3://bucket/results/exp1 (endpoint from EVALFLEET_S3_ENDPOINT).
    result = collect([str(src)], f"s3://{bucket}/results/exp1", report=True)
    assert result["summary"]["runs_by_status"] == {"completed": 1, "partial": 1, "failed": 1}

    # The same collect into a local folder is the reference.
    reference = tmp_path / "reference"
    collect([str(src)], str(reference), report=True)
    expected = local_tree(reference)

    # List and download: identical bytes (the result and report differ only in their creation time).
    uploaded = s3_tree(fs, f"{bucket}/results/exp1")
    assert sorted(uploaded) == sorted(expected)
    for name, data in expected.items():
        if name not in ("experiment_result.json", "index.html"):
            assert uploaded[name] == data, name
    assert json.loads(uploaded["experiment_result.json"]) == result
    assert b'data-run="drawer_random" data-status="failed"' in uploaded["index.html"]

    # Download with collect itself: s3 source -> local folder, byte for byte what was uploaded.
    download = tmp_path / "download"
    collect([f"s3://{bucket}/results/exp1"], str(download))
    got = local_tree(download)
    for name, data in uploaded.items():  # without report=True the download has no report (its episode tables)
        if name not in ("experiment_result.json", "index.html") and not name.startswith("report_episodes/"):
            assert got[name] == data, name


def test_collect_in_place_on_s3_from_shard_logs(s3_env, tmp_path: Path):
    endpoint, key, secret, bucket = s3_env
    fs = s3fs_client(endpoint, key, secret)
    src = make_sample_output(tmp_path / "out", episodes_a=30)
    fs.put(str(src) + "/", f"{bucket}/raw/exp2/", recursive=True)  # as cluster tasks leave it
    url = f"s3://{bucket}/raw/exp2"
    result = collect([url], url)
    assert result["runs"]["pick_expert"]["counts"]["success"] == 6
    merged = fs.cat_file(f"{bucket}/raw/exp2/pick_expert/episode_results.jsonl").decode().splitlines()
    assert [json.loads(line)["episode"] for line in merged] == list(range(30))
    assert fs.exists(f"{bucket}/raw/exp2/pick_expert/parts/shard-000.jsonl")  # logs stay


def test_wrong_secret_is_refused(s3_env, tmp_path: Path, monkeypatch):
    endpoint, key, secret, bucket = s3_env
    fs = s3fs_client(endpoint, key, secret)
    src = make_sample_output(tmp_path / "out", episodes_a=10)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(UserError) as err:
        collect([str(src)], f"s3://{bucket}/refused/exp3")
    assert "access denied" in err.value.line()

    # The command line: exit 2, one line; endpoint from --s3-endpoint.
    env = {**os.environ, "AWS_SECRET_ACCESS_KEY": "not-the-secret"}
    env.pop("EVALFLEET_S3_ENDPOINT", None)
    proc = subprocess.run([sys.executable, "-m", "evalfleet.cli", "collect", str(src), "--output",
                           f"s3://{bucket}/refused/exp3", "--s3-endpoint", endpoint],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "access denied" in proc.stderr and proc.stderr.strip().count("\n") == 0
    assert not fs.exists(f"{bucket}/refused")

    # The right secret through the same command works.
    env["AWS_SECRET_ACCESS_KEY"] = secret
    proc = subprocess.run([sys.executable, "-m", "evalfleet.cli", "collect", str(src), "--output",
                           f"s3://{bucket}/accepted/exp3", "--s3-endpoint", endpoint],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert fs.exists(f"{bucket}/accepted/exp3/index.html")
