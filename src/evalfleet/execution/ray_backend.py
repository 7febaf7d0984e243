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
is stopped (its log kept as OUT/<run>/server.log) and the group removed when the Run's shards are done.
Servers are planned as for the local backend (`serving.planning.plan_server_groups`): one per served Run, or
with `server_sharing: per_policy` one per distinct server identity, whose group then holds the shard tasks of
all the Runs sharing it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from evalfleet.errors import UserError
from evalfleet.execution.backends import BACKENDS, BackendBase, ExecutionJob, WorkerResult, ordered_shards
from evalfleet.execution.invocation import runner_command
from evalfleet.execution.output_dir import mark_runs_running
from evalfleet.execution.watchdog import WatchdogConfig, WatchdogResult
from evalfleet.experiment.plan import Plan, Shard
from evalfleet.layout import (EXPERIMENT_FILE, SERVER_LOG, internal_dir, part_path, ray_task_log, records_path,
                              server_log_path)
from evalfleet.secrets import ENV_PREFIX

SHARD_TASK_RETRIES = 3  # Ray relaunches a shard task whose worker process or node died
PUSH_INTERVAL_S = 0.5  # how often a shard task sends its new record lines to the driver
SERVER_START_TIMEOUT_S = 300.0
LOCAL_OBJECT_STORE_BYTES = 256 * 1024 * 1024
TASK_DIR_PREFIX = "evalfleet-ray-task-"  # + the worker's pid: a dead worker's folder is removed by the next task
CANCEL_GRACE_S = 15.0  # after Ctrl-C, how long tasks get to stop their runners before they are killed

RAY_MISSING = "the Ray backend needs Ray: pip install 'evalfleet[ray]' (or 'ray[default]>=2.60')"


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise UserError(RAY_MISSING, where="--backend ray") from exc
    return ray


# ------------------------------------------------------------------------------------------ the driver side


def check_ray_arguments(address: str | None) -> None:
    """What can be refused before anything is written: Ray missing, a Jobs API address given to `run`."""
    _import_ray()
    if address and address.startswith(("http://", "https://")):
        raise UserError(f"{address} looks like the Ray Jobs API (dashboard) address: give `evalfleet run` the "
                        "cluster address (HOST:6379, or auto), or submit with `evalfleet submit --backend ray "
                        f"--ray-address {address}`", where="command line", key="--ray-address")


