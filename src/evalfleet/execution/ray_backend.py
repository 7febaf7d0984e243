"""The Ray backend: every shard is a Ray task that runs the runner under the watchdog on some node.

    evalfleet run EXP.yaml --backend ray [--ray-address ADDR]
    evalfleet submit EXP.yaml --backend ray --ray-address http://HEAD:8265

A shard task (1 CPU, retried by Ray when its worker dies) writes the single experiment file and the Run's
already-recorded episodes of its range into a private temp folder on its node, runs
`evalfleet runner EXP --output TMP --shard RUN:START:STOP` under `watchdog.supervise`, and streams every new
record line, in batches, to a `_RecordSink` actor. The driver drains the sink and appends the lines to
OUT/<run>/parts/<shard>.jsonl, so workers need no shared filesystem and the progress bar, run_status.json,
resume and summary are the local backend's. A retried or resumed task starts from every line the sink holds
for its range, so finished episodes are never run twice.

A Run with a served policy (a server binding whose `needs_server` is true) gets a placement group: bundle 0
holds a `_PolicyServer` actor (resources from `binding.resources`) that starts the server with
`ServerProcess` on a free port of its node and restarts it on the same port if it dies; the Run's shard tasks
go in the other bundles (PACK strategy) with the client options wired to that host and port. The server
is stopped and the group removed when the Run's shards are done. `server_sharing: per_policy` is not yet
honoured here: every served Run gets its own server.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from evalfleet.errors import UserError
from evalfleet.execution.local import WorkerResult
from evalfleet.execution.output_dir import INTERNAL_DIR, write_run_status
from evalfleet.execution.watchdog import WatchdogConfig, WatchdogResult
from evalfleet.experiment.plan import Plan, Shard

SHARD_TASK_RETRIES = 3  # Ray relaunches a shard task whose worker process or node died
PUSH_INTERVAL_S = 0.5  # how often a shard task sends its new record lines to the driver
SERVER_START_TIMEOUT_S = 300.0

RAY_MISSING = "the Ray backend needs Ray: pip install 'evalfleet[ray]' (or 'ray[default]>=2.40')"


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise UserError(RAY_MISSING, where="--backend ray") from exc
    return ray


# ------------------------------------------------------------------------------------------ the driver side


def run_ray(loaded: Any, out: Path, *, address: str | None = None, workers: int | None = None,
            shard_size: int | None = None, show_progress: bool = True,
            watchdog: WatchdogConfig | None = None) -> list[WorkerResult]:
    """Run every pending shard of `loaded` on Ray and write OUT like the local backend does.

    `address`: an existing cluster ("auto", "HOST:6379", "ray://..."), or None for a local instance sized to
    `workers` CPUs (default: this machine), dashboard off. If Ray is already initialised in this process it
    is used as is. Returns one WorkerResult per shard (for `finish_runs`); KeyboardInterrupt cancels every
    task and propagates (the folder is resumable)."""
    ray = _import_ray()
    from rich.console import Console

    from evalfleet.execution.local import LocalRun
    from evalfleet.execution.progress import ProgressTracker
    from evalfleet.experiment.plan import make_plan

    console = Console(stderr=True)
    started = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": "WARNING"}
        if address:
            ray.init(address=address, **kwargs)
        else:
            ray.init(num_cpus=workers or os.cpu_count() or 1, include_dashboard=False, **kwargs)
        started = True
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        plan = make_plan(loaded, shard_size=shard_size, workers=workers or cpus)
        console.print(f"[bold]{loaded.experiment.name}[/]: {len(plan.runs)} Runs, {plan.total_episodes} episodes, "
                      f"{len(plan.shards)} shards on Ray ({cpus} CPUs) → {out}")
        job = RayRun(plan, out, watchdog or WatchdogConfig(poll=0.5, term_grace=5.0, backoff=1.0, backoff_max=30.0))
        for name, rp in plan.runs.items():
            write_run_status(out, name, task=rp.task, policy=rp.policy, planned_episodes=rp.num_episodes,
                             state="running", reason=None)
        thread = threading.Thread(target=job.execute, daemon=True, name="ray-driver")
        thread.start()
        tracker = ProgressTracker(out, {n: (rp.num_episodes or 0, rp.run.max_attempts) for n, rp in plan.runs.items()})
        try:
            LocalRun(plan, out, 1, show_progress=show_progress)._watch([thread], tracker)
        except KeyboardInterrupt:
            job.stop.set()
            thread.join()
            raise
        thread.join()
        if job.crash is not None:
            raise job.crash
        return job.results
    finally:
        if started:
            ray.shutdown()


def existing_lines(out: Path, run: str) -> list[str]:
    """Every record line a Run's logs hold now (merged file first, then the parts)."""
    from evalfleet.rollout.runner import run_log_files

    lines: list[str] = []
    for path in run_log_files(out, run):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        lines += [line for line in text.splitlines() if line.strip()]
    return lines


