"""An Experiment → one or more OSMO (version 2) workflow specs: one task group per Run (its runner and, for
a policy whose binding needs one, its server), the collect group last; split into several workflows when
the Experiment needs more than `osmo.max_tasks` tasks; `osmo.max_parallel_runs` as inputs between runners.
The shape is drawn in this package's docstring (evalfleet/backends/osmo/__init__.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from evalfleet.backends.osmo.arena import (
    arena_attempt_script,
    arena_conditions_files,
    arena_planned_episodes,
    arena_run_document,
    arena_runner_script,
    is_arena_run,
)
from evalfleet.backends.osmo.credentials import secret_credentials, secrets_as_variables
from evalfleet.backends.osmo.names import PREEMPTED_EXIT, TASK_DIR, check_output_url, scan_values, workflow_base_name
from evalfleet.backends.osmo.resources import RunPlacement, check_resources, placements, resource_profiles
from evalfleet.backends.osmo.scripts import collect_script, runner_script, server_script
from evalfleet.backend_registry import backend_settings, check_backend_settings
from evalfleet.backends.osmo.settings import OsmoSettings
from evalfleet.layout import EXPERIMENT_FILE


@dataclass
class RenderedWorkflow:
    name: str
    runs: list[str]
    spec: dict[str, Any] = field(default_factory=dict)

    def to_yaml(self) -> str:
        return yaml.dump(self.spec, Dumper=_BlockDumper, sort_keys=False, width=10**9, allow_unicode=True)


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (scripts, embedded files) as `|` blocks, so a dry-run reads like the files."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if any(c in value for c in "\r\x85\u2028\u2029"):  # YAML line breaks: only escaped do they read back intact
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')
    style = "|" if "\n" in value and not any(line != line.rstrip() for line in value.splitlines()) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _represent_str)


def run_document(loaded: Any, run: str, policy: dict[str, Any] | None = None) -> dict[str, Any]:
    """The single-Run experiment a runner task runs: the resolved Experiment restricted to `run`."""
    doc = loaded.resolved_document()
    run_doc = doc["runs"][run]
    if policy is not None:
        run_doc = {**run_doc, "policy": policy}
    return {"name": doc["name"], "seed": doc["seed"], "runs": {run: run_doc}}


def render_group(loaded: Any, p: RunPlacement, settings: OsmoSettings) -> dict[str, Any]:
    from evalfleet.experiment.plan import run_plan
    from evalfleet.serving.bindings import binding_for

    run = loaded.experiment.runs[p.run]
    rp = run_plan(p.run, run, loaded.experiment.seed)
    scan_values(run_document(loaded, p.run)["runs"], "runs")
    # From the resolved document: a literal api_key is there only as the variable it travels in (secrets.py).
    policy = run_document(loaded, p.run)["runs"][p.run]["policy"]
    credentials = secret_credentials(policy, settings)
    host = port = None
    tasks: list[dict[str, Any]] = []
    server_task = None
    if p.server:
        binding = binding_for(run.policy.type)
        host, port = f"{{{{host:{p.server}}}}}", binding.default_port
        policy = binding.wire_client(policy, host, port)
        command = binding.command(policy, "0.0.0.0", port, _policy_context(loaded, p.run))
        serve = server_script(command, key=f"runs.{p.run}.policy")
        server_task = {
            "name": p.server,
            "image": command.image or settings.image,
            "command": ["bash", f"{TASK_DIR}/serve.sh"],
            "files": [{"path": f"{TASK_DIR}/serve.sh", "contents": serve}],
            "resource": "default",
            "exitActions": {"RESCHEDULE": PREEMPTED_EXIT},
            **credentials,
        }
    image = settings.image
    if is_arena_run(run):
        arena = backend_settings("experiment_runner", loaded.backend_settings)
        document = arena_run_document(loaded, p.run, policy)
        credentials = secret_credentials(document["runs"][p.run]["policy"], settings)
        metadata = {p.run: {"environment": run.environment.type, "policy": run.policy.type}}
        script = arena_runner_script(p.run, rp.task, rp.policy, arena_planned_episodes(run), host, port, arena,
                                     metadata)
        attempt = arena_attempt_script(arena, continue_on_error=loaded.continue_on_error)
        extra_files = [{"path": f"{TASK_DIR}/arena_attempt.sh", "contents": attempt},
                       *arena_conditions_files(loaded, p.run)]
        image = arena.image
    else:
        document = run_document(loaded, p.run, policy)
        script = runner_script(p.run, rp.task, rp.policy, rp.num_episodes, host, port)
        extra_files = []
    experiment_yaml = yaml.safe_dump(document, sort_keys=False, width=10**9, allow_unicode=True)
    tasks.append({
        "name": p.runner,
        "lead": True,
        "image": image,
        "command": ["bash", f"{TASK_DIR}/run.sh"],
        "files": [{"path": f"{TASK_DIR}/run.sh", "contents": script},
                  {"path": f"{TASK_DIR}/experiment.yaml", "contents": experiment_yaml}, *extra_files],
        "resource": "default",
        "exitActions": {"RESCHEDULE": PREEMPTED_EXIT},
        **credentials,
    })
    if server_task:
        tasks.append(server_task)
    return {"name": p.group, "tasks": tasks}


def _policy_context(loaded: Any, run: str) -> Any:
    """The PolicyContext the server gets on its command line (as the local backend builds it)."""
    from evalfleet.experiment.plan import run_plan
    from evalfleet.serving.planning import policy_context

    r = loaded.experiment.runs[run]
    return policy_context(run, r, run_plan(run, r, loaded.experiment.seed).base_seed)


def collect_group(runners: list[str], settings: OsmoSettings, experiment_yaml: str,
                  carried: dict[str, bytes] | None = None) -> dict[str, Any]:
    """The collect task; `carried`: the submission's experiment_metadata.json and manifest, put beside the
    Experiment it collects from, so they reach the output and its collect step ends them (cluster_metadata)."""
    output = settings.output_url or "{{output}}/collected"  # never with credentials (OsmoSettings refuses them)
    sources = [f"{{{{input:{i}}}}}" for i in range(len(runners))]
    extra = [{"path": f"{TASK_DIR}/experiment/{name}", "contents": data.decode()}
             for name, data in (carried or {}).items()]
    return {"name": "collect-group", "tasks": [{
        "name": "collect",
        "lead": True,
        "image": settings.image,
        "command": ["bash", f"{TASK_DIR}/collect.sh"],
        "files": [{"path": f"{TASK_DIR}/collect.sh", "contents": collect_script(sources, output)},
                  {"path": f"{TASK_DIR}/experiment/{EXPERIMENT_FILE}", "contents": experiment_yaml}, *extra],
        "inputs": [{"task": r} for r in runners],
        "resource": "collect",
    }]}


def limit_parallel_runs(groups: list[dict[str, Any]], runners: list[str], k: int | None) -> None:
    """At most `k` Runs at once: Run i's runner takes Run i-k's runner as an input, so OSMO starts group i only
    when that runner has finished (an input must come from an earlier group, which it does)."""
    if not k:
        return
    for i in range(k, len(groups)):
        runner = groups[i]["tasks"][0]
        runner.setdefault("inputs", []).append({"task": runners[i - k]})


def parallel_order(runs: list[str], k: int | None) -> str | None:
    """The ordering osmo.max_parallel_runs=K gives these Runs, in words (None when it changes nothing)."""
    if not k or k >= len(runs):
        return None
    waits = ", ".join(f"{runs[i]} after {runs[i - k]}" for i in range(k, len(runs)))
    return (f"osmo.max_parallel_runs={k}: at most {k} Runs at once; {', '.join(runs[:k])} start at once, then each"
            f" Run's runner takes the runner of the Run {k} before it as input: {waits}")


def run_order(loaded: Any, runs: list[str]) -> str | None:
    """What `evalfleet plan` says about OSMO: how the Experiment's `osmo.max_parallel_runs` (given with it, or
    the default) orders `runs`, in words; None when it changes nothing."""
    return parallel_order(runs, backend_settings("osmo", loaded.backend_settings).max_parallel_runs)


def split(places: list[RunPlacement], max_tasks: int) -> list[list[RunPlacement]]:
    """Pack Run groups in order into workflows of at most `max_tasks` tasks, one collect task each."""
    parts: list[list[RunPlacement]] = [[]]
    used = 1  # the collect task
    for p in places:
        if parts[-1] and used + p.tasks > max_tasks:
            parts.append([])
            used = 1
        parts[-1].append(p)
        used += p.tasks
    return parts


def submission_metadata(loaded: Any, experiment_yaml: str, name: str, part: int, parts: int) -> dict[str, bytes]:
    """What `evalfleet submit` carries in a workflow's collect task: experiment_metadata.json (status submitted,
    the workflow id as OSMO's token, the config hash of the experiment.yaml collect writes) and the manifest."""
    from pathlib import Path

    from evalfleet.execution.cluster_metadata import WORKFLOW_ID_TOKEN, submission_files

    return submission_files(Path("{{output}}"), loaded, backend="osmo", experiment_yaml=experiment_yaml,
                            submission={"workflow_id": WORKFLOW_ID_TOKEN, "workflow": name, "part": part,
                                        "parts": parts})


