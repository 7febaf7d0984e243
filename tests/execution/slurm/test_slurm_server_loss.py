"""Issue #24, must-show 2's last item, on the local Slurm cluster (`slurm_cluster`): the server job of a served
Run killed outright (scancel: it never comes back by itself) while the Run has work pending. The blocking
driver resubmits it from its script; the runners rewire to the new address; the episodes the outage hit are
infrastructure errors (`server_lost`), retried: the run completes with exit 0 and every record that counts is
the one `--backend local` writes but for its attempt (no failure, no error left).

The kill lands while work is pending on any machine: the served policy is the gated expert *inside the server
job* (the server process starts one episode freely, then holds the next reset at the gate), and the test kills
the server job once that server process waits there; the gate is released only once the driver has
resubmitted the job (jobs.json names a new id)."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

from evalfleet.cli import main
from evalfleet.backends.slurm.paths import SlurmPaths
from evalfleet.backends.slurm.render import read_jobs

from test_slurm_cluster import EXPERT, SMALL, assert_same_as_local, gated_plugins, records, run_beside, wait_for, write

__all__ = ["gated_plugins"]  # the fixture, used by name below


def served_gated(gate: Path) -> dict:
    gate.mkdir(exist_ok=True)
    return {"environment": {"type": "metaworld", "task": "push-v3"},
            "policy": {"type": "openpi_remote", "allow_unauthenticated": True,
                       "serve": {"type": "test_gated_expert", "gate": str(gate), "after_episodes": 1}}}


def kill_the_server(out: Path, gate: Path, errors: list[BaseException], ended: threading.Event) -> None:
    """Once the server process waits at the gate (the served Run has work pending), scancel its job; once the
    driver has resubmitted it (a new id in jobs.json), release the gate."""
    try:
        paths = SlurmPaths(out.absolute())
        wait_for(lambda: ended.is_set() or (paths.jobs.exists() and any(gate.glob("*.waiting"))), 120,
                 "the server process at the gate")
        print("killing", flush=True)
        if ended.is_set():
            return  # the run ended early: its exit code says why
        old = read_jobs(paths)["server_jobs"]
        subprocess.run(["scancel", *old.values()], check=True)
        wait_for(lambda: ended.is_set() or read_jobs(paths)["server_jobs"] != old, 120,
                 "the driver to resubmit the server job")
    except BaseException as exc:  # noqa: BLE001 - re-raised by the test's thread
        errors.append(exc)
    finally:
        (gate / "release").touch()


def test_a_killed_server_job_is_resubmitted_and_its_episodes_retried(slurm_cluster, gated_plugins, tmp_path: Path,
                                                                     capsys) -> None:
    gate = tmp_path / "gate"
    exp = write(tmp_path, {"served": served_gated(gate), "expert": EXPERT}, 3, name="slurm_server_loss")
    on_slurm, local = tmp_path / "slurm", tmp_path / "local"
    code, errors = run_beside(kill_the_server, on_slurm, gate, ["run", str(exp), *SMALL, "--backend", "slurm",
                              "--workers", "1", "--output", str(on_slurm), "--no-progress"])
    err = capsys.readouterr().err
    assert not errors, (errors, err)
    assert code == 0, err
    (server_job,) = read_jobs(SlurmPaths(on_slurm.absolute()))["server_jobs"].values()
    assert f"ended (CANCELLED); resubmitted as {server_job}" in err, err
    assert main(["run", str(exp), "--workers", "1", "--output", str(local), "--no-progress"]) == 0  # gate released
    hit = {run: assert_same_as_local(on_slurm, local, run) for run in ("served", "expert")}
    assert all(len(records(on_slurm, run)) == 3 for run in hit)
    assert hit["served"] and not hit["expert"]  # the episode the outage hit: server_lost, then played again