@dataclasses.dataclass
class RayRun:
    plan: Plan
    out: Path
    watchdog: WatchdogConfig
    stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    results: list[WorkerResult] = dataclasses.field(default_factory=list)
    crash: BaseException | None = None
    servers: dict[str, Any] = dataclasses.field(default_factory=dict)  # Run → PolicyServer actor
    placements: dict[tuple[str, str], Any] = dataclasses.field(default_factory=dict)  # shard → placement group id

    def execute(self) -> None:
        try:
            self._execute()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            self.crash = exc

    def _execute(self) -> None:
        ray = _import_ray()
        internal = self.out / INTERNAL_DIR
        internal.mkdir(parents=True, exist_ok=True)
        sink = _sink_class(ray).remote({name: existing_lines(self.out, name) for name in self.plan.runs})
        document = self.plan.experiment.resolved_document()
        shards = sorted(self.plan.shards, key=lambda s: (s.start, list(self.plan.runs).index(s.run)))
        groups: dict[str, Any] = {}
        pending: dict[Any, tuple[int, Shard]] = {}
        left_per_run = {name: sum(1 for s in shards if s.run == name) for name in self.plan.runs}
        config = dataclasses.asdict(self.watchdog)
        task = _shard_task(ray)
        try:
            run_docs = {}
            for name, rp in self.plan.runs.items():
                run_docs[name], groups[name] = self._prepare_run(ray, name, rp, document)
            for index, shard in enumerate(shards):
                options: dict[str, Any] = {}
                group = groups.get(shard.run)
                if group is not None:
                    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

                    options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(placement_group=group)
                ref = task.options(**options).remote(run_docs[shard.run], shard.run, shard.start, shard.stop,
                                                     sink, config)
                pending[ref] = (index, shard)
            self.results = [WorkerResult(i, [s]) for i, s in enumerate(shards)]
            while pending:
                if self.stop.is_set():
                    for ref in pending:
                        ray.cancel(ref, force=True)
                    break
                done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0.5)
                self._drain(ray, sink)
                for ref in done:
                    index, shard = pending.pop(ref)
                    result = self.results[index]
                    try:
                        answer = ray.get(ref)
                        result.result = WatchdogResult(**answer["watchdog"])
                        self.placements[(shard.run, shard.id)] = answer.get("placement_group")
                        if answer.get("log_tail") and result.result.state != "completed":
                            _append(internal / f"ray-{shard.run}-{shard.id}.log", answer["log_tail"])
                    except Exception as exc:  # noqa: BLE001 - a task that failed for good fails its Run
                        result.error = f"Ray task failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                    left_per_run[shard.run] -= 1
                    if left_per_run[shard.run] == 0:
                        self._stop_server(ray, shard.run, groups)
            self._drain(ray, sink)
        finally:
            for name in list(self.servers):
                self._stop_server(ray, name, groups)
            ray.kill(sink)

    def _prepare_run(self, ray: Any, name: str, rp: Any, document: dict[str, Any]) -> tuple[str, Any]:
        """The single-Run experiment file for the Run's shard tasks, and its placement group (served Runs)."""
        from evalfleet.serving.bindings import binding_for

        doc = dict(document)
        run_doc = json.loads(json.dumps(document["runs"][name]))
        doc["runs"] = {name: run_doc}
        policy = dict(run_doc.get("policy") or {})
        policy_type = str(policy.get("type"))
        options = {k: v for k, v in policy.items() if k != "type"}
        binding = binding_for(policy_type)
        if binding is None or not binding.needs_server(options):
            return yaml.safe_dump(doc, sort_keys=False), None
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        res = binding.resources(options)
        server_bundle: dict[str, float] = {"CPU": float(res.cpus)}
        if res.gpus:
            server_bundle["GPU"] = float(res.gpus)
        runners = max(1, min(sum(1 for s in self.plan.shards if s.run == name), _runner_slots(ray, res.cpus)))
        group = placement_group([server_bundle] + [{"CPU": 1.0}] * runners, strategy="PACK", name=f"evalfleet-{name}")
        ray.get(group.ready(), timeout=SERVER_START_TIMEOUT_S)
        context = _policy_context(rp)
        actor = _server_class(ray).options(
            num_cpus=float(res.cpus), num_gpus=float(res.gpus), memory=None,
            scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=group,
                                                                 placement_group_bundle_index=0),
        ).remote(policy_type, options, dataclasses.asdict(context))
        self.servers[name] = actor
        host, port = ray.get(actor.start.remote(), timeout=SERVER_START_TIMEOUT_S)
        run_doc["policy"] = {"type": policy_type, **binding.wire_client(options, host, port)}
        return yaml.safe_dump(doc, sort_keys=False), group

    def _stop_server(self, ray: Any, name: str, groups: dict[str, Any]) -> None:
        actor = self.servers.pop(name, None)
        if actor is not None:
            try:
                ray.get(actor.stop.remote(), timeout=60)
            except Exception:  # noqa: BLE001 - the actor is killed below anyway
                pass
            ray.kill(actor)
        group = groups.pop(name, None)
        if group is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(group)

    def _drain(self, ray: Any, sink: Any) -> None:
        batches: dict[tuple[str, str], list[str]] = {}
        for run, shard_id, line in ray.get(sink.drain.remote()):
            batches.setdefault((run, shard_id), []).append(line)
        from evalfleet.rollout.runner import part_path

        for (run, shard_id), lines in batches.items():
            path = part_path(self.out, run, shard_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines))
                f.flush()