def render_workflows(loaded: Any, settings: OsmoSettings | None = None, *,
                     record_submission: bool = False) -> list[RenderedWorkflow]:
    """Every workflow the Experiment needs (one unless it has more than osmo.max_tasks tasks);
    `record_submission`: each collect task carries the submission's metadata (`submission_metadata`)."""
    given = (loaded.backend_settings or {}).get("osmo") or {}
    check_backend_settings(loaded.backend_settings)  # experiment_runner.* too, also without an Arena Run
    settings = settings or backend_settings("osmo", loaded.backend_settings)
    assert isinstance(settings, OsmoSettings)
    places = placements(loaded)
    check_resources(places, settings, given, loaded.path)
    parts = split(places, settings.max_tasks)
    check_output_url(settings, len(parts))
    base = workflow_base_name(settings, loaded.experiment.name)
    resources = resource_profiles(settings, places)
    timeout = {k: getattr(settings, k) for k in ("exec_timeout", "queue_timeout") if getattr(settings, k)}
    out = []
    for i, part in enumerate(parts, 1):
        name = base if len(parts) == 1 else f"{base}-part{i}"
        part_doc = loaded.resolved_document()
        # Any literal secret (not only api_key, e.g. Arena's remote_api_token) as the variable it would travel in.
        part_doc["runs"] = {p.run: secrets_as_variables(part_doc["runs"][p.run], f"runs.{p.run}") for p in part}
        full_yaml = yaml.safe_dump(part_doc, sort_keys=False, width=10**9, allow_unicode=True)
        groups = [render_group(loaded, p, settings) for p in part]
        limit_parallel_runs(groups, [p.runner for p in part], settings.max_parallel_runs)
        carried = submission_metadata(loaded, full_yaml, name, i, len(parts)) if record_submission else None
        groups.append(collect_group([p.runner for p in part], settings, full_yaml, carried))
        workflow: dict[str, Any] = {"name": name, "resources": resources}
        if timeout:
            workflow["timeout"] = timeout
        workflow["groups"] = groups
        out.append(RenderedWorkflow(name, [p.run for p in part], {"workflow": workflow}))
    return out
