"""The local Slurm cluster (scripts/slurm-local.sh) for the Slurm tests: started once per session, stopped at the
end only if this session started it. Skips, saying why, only where it cannot start (not root, apt unreachable)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "slurm-local.sh"
CANNOT_START = 3  # the script's exit status for "cannot start here"


@dataclass(frozen=True)
class SlurmCluster:
    state: Path
    conf: Path
    timeout_probe: str  # a job with --time=1 submitted at start: TIMEOUT 60-90 s later, while other tests run
    partition: str = "debug"


def _script(command: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), command], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="session")
def slurm_cluster():
    if os.geteuid() != 0:
        reason = "local Slurm cluster: needs root (scripts/slurm-local.sh installs packages and runs the daemons)"
        print(reason, file=sys.stderr)
        pytest.skip(reason)
    state = Path(os.environ.get("EVALFLEET_SLURM_STATE", "/tmp/evalfleet-slurm"))
    conf = state / "etc" / "slurm.conf"
    already_running = _script("status", timeout=60).returncode == 0
    started = _script("start", timeout=900)
    if started.returncode == CANNOT_START:
        reason = "local Slurm cluster: " + (started.stderr.strip().splitlines() or ["cannot start"])[-1]
        print(reason, file=sys.stderr)
        pytest.skip(reason)
    if started.returncode != 0:
        pytest.fail(f"scripts/slurm-local.sh start failed ({started.returncode}):\n{started.stdout}\n{started.stderr}")
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(conf)
    probe = subprocess.run(
        ["sbatch", "--parsable", "--time=1", "--job-name=evalfleet-timeout-probe", f"--chdir={state}",
         "--output=/dev/null", "--wrap", "exec sleep 600"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.strip().split(";")[0]
    try:
        yield SlurmCluster(state=state, conf=conf, timeout_probe=probe)
    finally:
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        if not already_running:
            stopped = _script("stop", timeout=120)
            if stopped.returncode != 0:
                print(f"scripts/slurm-local.sh stop failed:\n{stopped.stdout}\n{stopped.stderr}", file=sys.stderr)


@pytest.fixture(scope="session")
def past_its_time_limit(slurm_cluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An Experiment submitted with a one-minute limit whose array tasks outlive it (a setup line sleeps in them,
    not in the collect job: no CPU taken from the other tests). The first cluster test asks for it, so Slurm's
    60-90 s to TIMEOUT pass while the other Slurm tests run; the test that reads the outcome is in the file that
    runs last (test_slurm_time_limit.py)."""
    from evalfleet.cli import main

    tmp = tmp_path_factory.mktemp("time_limit")
    exp = tmp / "slurm_time_limit.yaml"
    exp.write_text(yaml.safe_dump({"name": "slurm_time_limit", "seed": 0,
                                   "shared": {"rollout_limit": {"num_episodes": 2}},
                                   "runs": {"expert": {"environment": {"type": "metaworld", "task": "push-v3"},
                                                       "policy": {"type": "metaworld_expert"}}}}, sort_keys=False))
    out = tmp / "out"
    sleep_in_tasks = 'slurm.setup=["[ -z \\"${SLURM_ARRAY_TASK_ID:-}\\" ] || sleep 600"]'
    assert main(["submit", str(exp), "slurm.time=1", "slurm.signal_lead_s=0", sleep_in_tasks,
                 "slurm.cpus_per_task=1", "slurm.server_cpus=1", "--backend", "slurm", "--output-dir", str(out)]) == 0
    return out
