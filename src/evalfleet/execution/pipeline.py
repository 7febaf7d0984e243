"""The pipeline behind every entry point: `evalfleet.run(...)` in Python, `evalfleet run`, the Ray job's
entry point (which is `evalfleet run --backend ray` on the head node).

    load → prepare the output → plan → servers → execute shards on a backend → finish Runs → finalize

Each step is one function or backend call below; `run` strings them together. Nothing here prints a
table or parses arguments: the CLI does that with what `run` returns.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable, Iterable

from evalfleet import bounded_json
from evalfleet.backend_registry import DEFAULT_BACKEND
from evalfleet.errors import OutOfSpace, UserError, out_of_space
from evalfleet.execution.backends import Backend, ExecutionJob, WorkerResult, check_capabilities, get_backend
from evalfleet.execution.run_metadata import recorded
from evalfleet.execution.output_dir import default_output, output_folder, prepare_output, write_run_status
from evalfleet.execution.watchdog import WatchdogConfig
from evalfleet.execution.waves import execute_in_waves, has_stopping, stopped_runs
from evalfleet.experiment.loading import LoadedExperiment, load_experiment
from evalfleet.experiment.plan import Plan, make_plan
from evalfleet.experiment.validation import require_executable
from evalfleet.layout import METADATA_FILE, RUN_TIMINGS_FILE, internal_dir, run_status_path
from evalfleet.outputs.finalize import Preload, finalize
from evalfleet.outputs.trajectory_dataset import recorded_runs, write_datasets
from evalfleet.store.automatic import add_if_named
from evalfleet.outputs.output_lock import OutputLock
from evalfleet.outputs.result import ExperimentResult
from evalfleet.outputs.tracking import check_tracking, log_to_trackers
from evalfleet.rollout.records import DECISION_FIELDS
from evalfleet.rollout.records import is_decided, latest_records
from evalfleet.rollout.timings import PhaseTimings
from evalfleet.secrets import exported


def stderr_log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def load(experiment: str | os.PathLike[str] | LoadedExperiment, overrides: Iterable[str] = ()) -> LoadedExperiment:
    """An Experiment file (with overrides), or one already loaded (then `overrides` must be empty)."""
    if isinstance(experiment, LoadedExperiment):
        if list(overrides):
            raise UserError("overrides apply when loading: pass the file's path, not a loaded Experiment",
                            where=experiment.path)
        return experiment
    return load_experiment(os.fspath(experiment), list(overrides))


def check_shard_size(shard_size: int | None) -> None:
    if shard_size is not None and (isinstance(shard_size, bool) or shard_size <= 0):
        raise UserError("--shard-size must be a positive number of episodes", where="command line",
                        key="--shard-size")


def run(experiment: str | os.PathLike[str] | LoadedExperiment, *, overrides: Iterable[str] = (),
        output: str | os.PathLike[str] | None = None, backend: str = DEFAULT_BACKEND, workers: int | None = None,
        resume: bool = False, progress: bool = True, shard_size: int | None = None,
        watchdog: WatchdogConfig | None = None,
        log: Callable[[str], None] = stderr_log, tracking_step: int | None = None) -> ExperimentResult:
    """Run the whole Experiment on `backend` and collect it; the typed result (per-Run counts and rates with
    95% intervals, statuses, the report's path). The results then go to the Experiment's `tracking:` sinks
    (outputs/tracking: a sink that fails is one warning line), at `tracking_step` (evaluate's `step`).

    `backend`: a registered backend's name (evalfleet/backend_registry.py), its settings given as overrides
    under its root (`ray.address=auto`); `output`: the folder (default outputs/<name>-<time>); `resume`:
    continue an interrupted folder of the same Experiment; `workers`: parallel runners (default: this
    machine's CPUs, or the Ray cluster's); `progress`: a live progress bar on stderr. Bad input raises
    UserError before anything is written, as does an output folder another run is writing; Ctrl-C stops every
    runner, keeps what finished and re-raises KeyboardInterrupt; a full disk raises OutOfSpace (an OSError), the
    metadata marked failed."""
    loaded = load(experiment, overrides)
    chosen = get_backend(backend, loaded.backend_settings, workers=workers)
    try:
        out, lock = prepare(loaded, chosen, output, resume=resume, shard_size=shard_size)
    except BaseException:
        chosen.close()  # what the backend's checks started (the local backend's runner template)
        raise
    with lock:  # held until the run ends: a second writer of `out` is refused (outputs/output_lock.py)
        try:
            preloading = Preload()  # finalize's imports, begun while the workers run
            # experiment_metadata.json: starting, running, then how it ended
            with recorded(out, loaded, backend=chosen.name, resume=resume, step=tracking_step) as metadata:
                metadata.running()
                plan, results = execute(loaded, out, chosen, shard_size=shard_size, watchdog=watchdog,
                                        progress=progress, log=log, preloading=preloading)
                finish_runs(plan, out, results)
                preloading.wait()
                # Every Run has ended: the report about to be written shows the run finished (a failure of the
                # collect itself still turns it failed on the way out).
                metadata.set_status("finished")
                result = finalize_output(loaded, out)
            log_to_trackers(loaded, out, result, step=tracking_step, log=log)
            add_if_named(str(out), loaded.experiment.store, log=log)  # the results store, when one is named
        except OSError as exc:
            if not out_of_space(exc):
                raise
            # The metadata says failed (run_metadata frees its reserve for that); one line, not a traceback.
            raise OutOfSpace(exc, where=str(out), fix=f"the run is marked failed in {METADATA_FILE}; free space, "
                             f"then continue with: evalfleet run --resume{chosen.resume_hint} --output {out}"
                             ) from None
    return result


def prepare(loaded: LoadedExperiment, backend: Backend, output: str | os.PathLike[str] | None, *, resume: bool,
            shard_size: int | None = None) -> tuple[Path, OutputLock]:
    """Every check that can refuse the run, then the output folder (new, or the same Experiment's to resume) and
    its lock, for the caller to hold while it writes there."""
    check_shard_size(shard_size)
    require_executable(loaded.experiment.runs, loaded.path)
    check_capabilities(loaded, backend.name, submitting=False)
    backend.check()
    check_tracking(loaded)  # every sink's package installed
    out = output_folder(output, where="evalfleet.run", key="output") if output is not None else default_output(loaded)
    backend.check_experiment(loaded, out)  # the backend's own checks (servers, settings), before any file
    return out, prepare_output(out, loaded, resume=resume)


def execute(loaded: LoadedExperiment, out: Path, backend: Backend, *, shard_size: int | None = None,
            watchdog: WatchdogConfig | None = None, progress: bool = True, log: Callable[[str], None] = stderr_log,
            preloading: Preload | None = None) -> tuple[Plan, list[WorkerResult]]:
    """Plan for the backend's capacity, start the servers the plan needs, run every pending shard; `preloading`
    is started while the workers run (`ExecutionJob.background_work`)."""
    try:
        with exported(loaded.secrets):  # runners and servers inherit them; no file holds them
            return _execute(loaded, out, backend, shard_size=shard_size, watchdog=watchdog, progress=progress,
                            log=log, preloading=preloading)
    except KeyboardInterrupt:
        log(f"interrupted: every worker stopped; finished episodes are kept. Continue with: "
            f"evalfleet run --resume{backend.resume_hint} --output {out}")
        raise
    finally:
        backend.close()


def _execute(loaded: LoadedExperiment, out: Path, backend: Backend, *, shard_size: int | None,
             watchdog: WatchdogConfig | None, progress: bool,
             log: Callable[[str], None], preloading: Preload | None = None) -> tuple[Plan, list[WorkerResult]]:
    capacity = backend.open()
    plan = make_plan(loaded, shard_size=shard_size, workers=capacity, taper=getattr(backend, "cheap_shards", False))
    log(f"{loaded.experiment.name}: {len(plan.runs)} Runs, {plan.total_episodes} episodes, "
        f"{len(plan.shards)} shards on {backend.name} ({min(capacity, len(plan.shards))} workers) → {out}")
    job = ExecutionJob(loaded, plan, out, watchdog or WatchdogConfig.local(), show_progress=progress, log=log,
                       background_work=preloading.start if preloading else None)
    serving, started = PhaseTimings(), time.perf_counter()
    with backend.serve(job) as experiment_file:
        serving.add("server_start", time.perf_counter() - started)  # the plan's servers started and healthy
        serving.flush(internal_dir(out) / RUN_TIMINGS_FILE, run="", shard="")
        if has_stopping(plan):  # sequential stopping: waves of shards until no Run needs more
            return plan, execute_in_waves(job, backend, experiment_file, log)
        return plan, backend.execute(job, experiment_file)


def spec_mismatch(out: Path, run: str) -> str | None:
    """The reason a runner refused this Run before its first episode (see worker.report_spec_mismatches):
    its policy does not fit its environment, or its environment cannot be built from its options."""
    from evalfleet.execution.worker import REFUSED_RUNS

    try:
        status = bounded_json.loads(run_status_path(out, run).read_text())
    except (OSError, ValueError):
        return None
    if isinstance(status, dict) and status.get("failed_because") in REFUSED_RUNS:
        return str(status.get("reason") or status["failed_because"])
    return None


def finish_runs(plan: Plan, out: Path, results: list[WorkerResult]) -> None:
    """Mark each Run completed or failed (with the reason a worker gave up) in its run_status.json; a Run that
    sequential stopping ended early is completed with `stopped_at` and the reason, its plan cut there."""
    stopped = stopped_runs(out, plan)
    gave_up: dict[str, str] = {}
    for r in results:
        if r.problem:
            for shard in r.shards:
                gave_up.setdefault(shard.run, f"worker {r.worker} gave up: {r.problem}")
    for name, rp in plan.runs.items():
        refused = spec_mismatch(out, name)
        if refused:  # its policy does not fit its environment: no episode ran, the runner said why
            write_run_status(out, name, state="failed", reason=refused)
            continue
        records = latest_records(out, name, rp.num_episodes, keep=DECISION_FIELDS)  # not every record whole
        planned = stopped[name][0] if name in stopped else rp.num_episodes
        if planned is None:
            missing = 0 if records else 1
        else:
            missing = sum(1 for i in range(planned)
                          if i not in records or not is_decided(records[i], rp.run.max_attempts))
        if name in stopped and not missing:
            write_run_status(out, name, state="completed", reason=stopped[name][1], stopped_at=planned,
                             planned_episodes=planned, max_episodes=rp.num_episodes)
        elif missing:
            reason = f"{missing} episodes not finished" + (f"; {gave_up[name]}" if name in gave_up else "")
            write_run_status(out, name, state="failed", reason=reason)
        else:
            write_run_status(out, name, state="completed", reason=None)


def finalize_output(loaded: LoadedExperiment, out: Path) -> ExperimentResult:
    """Collect in place, plots, index.html (records read once); the typed result in the Experiment's order."""
    done = finalize(out)
    if done.plot_problem:
        stderr_log(f"plot skipped: {done.plot_problem}")
    recorded = recorded_runs(loaded.experiment.runs)
    if recorded:  # after the report: a dataset is written from what collect left
        write_datasets(out, recorded, experiment=loaded.experiment.name, log_line=stderr_log)
    return ExperimentResult.from_json(loaded.experiment.name, out, done.result, order=list(loaded.experiment.runs),
                                      report=done.report, plots=done.plots)