@BACKENDS.register("ray", summary="shard tasks on a Ray cluster (or a local Ray instance); also Ray jobs")
class RayBackend(BackendBase):
    """`address`: an existing cluster ("auto", "HOST:6379", "ray://..."), or None for a local instance sized to
    `workers` CPUs (default: this machine), dashboard off. If Ray is already initialised in this process it
    is used as is (and left connected)."""

    name = "ray"
    resume_hint = " --backend ray"

    def __init__(self, *, workers: int | None = None, address: str | None = None):
        self.workers = workers  # checked by the caller (execution.api.check_workers)
        self.address = address
        self._started = False

    def check(self) -> None:
        check_ray_arguments(self.address)

    def open(self) -> int:
        ray = _import_ray()
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": "WARNING"}
            secrets = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}  # exported by the pipeline
            if secrets:  # a cluster's workers get them through Ray's runtime env, never through a file
                kwargs["runtime_env"] = {"env_vars": secrets}
            if self.address:
                try:
                    ray.init(address=self.address, **kwargs)
                except Exception as exc:  # noqa: BLE001 - an unreachable or refusing cluster is the user's to fix
                    first = (str(exc).splitlines() or [""])[0]
                    raise UserError(f"cannot connect to the Ray cluster at {self.address}: {type(exc).__name__}: "
                                    f"{first} (is it running? does RAY_AUTH_MODE / the auth token match the "
                                    "cluster's?)", where="command line", key="--ray-address") from None
            else:
                # Records flow through actor calls, not the object store: a small one is plenty.
                ray.init(num_cpus=self.workers or os.cpu_count() or 1, include_dashboard=False,
                         object_store_memory=LOCAL_OBJECT_STORE_BYTES, **kwargs)
            self._started = True
        return self.workers or int(ray.cluster_resources().get("CPU", 1))

    def execute(self, job: ExecutionJob, experiment_file: Path) -> list[WorkerResult]:
        """Every pending shard as a Ray task; served Runs get their server in a placement group (RayRun)."""
        from evalfleet.execution.progress import ProgressTracker, watch_progress

        run = RayRun(job.plan, job.out, job.watchdog)
        mark_runs_running(job.out, job.plan)
        thread = threading.Thread(target=run.execute, daemon=True, name="ray-driver")
        thread.start()
        try:
            watch_progress([thread], ProgressTracker.for_plan(job.out, job.plan), job.show_progress)
        except KeyboardInterrupt:
            run.stop.set()
            thread.join()
            raise
        thread.join()
        if run.crash is not None:
            raise run.crash
        return run.results

    def close(self) -> None:
        if self._started:
            _import_ray().shutdown()
            self._started = False

    def submit(self, loaded: Any, *, dry_run: bool, output_dir: str | None, stream: Any) -> int:
        """The whole evaluation as one Ray job (`submit_ray_job`); `address` is the Jobs API."""
        if not self.address:
            raise UserError("--backend ray needs --ray-address http://HEAD:8265 (the Ray Jobs API of the cluster)",
                            where="command line", key="--ray-address")
        if dry_run:
            print(f"# would submit a Ray job to {self.address}: evalfleet run {EXPERIMENT_FILE} --backend ray"
                  f" --ray-address auto --no-progress, with this {EXPERIMENT_FILE}:", file=stream)
            print(loaded.resolved_yaml(), end="", file=stream)
            return 0
        job_id = submit_ray_job(loaded.path, list(loaded.overrides), self.address)
        print(f"submitted Ray job {job_id} to {self.address}", file=stream)
        return 0


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
    servers: dict[str, Any] = dataclasses.field(default_factory=dict)  # server id → PolicyServer actor
    server_runs: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # server id → its Runs
    server_groups: dict[str, Any] = dataclasses.field(default_factory=dict)  # server id → placement group
    # (run, shard id) → (placement group id, [host, port] of the server the task used) as the task reported them
    placements: dict[tuple[str, str], Any] = dataclasses.field(default_factory=dict)

    def execute(self) -> None:
        try:
            self._execute()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            self.crash = exc

    def _execute(self) -> None:
        ray = _import_ray()
        internal_dir(self.out).mkdir(parents=True, exist_ok=True)
        sink = _sink_class(ray).remote({name: existing_lines(self.out, name) for name in self.plan.runs})
        document = self.plan.experiment.resolved_document()
        shards = ordered_shards(self.plan)
        pending: dict[Any, tuple[int, Shard]] = {}
        left_per_run = {name: sum(1 for s in shards if s.run == name) for name in self.plan.runs}
        config = dataclasses.asdict(self.watchdog)
        task = _shard_task(ray)
        try:
            served = self._start_servers(ray, shards)  # Run → (placement group, ref of the server's host/port)
            for index, shard in enumerate(shards):
                options: dict[str, Any] = {}
                group, address = served.get(shard.run, (None, None))
                if group is not None:
                    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

                    options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(placement_group=group)
                run_doc = yaml.safe_dump({**document, "runs": {shard.run: document["runs"][shard.run]}},
                                         sort_keys=False)
                # `address` is an ObjectRef: Ray starts the task once the server answered where it listens.
                ref = task.options(**options).remote(run_doc, shard.run, shard.start, shard.stop, sink, config,
                                                     address)
                pending[ref] = (index, shard)
            self.results = [WorkerResult(i, [s]) for i, s in enumerate(shards)]
            while pending:
                if self.stop.is_set():
                    self._cancel(ray, sink, list(pending))
                    break
                done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0.5)
                self._drain(ray, sink)
                for ref in done:
                    index, shard = pending.pop(ref)
                    result = self.results[index]
                    try:
                        answer = ray.get(ref)
                        result.result = WatchdogResult(**answer["watchdog"])
                        self.placements[(shard.run, shard.id)] = (answer.get("placement_group"), answer.get("server"))
                        if answer.get("log_tail") and result.result.state != "completed":
                            _append(ray_task_log(self.out, shard.run, shard.id), answer["log_tail"])
                    except Exception as exc:  # noqa: BLE001 - a task that failed for good fails its Run
                        first = (str(exc).splitlines() or [""])[0]
                        result.error = f"Ray task failed: {type(exc).__name__}: {first}"
                    left_per_run[shard.run] -= 1
                    for key, runs in list(self.server_runs.items()):
                        if all(left_per_run[r] == 0 for r in runs):
                            self._stop_server(ray, key)
            self._drain(ray, sink)
        finally:
            for key in list(self.servers):
                self._stop_server(ray, key)
            ray.kill(sink)

    def _start_servers(self, ray: Any, shards: list[Shard]) -> dict[str, tuple[Any, Any]]:
        """Create a placement group per planned server (bundle 0: the server, then room for runner tasks) and
        start the server actor in it, without waiting: a group waits for resources (e.g. until an earlier
        Run's group is removed) and the shard tasks wait for their server's address. Run → (group, address)."""
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from evalfleet.serving.planning import plan_server_groups

        exp = self.plan.experiment.experiment
        served: dict[str, tuple[Any, Any]] = {}
        server_plans = plan_server_groups({n: rp.run for n, rp in self.plan.runs.items()}, exp.server_sharing,
                                          exp.seed)
        cluster_cpus = ray.cluster_resources().get("CPU", 1)
        for sp in server_plans:
            res = sp.binding.resources(sp.options)
            server_bundle: dict[str, float] = {"CPU": float(res.cpus)}
            if res.gpus:
                server_bundle["GPU"] = float(res.gpus)
            its_shards = sum(1 for s in shards if s.run in sp.runs)
            runner_bundles = max(1, min(its_shards, int(cluster_cpus - res.cpus)))
            group = placement_group([server_bundle] + [{"CPU": 1.0}] * runner_bundles, strategy="PACK",
                                    name=f"evalfleet-{sp.id}")
            self.server_groups[sp.id] = group
            self.server_runs[sp.id] = list(sp.runs)
            actor = _server_class(ray).options(
                num_cpus=float(res.cpus), num_gpus=float(res.gpus),
                scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=group,
                                                                     placement_group_bundle_index=0),
            ).remote(sp.binding.policy_type, sp.options, dataclasses.asdict(sp.context))
            self.servers[sp.id] = actor
            address = actor.start.remote()
            for name in sp.runs:
                served[name] = (group, address)
        return served

    def _stop_server(self, ray: Any, key: str) -> None:
        """Stop a server, keep its log beside its first Run's records (as the local backend does), free its group."""
        from ray.util.placement_group import remove_placement_group

        actor = self.servers.pop(key, None)
        runs = self.server_runs.pop(key, [])
        if actor is not None:
            try:
                log = ray.get(actor.stop.remote(), timeout=60)
                if runs and log:
                    _append(server_log_path(self.out, runs[0]), log)
            except Exception:  # noqa: BLE001 - the actor is killed below anyway
                pass
            ray.kill(actor)
        group = self.server_groups.pop(key, None)
        if group is not None:
            remove_placement_group(group)

    def _cancel(self, ray: Any, sink: Any, refs: list[Any]) -> None:
        """Interrupt every task (each stops its runner and pushes what it finished), keep their last records,
        then force-kill what has not ended after CANCEL_GRACE_S."""
        for ref in refs:
            ray.cancel(ref)
        deadline = time.monotonic() + CANCEL_GRACE_S
        left = refs
        while left and time.monotonic() < deadline:
            _, left = ray.wait(left, num_returns=len(left), timeout=0.5)
            self._drain(ray, sink)
        for ref in left:
            ray.cancel(ref, force=True)
        self._drain(ray, sink)

    def _drain(self, ray: Any, sink: Any) -> None:
        batches: dict[tuple[str, str], list[str]] = {}
        for run, shard_id, line in ray.get(sink.drain.remote()):
            batches.setdefault((run, shard_id), []).append(line)
        for (run, shard_id), lines in batches.items():
            path = part_path(self.out, run, shard_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines))
                f.flush()


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
                        config: dict[str, Any], server: tuple[str, int] | None = None) -> dict[str, Any]:
    """Body of a shard task: the runner under the watchdog in a private folder, new records to the sink.
    `server`: (host, port) of the Run's policy server, wired into the client's options."""
    import ray

    from evalfleet.execution.progress import LogTail
    from evalfleet.execution.watchdog import supervise

    shard = Shard(run, start, stop)
    _remove_stale_folders()
    tmp = Path(tempfile.mkdtemp(prefix=f"{TASK_DIR_PREFIX}{os.getpid()}-"))
    try:
        if server is not None:
            from evalfleet.serving.bindings import binding_for

            doc = yaml.safe_load(document)
            policy = doc["runs"][run]["policy"]
            doc["runs"][run]["policy"] = binding_for(policy["type"]).wire_client(policy, server[0], int(server[1]))
            document = yaml.safe_dump(doc, sort_keys=False)
        (tmp / EXPERIMENT_FILE).write_text(document, encoding="utf-8")
        known = ray.get(sink.known.remote(run, start, stop))
        (tmp / run).mkdir(parents=True)
        records_path(tmp, run).write_text("".join(line + "\n" for line in known), encoding="utf-8")
        cmd = runner_command(tmp / EXPERIMENT_FILE, tmp, [shard])
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        log_path = tmp / "runner.log"
        box: dict[str, Any] = {}
        stop_runner = threading.Event()

        def watch() -> None:
            try:
                with open(log_path, "ab") as log:
                    box["result"] = supervise(cmd, tmp / "heartbeat.json", WatchdogConfig(**config), env=env,
                                              stdout=log, stderr=log, status_file=tmp / "status.json",
                                              stop_event=stop_runner,
                                              log=lambda line: _append(log_path, f"evalfleet watchdog: {line}\n"))
            except BaseException as exc:  # noqa: BLE001 - reported in the task's answer
                box["error"] = exc

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        tail = LogTail(part_path(tmp, run, shard.id))
        try:
            while True:
                alive = thread.is_alive()
                lines = tail.new_lines()
                if lines:
                    ray.get(sink.push.remote(run, shard.id, lines))
                if not alive:
                    break
                thread.join(PUSH_INTERVAL_S)
        except BaseException:  # cancelled (KeyboardInterrupt from ray.cancel): stop the runner, keep its records
            stop_runner.set()
            thread.join(float(config.get("term_grace", 10.0)) + 5.0)
            lines = tail.new_lines()
            if lines:
                ray.get(sink.push.remote(run, shard.id, lines))
            raise
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
                "placement_group": context.get_placement_group_id(), "server": list(server) if server else None}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _remove_stale_folders() -> None:
    """Folders of shard tasks whose worker process was killed (Ray then retries the task elsewhere)."""
    for path in Path(tempfile.gettempdir()).glob(f"{TASK_DIR_PREFIX}*-*"):
        pid = path.name[len(TASK_DIR_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists() and os.path.exists("/proc/self"):
            shutil.rmtree(path, ignore_errors=True)


class PolicyServer:
    """A policy server process on this actor's node, kept alive (restarted on the same port) until stop()."""

    def __init__(self, policy_type: str, options: dict[str, Any], context: dict[str, Any]):
        self.policy_type = policy_type
        self.options = options
        self.context = context
        self.supervisor: Any = None  # execution.servers.ServerSupervisor
        self.log_dir = Path(tempfile.mkdtemp(prefix="evalfleet-ray-server-"))

    def start(self) -> tuple[str, int]:
        import ray

        from evalfleet.execution.servers import ServerSupervisor
        from evalfleet.plugins import load_registries
        from evalfleet.policies.base import PolicyContext
        from evalfleet.serving.bindings import binding_for

        load_registries()
        self.supervisor = ServerSupervisor(binding_for(self.policy_type), self.options, PolicyContext(**self.context),
                                           self.log_dir / SERVER_LOG, host=ray.util.get_node_ip_address(),
                                           health_timeout_s=SERVER_START_TIMEOUT_S)
        return self.supervisor.start()

    def pid(self) -> int | None:
        return self.supervisor.process.pid if self.supervisor else None

    def info(self) -> dict[str, Any]:
        import ray

        running = self.supervisor is not None
        return {"pid": self.pid(), "host": self.supervisor.host if running else None,
                "port": self.supervisor.port if running else None,
                "restarts": self.supervisor.restarts if running else 0,
                "node": ray.get_runtime_context().get_node_id(),
                "placement_group": ray.get_runtime_context().get_placement_group_id()}

    def stop(self) -> str:
        """Stop the server for good; its log."""
        if self.supervisor:
            self.supervisor.stop()
        try:
            return (self.log_dir / SERVER_LOG).read_text(errors="replace")
        except OSError:
            return ""
        finally:
            shutil.rmtree(self.log_dir, ignore_errors=True)


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
    is `evalfleet run experiment.yaml --backend ray --ray-address auto --no-progress --output OUTPUT`, so the
    evaluation runs on the cluster and writes OUTPUT on the head node (default: ~/evalfleet-outputs/<name>-<time>
    there; the job's logs end with the summary table and the report's path)."""
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
        except Exception as exc:  # noqa: BLE001 - connection problems are the user's to fix
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
