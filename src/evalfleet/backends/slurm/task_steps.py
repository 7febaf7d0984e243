"""What runs inside the Slurm jobs (``python -P -m evalfleet.backends.slurm serve|wire|collect``):

* `serve`: a server job's `ServerSupervisor` on this node, its address written atomically to
  OUT/.evalfleet/slurm/servers/<id>.json once healthy, serving until SIGTERM (then the file is removed);
* `wire`: inside what an array task's watchdog supervises, wait (slurm.server_wait_s) for the servers'
  addresses, write this task's Experiment wired to them, then exec the runner (a restart re-reads them);
* `collect`: after the array (--dependency=afterany), each array task's state from sacct as a `WorkerResult`,
  the Runs finished as the pipeline does, the server jobs cancelled, the output folder finalized, the
  submission's experiment_metadata.json set finished (or failed) and the results logged to the `tracking:`
  sinks (execution/cluster_metadata.py).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from evalfleet.execution.backends import WorkerResult
from evalfleet.execution.claims import claimed_by
from evalfleet.execution.output_dir import write_atomic
from evalfleet.backends.slurm.commands import TaskState, sacct, scancel, settled_array_states
from evalfleet.backends.slurm.paths import SERVER_LOG, SlurmPaths
from evalfleet.backends.slurm.render import read_jobs
from evalfleet.experiment.plan import Plan
from evalfleet.layout import EXPERIMENT_FILE, server_log_path
from evalfleet.process_exit import EXIT_SERVER_MOVED

POLL_S = 1.0
REWIRE_GRACE_S = 10.0
EXIT_REWIRE = EXIT_SERVER_MOVED  # the wire step's exit when a server moved: the watchdog relaunches it


def _server_plans(loaded: Any) -> dict[str, Any]:
    from evalfleet.serving.planning import plan_server_groups

    exp = loaded.experiment
    return {p.id: p for p in plan_server_groups(dict(exp.runs), exp.server_sharing, exp.seed)}


def _load(out: Path) -> Any:
    from evalfleet.experiment.loading import load_experiment

    return load_experiment(str(out / EXPERIMENT_FILE), [])


def serve(out: Path, server: str) -> int:
    """Run server `server` of OUT's Experiment on this node until SIGTERM; its address published once healthy."""
    from evalfleet.execution.servers import ServerSupervisor
    from evalfleet.backends.slurm.render import SERVER_BIND

    plans = _server_plans(_load(out))
    if server not in plans:
        print(f"evalfleet: no server {server!r} in {out / EXPERIMENT_FILE} (servers: {', '.join(plans)})",
              file=sys.stderr)
        return 2
    plan = plans[server]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    paths = SlurmPaths(out)
    address = paths.server_address(server)
    supervisor = ServerSupervisor(plan.binding, plan.options, plan.context, server_log_path(out, plan.runs[0]),
                                  host=SERVER_BIND, name=f"server {server}",
                                  log=lambda line: print(f"evalfleet: {line}", flush=True))
    try:
        _, port = supervisor.start()
        host = socket.gethostname()
        write_atomic(address, json.dumps({"host": host, "port": port, "job": os.environ.get("SLURM_JOB_ID"),
                                          "restart": os.environ.get("SLURM_RESTART_COUNT", "0")}) + "\n")
        print(f"evalfleet: server {server} for {', '.join(plan.runs)} healthy on {host}:{port}", flush=True)
        while not stop.wait(POLL_S):
            pass
    finally:
        try:
            address.unlink()
        except OSError:
            pass
        supervisor.stop()
    return 0


def read_address(path: Path) -> tuple[str, int, str] | None:
    """(host, port, instance) of a published server; `instance` changes when its job restarts."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        return str(doc["host"]), int(doc["port"]), f"{doc.get('job')}.{doc.get('restart')}"
    except (OSError, ValueError, KeyError, TypeError):
        return None


def wired_document(out: Path, addresses: dict[str, tuple[str, int]]) -> dict[str, Any]:
    """OUT's resolved Experiment with every served Run's client pointed at its server's published address."""
    loaded = _load(out)
    plans = _server_plans(loaded)
    document = loaded.resolved_document()
    runs = dict(document["runs"])
    for server, (host, port) in addresses.items():
        plan = plans[server]
        for name in plan.runs:
            runs[name] = {**runs[name], "policy": plan.binding.wire_client(dict(runs[name]["policy"]), host, port)}
    return {**document, "runs": runs}