def _runner_slots(ray: Any, server_cpus: float) -> int:
    return max(1, int(ray.cluster_resources().get("CPU", 1) - server_cpus))


def _policy_context(rp: Any) -> Any:
    """The PolicyContext the Run's runner would build (the server's command line carries it)."""
    from evalfleet.plugins import load_registries
    from evalfleet.policies.base import PolicyContext
    from evalfleet.sim.base import ENVIRONMENTS

    load_registries()
    run = rp.run
    action_dim = 4
    entry = ENVIRONMENTS.get(run.environment.type)
    info = getattr(entry, "info", None)
    if info is not None and getattr(info, "action_dim", None):
        action_dim = int(info.action_dim)
    return PolicyContext(run=rp.name, task=rp.task, env_type=run.environment.type,
                         env_options=run.environment.options(), action_dim=action_dim, seed=rp.base_seed)


def _append(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)


# ------------------------------------------------------------------------------------------ the worker side


def _episode_of(line: str) -> int | None:
    try:
        ep = json.loads(line).get("episode")
    except (ValueError, AttributeError):
        return None
    return ep if isinstance(ep, int) else None


class RecordSink:
    """Holds every record line of the evaluation (those found at the start and those tasks push) and the
    lines the driver has not yet written."""

    def __init__(self, existing: dict[str, list[str]]):
        self.lines = {run: list(lines) for run, lines in existing.items()}
        self.unwritten: list[tuple[str, str, str]] = []

    def known(self, run: str, start: int, stop: int | None) -> list[str]:
        lines = self.lines.get(run, [])
        if stop is None:
            return list(lines)
        return [line for line in lines if (ep := _episode_of(line)) is not None and start <= ep < stop]

    def push(self, run: str, shard_id: str, lines: list[str]) -> None:
        self.lines.setdefault(run, []).extend(lines)
        self.unwritten.extend((run, shard_id, line) for line in lines)

    def drain(self) -> list[tuple[str, str, str]]:
        out, self.unwritten = self.unwritten, []
        return out


