"""The local Slurm cluster works the way the Slurm backend needs: job arrays with a throttle, accounting (sacct),
`sbatch --test-only`, and how a time limit shows in sacct. `scontrol requeue` of a running task and a task killed
for its memory are checked through evalfleet itself (test_slurm_cluster.py), not twice.

Found here (Slurm 22.05, jobacct_gather/linux, task/none): a job past its time limit is TIMEOUT in sacct, but time
limits are whole minutes and slurmctld checks them every 30 s, so it takes 60-90 s (the slurm_cluster fixture
submits that job when the cluster comes up; it is checked last, while the other tests run). A job over --mem is
killed within ~1 s by OverMemoryKill, but sacct says FAILED with exit code 0:9 (its batch step CANCELLED), not
OUT_OF_MEMORY (that needs task/cgroup's OOM events); the reason is in the job's output: "Exceeded job memory
limit"."""

from __future__ import annotations

import subprocess
import time

import pytest

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
            "DEADLINE"}
WAIT_S = 120.0  # a safety net only: every wait below polls for a state


def _run(*args: str) -> str:
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"{' '.join(args)} failed ({done.returncode}): {done.stderr}"
    return done.stdout


def _sbatch(*args: str) -> str:
    return _run("sbatch", "--parsable", *args).strip().split(";")[0]


def _sacct(job: str, steps: bool = False) -> dict[str, tuple[str, str]]:
    """JobID -> (State, ExitCode) for the job's allocations (array tasks included), or its steps too."""
    out = _run("sacct", "-n", "-P", "-j", job, "-o", "JobID,State,ExitCode", *([] if steps else ["-X"]))
    rows = {}
    for line in out.splitlines():
        job_id, state, code = line.split("|")
        rows[job_id] = (state.split()[0], code)  # "CANCELLED by 0" -> "CANCELLED"
    return rows


def _wait(what: str, check, limit: float = WAIT_S):
    deadline = time.monotonic() + limit
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {limit:.0f}s waiting for {what}")
        time.sleep(0.3)


def _wait_done(job: str, tasks: int = 1) -> dict[str, tuple[str, str]]:
    def done():
        rows = _sacct(job)
        ended = {k: v for k, v in rows.items() if v[0] in TERMINAL}
        return ended if len(ended) == tasks and len(rows) == tasks else None

    return _wait(f"job {job} to end (sacct)", done)


def _squeue(job: str) -> list[tuple[str, str, str]]:
    out = _run("squeue", "-h", "-r", "-j", job, "-o", "%i|%t|%r")
    return [tuple(line.split("|")) for line in out.splitlines()]


@pytest.fixture
def jobs():
    """Job ids a test submits; whatever is still queued or running when it ends is cancelled."""
    submitted: list[str] = []
    yield submitted
    if submitted:
        subprocess.run(["scancel", *submitted], capture_output=True, timeout=60, check=False)


def test_array_with_throttle_runs_every_task_and_sacct_reports_completed(slurm_cluster, jobs, tmp_path):
    # Each task blocks until the test creates `go`, so the throttle can be seen holding the third one back.
    job = _sbatch("--array=0-2%2", f"--chdir={tmp_path}", "--output=task-%a.out", "--wrap",
                  "echo running > started-$SLURM_ARRAY_TASK_ID; while [ ! -e go ]; do sleep 0.1; done; "
                  "echo task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID")
    jobs.append(job)
    _wait("two array tasks to start", lambda: len(list(tmp_path.glob("started-*"))) == 2)
    rows = _squeue(job)
    assert sum(state == "R" for _, state, _ in rows) == 2, rows
    assert [reason for _, state, reason in rows if state == "PD"] == ["JobArrayTaskLimit"], rows
    (tmp_path / "go").touch()
    ended = _wait_done(job, tasks=3)
    assert ended == {f"{job}_{i}": ("COMPLETED", "0:0") for i in range(3)}
    for i in range(3):
        assert (tmp_path / f"task-{i}.out").read_text() == f"task {i} of {job}\n"


def test_test_only_accepts_a_script_and_rejects_a_bad_partition(slurm_cluster, tmp_path):
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=evalfleet-check\n#SBATCH --time=5\n#SBATCH --mem=100M\n"
                      "#SBATCH --array=0-9%3\necho hi\n")
    done = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "to start at" in done.stderr, done.stderr
    bad = subprocess.run(["sbatch", "--test-only", "--partition=nowhere", str(script)],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "invalid partition" in bad.stderr.lower(), bad.stderr
    assert _run("squeue", "-h", "-n", "evalfleet-check") == ""  # --test-only submits nothing


def test_a_job_past_its_time_limit_is_timeout_in_sacct(slurm_cluster):
    job = slurm_cluster.timeout_probe  # submitted when the cluster came up (--time=1, sleeps 600 s)
    ended = _wait_done(job)
    assert ended[job][0] == "TIMEOUT", ended
    elapsed = _run("sacct", "-n", "-P", "-X", "-j", job, "-o", "ElapsedRaw").split()
    print(f"time limit 1 min: TIMEOUT after {elapsed[0]}s")
