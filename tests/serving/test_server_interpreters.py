"""A server binding's own interpreter (`python:`): one that does not exist or cannot run is refused before the
output folder is made; one that prints garbage and exits is reported at once, with a short, printable tail of
its log and no secret in it."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
import yaml

from evalfleet.serving.process import LOG_TAIL_CHARS, ServerProcess, printable_tail

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from evalfleet_testkit import run_evalfleet

SECRET = "k3y-that-must-not-show"


def experiment(tmp_path: Path, python: str, **policy) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "interp", "seed": 0, "runs": {"served": {
        "environment": {"type": "pusht", "obs_type": "state", "actions": "normalized", "max_steps": 2},
        "policy": {"type": "openpi_remote", "serve": {"type": "zero"}, "python": python, **policy},
        "rollout_limit": {"num_episodes": 1}}}}))
    return path


def fake_python(tmp_path: Path, body: str, mode: int = 0o755) -> Path:
    """A venv folder whose bin/python is a shell script."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    script = venv / "bin" / "python"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(mode)
    return venv


@pytest.mark.parametrize("python", ["/no/such/python3", "/bin/false", "not-executable"])
def test_a_missing_or_unusable_interpreter_is_refused_before_the_output_folder(tmp_path, python):
    if python == "not-executable":
        python = str(fake_python(tmp_path, "exit 0\n", mode=stat.S_IRUSR | stat.S_IWUSR))
    out = tmp_path / "out"
    done = run_evalfleet("run", str(experiment(tmp_path, python)), "--output", str(out), "--workers", "1")
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "runs.served.policy.python" in done.stderr
    assert not out.exists()


GARBAGE = r"""printf '\033[2J\033]0;pwned\007'
head -c 300000 /dev/zero | tr '\0' 'x'
printf '\r\n\000\001\033[31mred\n'
env | grep EVALFLEET_SECRET_
exit 3
"""


def test_a_garbage_printing_interpreter_is_reported_at_once_with_a_bounded_clean_tail(tmp_path):
    venv = fake_python(tmp_path, GARBAGE)
    out = tmp_path / "out"
    done = run_evalfleet("run", str(experiment(tmp_path, str(venv), api_key=SECRET)), "--output", str(out),
                         "--workers", "1")
    assert done.returncode == 2 and "exited with code 3 before it was ready" in done.stderr, done.stderr[-3000:]
    assert len(done.stderr) < 2 * LOG_TAIL_CHARS + 1000
    assert SECRET not in done.stderr and "\033" not in done.stderr and "\x00" not in done.stderr
    assert "?[31mred" in done.stderr  # what it printed last is shown, made printable


def test_printable_tail_reads_only_the_end_of_a_huge_log(tmp_path):
    log = tmp_path / "server.log"
    with open(log, "wb") as f:
        f.write(os.urandom(5 * 2**20))
        f.write(f"\nlast line with {SECRET} and s3://AK:SK@bucket/x\n".encode())
    tail = printable_tail(log, secrets=[SECRET])
    assert len(tail) <= LOG_TAIL_CHARS + 3 and tail.endswith("last line with *** and s3://***@bucket/x")
    assert all(c in "\n\t" or c.isprintable() for c in tail)


def test_wait_healthy_reports_an_exit_with_the_masked_tail(tmp_path):
    proc = ServerProcess(["sh", "-c", f"echo token {SECRET}; exit 4"], protocol="openpi",
                         log_path=tmp_path / "log", api_key=SECRET)
    proc.start()
    from evalfleet.errors import InfrastructureError

    with pytest.raises(InfrastructureError, match="exited with code 4") as caught:
        proc.wait_healthy(600)  # an exit is seen at once, not at the deadline
    proc.stop()
    assert SECRET not in str(caught.value) and "token ***" in str(caught.value)
