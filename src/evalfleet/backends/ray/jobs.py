"""Ray Jobs: the whole evaluation submitted to a cluster as one job (`evalfleet submit --backend ray`)."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from evalfleet.errors import UserError
from evalfleet.backends.ray.common import import_ray
from evalfleet.layout import EXPERIMENT_FILE


def submit_ray_job(exp_path: str | Path, overrides: list[str], address: str, *, output: str | None = None,
                   workers: int | None = None, shard_size: int | None = None) -> str:
    """Submit the whole evaluation as a Ray job (Jobs API at `address`, e.g. http://HEAD:8265) and return its ID.

    The job's working_dir holds only the resolved experiment file (overrides already applied); its entrypoint
    is `evalfleet run experiment.yaml --backend ray --ray-address auto --no-progress --output OUTPUT`, so the
    evaluation runs on the cluster and writes OUTPUT on the head node (default: ~/evalfleet-outputs/<name>-<time>
    there; the job's logs end with the summary table and the report's path)."""
    import_ray()
    import shlex

    from evalfleet.experiment.loading import load_experiment
    from evalfleet.experiment.validation import require_executable

    loaded = load_experiment(exp_path, overrides)
    require_executable(loaded.experiment.runs, exp_path)
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError as exc:
        raise UserError("submitting Ray jobs needs the Jobs client: pip install 'ray[default]'",
                        where="--backend ray") from exc
    entry = ["evalfleet", "run", EXPERIMENT_FILE, "--backend", "ray", "--ray-address", "auto", "--no-progress"]
    if workers:
        entry += ["--workers", str(workers)]
    if shard_size:
        entry += ["--shard-size", str(shard_size)]
    command = shlex.join(entry)
    if output:
        command += f" --output {shlex.quote(output)}"
    else:  # the job's working_dir is temporary: keep the results under the head node's home
        command += f' --output "$HOME"/{shlex.quote(job_output_dir(loaded))}'
    staging = Path(tempfile.mkdtemp(prefix="evalfleet-ray-job-"))
    try:
        (staging / EXPERIMENT_FILE).write_text(loaded.resolved_yaml(), encoding="utf-8")
        try:
            client = JobSubmissionClient(address)
        except Exception as exc:  # connection problems are the user's to fix
            raise UserError(f"cannot reach the Ray Jobs API at {address}: {exc}", where="--ray-address") from exc
        runtime_env: dict[str, Any] = {"working_dir": str(staging)}
        if loaded.secrets:  # the job's runners and servers read them from the environment (evalfleet.secrets)
            runtime_env["env_vars"] = dict(loaded.secrets)
        return client.submit_job(entrypoint=command, runtime_env=runtime_env,
                                 metadata={"evalfleet_experiment": loaded.experiment.name})
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def job_output_dir(loaded: Any) -> str:
    """Where a submitted job writes by default, relative to the head node's home."""
    return f"evalfleet-outputs/{loaded.experiment.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def wait_for_job(address: str, job_id: str, timeout_s: float = 3600.0, poll_s: float = 1.0) -> tuple[str, str]:
    """Block until the job ends; (final status, its logs)."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    client = JobSubmissionClient(address)
    deadline = time.monotonic() + timeout_s
    while True:
        status = client.get_job_status(job_id)
        if status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED) or time.monotonic() > deadline:
            return str(status), client.get_job_logs(job_id)
        time.sleep(poll_s)
