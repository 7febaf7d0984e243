"""Issue #52 finding 13: a real `evalfleet collect` stopped by SIGTERM or Ctrl-C while it merges (held at a gate
after its staging folder holds the first Run's merged records) removes its staging folder and leaves the output as
it was: exit 130, one line, no `.evalfleet-collect-*` beside the output."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalfleet_testkit import ROOT

# `evalfleet collect SRC --output DEST`, its first Run's digest held until the test signals the process.
GATED_COLLECT = """
import sys, time
from pathlib import Path
import evalfleet.outputs.collect as collect
from evalfleet.cli import main
gate = Path(sys.argv[1])
def held(*args, **kwargs):
    (gate / "waiting").write_text("")
    while True:
        time.sleep(0.02)
collect.digest_run = held
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_collect_removes_its_staging(tmp_path: Path, sample_output: Path, signum: int) -> None:
    gate, beside = tmp_path / "gate", tmp_path / "collected"
    gate.mkdir()
    beside.mkdir()
    dest = beside / "out"
    proc = subprocess.Popen([sys.executable, "-c", GATED_COLLECT, str(gate), "collect", str(sample_output),
                             "--output", str(dest)], cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120  # a bound on a hang, not a timing
        while not (gate / "waiting").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)
        (staging,) = beside.glob(".evalfleet-collect-*")
        assert any(p.is_file() for p in staging.rglob("*")), "the first Run's merged records are staged"
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert err.strip() == "evalfleet: interrupted", err
    assert list(beside.iterdir()) == [], [p.name for p in beside.iterdir()]  # no staging, no output written
