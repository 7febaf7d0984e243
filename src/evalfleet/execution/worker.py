"""One runner process (`evalfleet runner`, started by every backend through `invocation.runner_command`):
load the Experiment, pick its shards, run them in order with a heartbeat, stop cleanly on SIGTERM/SIGINT
or when its supervisor dies."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from evalfleet.errors import UserError
from evalfleet.execution.invocation import parse_shard
from evalfleet.execution.output_dir import write_run_status
from evalfleet.experiment.loading import load_experiment
from evalfleet.experiment.plan import Shard, make_plan
from evalfleet.experiment.validation import require_executable
from evalfleet.interpreter import drop_working_folder
from evalfleet.rollout.garbage import GarbageBound
from evalfleet.rollout.heartbeat import HEARTBEAT_ENV, SUPERVISOR_ENV, HeartbeatWriter
from evalfleet.rollout.runner import run_shards
from evalfleet.rollout.timings import record_worker_start

EXIT_STOPPED = 143
SPEC_MISMATCH = "spec_mismatch"
ENVIRONMENT_ERROR = "environment_error"
REFUSED_RUNS = (SPEC_MISMATCH, ENVIRONMENT_ERROR)  # `failed_because` of a Run that ran no episode, once


def report_spec_mismatches(out: Path, outcomes: list[Any]) -> None:
    """A Run whose policy does not fit its environment, or whose environment its options cannot build, ran
    no episode: say so in its run_status.json (`failed_because: spec_mismatch` | `environment_error`, the
    one-line reason), which `pipeline.finish_runs` keeps. The worker itself still exits 0: restarting it
    would only fail the same way again."""
    for run in dict.fromkeys(o.run for o in outcomes if o.spec_mismatch):
        line = next(o.spec_mismatch for o in outcomes if o.run == run and o.spec_mismatch)
        print(f"evalfleet runner: {line}", file=sys.stderr, flush=True)
        write_run_status(out, run, state="failed", failed_because=SPEC_MISMATCH, reason=f"{SPEC_MISMATCH}: {line}")
    for run in dict.fromkeys(o.run for o in outcomes if o.environment_error):
        line = next(o.environment_error for o in outcomes if o.run == run and o.environment_error)
        print(f"evalfleet runner: {line}", file=sys.stderr, flush=True)
        write_run_status(out, run, state="failed", failed_because=ENVIRONMENT_ERROR,
                         reason=f"{ENVIRONMENT_ERROR}: {line}")


def _stop_when_orphaned(stop: threading.Event) -> None:
    """A runner whose supervisor died (e.g. SIGKILL of `evalfleet run`) stops instead of writing on
    behind the back of the next `--resume`: when its parent changes, or when the supervisor the watchdog named
    (EVALFLEET_SUPERVISOR_PID) is gone though the parent is another process — which is how a runner started
    after its supervisor died finds itself (its parent already init, or a subreaper)."""
    parent = os.getppid()
    supervisor = _supervisor_pid()

    def orphaned() -> bool:
        if os.getppid() != parent:
            return True
        return supervisor is not None and supervisor != parent and not _alive(supervisor)

    def watch() -> None:
        while not stop.wait(0.5):
            if orphaned():
                stop.set()

    threading.Thread(target=watch, daemon=True, name="orphan-check").start()


def _supervisor_pid() -> int | None:
    value = os.environ.get(SUPERVISOR_ENV, "")
    return int(value) if value.isdigit() and 0 < int(value) < 2**31 else None  # else no pid: not watched


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        pass
    return True


def run_worker(experiment: str, output: str | Path, *, overrides: list[str] = (), shards: list[str] = (),
               runs: list[str] = (), heartbeat: str | None = None, claim_dir: str | None = None,
               worker_id: str = "0", feed: str | None = None) -> int:
    """Run the given shards (RUN:START:STOP), every shard of `runs`, every shard, or (`feed`) those a driver
    releases until it closes its feed; 0 done, 143 stopped."""
    started = time.perf_counter()
    drop_working_folder()  # what an Experiment's `import:` names comes from installed modules, never from here
    loaded = load_experiment(experiment, list(overrides))
    require_executable(loaded.experiment.runs, experiment)
    plan = make_plan(loaded, workers=1)
    chosen: list[Shard] = [parse_shard(text, plan, experiment) for text in shards]
    for name in runs:
        if name not in plan.runs:
            raise UserError(f"--run {name!r}: no such Run in {experiment}", where="command line", key="--run")
        chosen += [s for s in plan.shards if s.run == name]
    if not shards and not runs:
        chosen = plan.shards
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    _stop_when_orphaned(stop)
    beat = HeartbeatWriter(heartbeat or os.environ.get(HEARTBEAT_ENV), "")
    beat.beat(state="starting")
    if feed:
        if not claim_dir or shards or runs:
            raise UserError("--feed takes its shards from the feed: give --claim-dir, and no --shard or --run",
                            where="command line", key="--feed")
        from evalfleet.execution.shard_feed import fed_shards

        chosen = fed_shards(Path(feed), plan, Path(claim_dir), str(worker_id), stop, beat, where=experiment)
    elif claim_dir:
        from evalfleet.execution.claims import claim_shards

        chosen = claim_shards(chosen, Path(claim_dir), str(worker_id))
    record_worker_start(time.perf_counter() - started)  # loading and planning: the timings' `start` phase
    # This process is the runner's own: what is alive once a Run's env and policy are built is frozen out of
    # the garbage collector, and old garbage collected once a second (rollout/garbage.py).
    outcomes = run_shards(plan.runs, chosen, Path(output), heartbeat=beat, stop=stop, garbage=GarbageBound())
    report_spec_mismatches(Path(output), outcomes)
    if stop.is_set():
        return EXIT_STOPPED
    beat.done()
    return 0