def _addresses(paths: SlurmPaths, servers: list[str]) -> dict[str, tuple[str, int, str]]:
    return {s: a for s in servers if (a := read_address(paths.server_address(s))) is not None}


def wire(out: Path, task: str, servers: list[str], wait_s: float, argv: list[str]) -> int:
    """Wait for every server's address, write this task's wired Experiment, run the runner (`argv`) and pass on
    its exit code. A server whose job restarts publishes a new address: the runner is stopped (between
    episodes; the one the outage hit is an infrastructure error, retried) and this step exits
    EXIT_REWIRE, so the watchdog starts it again, wired to the new address."""
    import subprocess

    paths = SlurmPaths(out)
    deadline = time.monotonic() + wait_s
    while len(addresses := _addresses(paths, servers)) < len(servers):
        if time.monotonic() >= deadline:
            missing = ", ".join(s for s in servers if s not in addresses)
            print(f"evalfleet: no address from the server job(s) {missing} after {wait_s:g} s"
                  f" (slurm.server_wait_s; see {paths.logs / SERVER_LOG.format(server='*')})", file=sys.stderr,
                  flush=True)
            return 1
        time.sleep(POLL_S)
    wired = {s: (h, p) for s, (h, p, _) in addresses.items()}
    write_atomic(paths.wired(task), yaml.safe_dump(wired_document(out, wired), sort_keys=False))
    print("evalfleet: servers " + ", ".join(f"{s} at {h}:{p}" for s, (h, p) in wired.items()), flush=True)
    stopping: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):  # the watchdog signals the group: the runner stops itself
        signal.signal(sig, lambda signum, _frame: stopping.append(signum))
    child = subprocess.Popen(argv)
    while True:
        try:
            return child.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            pass
        if stopping:
            continue
        now = _addresses(paths, servers)
        moved = [s for s in servers if s in now and now[s][2] != addresses[s][2]]
        if moved:
            print(f"evalfleet: server {', '.join(moved)} restarted at a new address: restarting the runner",
                  flush=True)
            child.terminate()
            try:
                child.wait(timeout=REWIRE_GRACE_S)
            except subprocess.TimeoutExpired:  # e.g. inside its client's reconnect loop: it keeps what finished
                child.kill()
                child.wait()
            return EXIT_REWIRE