def run_shard_on_worker(document: str, run: str, start: int, stop: int | None, sink: Any,
                        config: dict[str, Any]) -> dict[str, Any]:
    """Body of a shard task: the runner under the watchdog in a private folder, new records to the sink."""
    import ray

    from evalfleet.execution.progress import LogTail
    from evalfleet.execution.watchdog import supervise
    from evalfleet.rollout.records import RECORDS_FILE
    from evalfleet.rollout.runner import part_path

    shard = Shard(run, start, stop)
    tmp = Path(tempfile.mkdtemp(prefix="evalfleet-ray-"))
    try:
        (tmp / "experiment.yaml").write_text(document, encoding="utf-8")
        known = ray.get(sink.known.remote(run, start, stop))
        (tmp / run).mkdir(parents=True)
        (tmp / run / RECORDS_FILE).write_text("".join(line + "\n" for line in known), encoding="utf-8")
        cmd = [sys.executable, "-m", "evalfleet.cli", "runner", str(tmp / "experiment.yaml"), "--output", str(tmp),
               "--shard", f"{run}:{start}:{'' if stop is None else stop}"]
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        log_path = tmp / "runner.log"
        box: dict[str, Any] = {}

        def watch() -> None:
            try:
                with open(log_path, "ab") as log:
                    box["result"] = supervise(cmd, tmp / "heartbeat.json", WatchdogConfig(**config), env=env,
                                              stdout=log, stderr=log, status_file=tmp / "status.json",
                                              log=lambda line: _append(log_path, f"evalfleet watchdog: {line}\n"))
            except BaseException as exc:  # noqa: BLE001 - reported in the task's answer
                box["error"] = exc

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        tail = LogTail(part_path(tmp, run, shard.id))
        while True:
            alive = thread.is_alive()
            lines = tail.new_lines()
            if lines:
                ray.get(sink.push.remote(run, shard.id, lines))
            if not alive:
                break
            thread.join(PUSH_INTERVAL_S)
        if "error" in box:
            raise box["error"]
        result: WatchdogResult = box["result"]
        log_tail = ""
        if result.state != "completed":
            try:
                log_tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-40:]) + "\n"
            except OSError:
                pass
        context = ray.get_runtime_context()
        return {"watchdog": dataclasses.asdict(result), "log_tail": log_tail, "node": context.get_node_id(),
                "placement_group": context.get_placement_group_id()}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class PolicyServer:
    """A policy server process on this actor's node, kept alive (restarted on the same port) until stop()."""

    def __init__(self, policy_type: str, options: dict[str, Any], context: dict[str, Any]):
        self.policy_type = policy_type
        self.options = options
        self.context = context
        self.process: Any = None
        self.stopping = threading.Event()
        self.restarts = 0
        self.log_dir = Path(tempfile.mkdtemp(prefix="evalfleet-ray-server-"))

    def start(self) -> tuple[str, int]:
        import ray

        from evalfleet.plugins import load_registries
        from evalfleet.policies.base import PolicyContext
        from evalfleet.serving.bindings import binding_for, server_process

        load_registries()
        binding = binding_for(self.policy_type)
        host = ray.util.get_node_ip_address()
        self.process = server_process(binding, self.options, PolicyContext(**self.context),
                                      self.log_dir / "server.log", host=host)
        self.process.start()
        self.process.wait_healthy(SERVER_START_TIMEOUT_S)
        threading.Thread(target=self._keep_alive, daemon=True, name="server-keepalive").start()
        return host, int(self.process.port)

    def _keep_alive(self) -> None:
        while not self.stopping.wait(0.5):
            if not self.process.is_alive() and not self.stopping.is_set():
                self.restarts += 1
                try:
                    self.process.restart(SERVER_START_TIMEOUT_S)
                except Exception:  # noqa: BLE001 - tried again on the next tick
                    pass

    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def info(self) -> dict[str, Any]:
        import ray

        return {"pid": self.pid(), "host": self.process.host if self.process else None,
                "port": self.process.port if self.process else None, "restarts": self.restarts, "node": ray.get_runtime_context().get_node_id(),
                "placement_group": ray.get_runtime_context().get_placement_group_id()}

    def stop(self) -> int | None:
        self.stopping.set()
        code = self.process.stop() if self.process else None
        shutil.rmtree(self.log_dir, ignore_errors=True)
        return code


# Made per run, not cached: a remote class or function made for one Ray session does not outlive it.
def _sink_class(ray: Any) -> Any:
    return ray.remote(num_cpus=0)(RecordSink)


def _server_class(ray: Any) -> Any:
    return ray.remote(max_restarts=0)(PolicyServer)


def _shard_task(ray: Any) -> Any:
    return ray.remote(num_cpus=1, max_retries=SHARD_TASK_RETRIES)(run_shard_on_worker)


# ------------------------------------------------------------------------------------------ Ray Jobs


def submit_ray_job(exp_path: str | Path, overrides: list[str], address: str, *, output: str | None = None,
                   workers: int | None = None, shard_size: int | None = None) -> str:
    """Submit the whole evaluation as a Ray job (Jobs API at `address`, e.g. http://HEAD:8265) and return its ID.

    The job's working_dir holds only the resolved experiment file (overrides already applied); its entrypoint
    is `evalfleet run experiment.yaml --backend ray --ray-address auto --no-progress [--output OUTPUT]`, so the
    evaluation runs on the cluster and writes OUTPUT on the head node (default: outputs/<name>-<time> in the
    job's working directory; give a path on shared storage to keep it)."""
    _import_ray()
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
    entry = ["evalfleet", "run", "experiment.yaml", "--backend", "ray", "--ray-address", "auto", "--no-progress"]
    if output:
        entry += ["--output", output]
    if workers:
        entry += ["--workers", str(workers)]
    if shard_size:
        entry += ["--shard-size", str(shard_size)]
    staging = Path(tempfile.mkdtemp(prefix="evalfleet-ray-job-"))
    try:
        (staging / "experiment.yaml").write_text(loaded.resolved_yaml(), encoding="utf-8")
        try:
            client = JobSubmissionClient(address)
        except Exception as exc:  # noqa: BLE001 - connection problems are the user's to fix
            raise UserError(f"cannot reach the Ray Jobs API at {address}: {exc}", where="--ray-address") from exc
        return client.submit_job(entrypoint=shlex.join(entry), runtime_env={"working_dir": str(staging)},
                                 metadata={"evalfleet_experiment": loaded.experiment.name})
    finally:
        shutil.rmtree(staging, ignore_errors=True)


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