def watchdog_reason(paths: SlurmPaths, task: int) -> str | None:
    try:
        status = json.loads(paths.status(task).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return status.get("reason") if isinstance(status, dict) and status.get("state") != "completed" else None


def slurm_said(paths: SlurmPaths, task: int) -> str | None:
    """The last `slurmstepd: error:` line Slurm wrote into the task's log (a memory limit exceeded, a time limit,
    a preemption, ...), without its `***` decoration; None when it wrote none."""
    try:
        with open(paths.runner_log(task), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    said = [line.partition("error:")[2].strip(" *") for line in tail.splitlines()
            if line.startswith("slurmstepd") and "error:" in line]
    said = [line for line in said if line and "CANCELLED AT" not in line] or said
    return said[-1] if said else None


def worker_results(paths: SlurmPaths, plan: Plan, array: str, workers: int,
                   states: dict[str, TaskState] | None, signal_lead_s: int = 0) -> list[WorkerResult]:
    """One WorkerResult per array task: its claimed shards, and (unless it completed) its Slurm job id, state
    and reason, with the watchdog's own reason when it gave up."""
    results = []
    for task in range(workers):
        result = WorkerResult(task, claimed_by(paths.claims, plan.shards, task))
        state = (states or {}).get(f"{array}_{task}")
        problem = state.problem() if state is not None else None
        if problem and state is not None and signal_lead_s and state.stopped_before_limit(signal_lead_s):
            problem += (f"; stopped {signal_lead_s} s before its time limit {state.time_limit} (--signal, "
                        "slurm.time): what finished is kept, --resume continues")
        if state is None and states is not None:
            problem = f"Slurm job {array}_{task}: no accounting record (never started?)"
        if problem:
            said = slurm_said(paths, task)
            problem += f"; Slurm: {said}" if said else ""
            detail = watchdog_reason(paths, task)
            problem += f"; watchdog: {detail}" if detail else ""
            if not result.shards:  # it ended before claiming a shard: every unfinished Run says why
                result.shards = list(plan.shards)
        result.error = problem
        results.append(result)
    return results


def server_losses(states: dict[str, TaskState] | None, server_jobs: dict[str, str]) -> dict[str, str]:
    """For the collect job: each server whose job ended before the runners did (its id and Slurm's final state):
    its Runs' episodes the outage hit are infrastructure errors, and `--resume` reruns what is unfinished."""
    lost = {}
    for server, job in server_jobs.items():
        state = (states or {}).get(str(job))
        if state is not None and state.final:
            lost[server] = (f"server job {job} (server {server}) ended ({state.state}) before the runners finished;"
                            " nothing resubmitted it (evalfleet submit has no driver): --resume reruns what is"
                            " unfinished")
    return lost


def blame_lost_servers(results: list[WorkerResult], plan: Plan, lost: dict[str, str],
                       runs_of: dict[str, list[str]]) -> None:
    """Every array task that ran a shard of a lost server's Runs carries why (so those Runs fail with it, where
    episodes are missing); where no task claimed one, the first task carries those Runs' shards and the reason."""
    for server, why in lost.items():
        runs = set(runs_of.get(server, ()))
        hit = [r for r in results if any(s.run in runs for s in r.shards)]
        if not hit and results:
            hit = [results[0]]
            hit[0].shards = [*hit[0].shards, *(s for s in plan.shards if s.run in runs)]
        for r in hit:
            r.error = f"{r.error}; {why}" if r.error else why


def server_runs(loaded: Any) -> dict[str, list[str]]:
    """server id → the Runs it serves."""
    return {s: list(p.runs) for s, p in _server_plans(loaded).items()}


def collect(out: Path) -> int:
    """The collect job: Run statuses from the array tasks' Slurm states, server jobs cancelled, the report."""
    from evalfleet.execution.cluster_metadata import finish_collected, track_collected
    from evalfleet.execution.invocation import parse_shard
    from evalfleet.execution.pipeline import finalize_output, finish_runs
    from evalfleet.outputs.storage import open_location
    from evalfleet.experiment.plan import make_plan

    paths = SlurmPaths(out)
    jobs = read_jobs(paths)
    loaded = _load(out)
    plan = make_plan(loaded, workers=1)
    plan.shards = [parse_shard(s, plan, str(paths.jobs)) for s in jobs.get("shards", [])] or plan.shards
    array = str(jobs.get("runners", ""))
    workers = int(jobs.get("workers", 1))
    server_jobs = {str(s): str(j) for s, j in (jobs.get("server_jobs") or {}).items()}
    lost = server_losses(sacct(server_jobs.values()), server_jobs)  # before the scancel below ends them all
    scancel(server_jobs.values())
    states = settled_array_states(array, workers)  # the array has ended; its accounting may lag a moment
    results = worker_results(paths, plan, array, workers, states, int(jobs.get("signal_lead_s") or 0))
    blame_lost_servers(results, plan, lost, server_runs(loaded))
    for r in results:
        if r.problem:
            print(f"evalfleet: array task {r.worker}: {r.problem}", flush=True)
    dest = open_location(str(out), role="output")
    try:
        finish_runs(plan, out, results)
        result = finalize_output(loaded, out)
    except BaseException as exc:  # the metadata says why, then the job fails as before
        finish_collected(dest, error=exc)
        raise
    finish_collected(dest)  # experiment_metadata.json: finished, with every host
    print(f"evalfleet: collected {out} → {result.report}", flush=True)
    track_collected(loaded, out, result=result, log=lambda line: print(f"evalfleet: {line}", flush=True))
    return 0
