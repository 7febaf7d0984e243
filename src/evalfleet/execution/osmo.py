"""OSMO backend: an Experiment → one or more OSMO (version 2) workflow specs, and their submission.

Shape of a rendered workflow (see docs/cluster.md)::

    workflow:
      name: <osmo.workflow_name or the Experiment's name>[-partN]
      resources: {default: <osmo.* profile>, collect: <small CPU profile>}
      timeout: {exec_timeout, queue_timeout}          # only when set
      groups:
      - name: run-<run>                               # one group per Run
        tasks:
        - name: runner-<run>   lead: true             # watchdog → runner on a one-Run experiment file
        - name: server-<run>                          # only for a policy whose binding needs a server
      - name: collect-group                           # last: takes every runner as input
        tasks:
        - name: collect        inputs: [{task: runner-<run>}, ...]

* The runner task gets its single-Run experiment (`LoadedExperiment.resolved_document()` restricted to the
  Run, the client wired to `{{host:server-<run>}}` and the binding's port) and its script in `files`. It
  waits for the server's port, runs ``evalfleet watchdog -- evalfleet runner ...`` into ``{{output}}``,
  writes ``<run>/run_status.json`` (failed + reason when the watchdog gave up) and always exits 0, so the
  collect task runs even when a Run failed. Exit 3006 (OSMO's FAILED_PREEMPTED) is rescheduled.
* A Run whose environment is an Isaac Lab Arena type (an external type, see experiment/validation.py) runs
  Arena's own runner instead (see `arena_runner_script`): in `experiment_runner.image`, under evalfleet's
  watchdog judging liveness from the files Arena's runner writes, each attempt into its own folder
  ``{{output}}/arena_attempts/attempt-<NNN>`` (Arena's runner wants an empty one, and a restart then keeps what
  an earlier attempt recorded); the task leaves ``<run>/run_status.json`` (what each attempt did, what a
  restart reran) and Arena's ``experiment_runner_result.json``, and exits 0.
* The server task runs the binding's `ServerCommand.shell()` bound to 0.0.0.0 on the binding's port.
* The collect task runs ``evalfleet collect {{input:0}} ... --output <osmo.output_url>`` (``{{workflow_id}}``
  is left for OSMO to fill in); without `osmo.output_url` it collects into its own ``{{output}}``.
* Every value placed in a shell line goes through `evalfleet.shell` (one quoting rule: a value is one word bash
  never expands; only the script's own variables, `shell.Var`, expand); a user value containing ``{{`` is
  refused, because OSMO would read it as one of its tokens.
* Before anything is rendered: servers that need different pools or platforms, or an `osmo.*` profile that
  falls short of what a server binding needs (GPUs, CPUs, memory, platform), are a UserError (exit 2).
* An Experiment needing more than `osmo.max_tasks` tasks is split into several workflows, each a complete
  workflow with its own collect task (Runs are packed in file order). With a split, `osmo.output_url` must
  contain ``{{workflow_id}}`` so the parts land in separate folders; merge them with
  ``evalfleet collect URL1 URL2 ... --output DIR``.

`submit_workflows(...)` writes each spec to a file and runs ``osmo workflow submit FILE -t json`` (plus
``--pool``/``--priority`` from the settings) and reads the workflow ID from the JSON answer (its ``name``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from evalfleet import shell as sh
from evalfleet.errors import UserError
from evalfleet.execution.backends import BACKENDS, BackendBase
from evalfleet.execution.settings import (
    OSMO_NAME,
    OSMO_NAME_MAX,
    OsmoSettings,
    backend_settings,
    check_backend_settings,
)
from evalfleet.secrets import looks_secret, strip_url_credentials

WHERE = "command line"
TASK_DIR = "/tmp/evalfleet"  # where a task's files are mounted (OSMO forbids paths under /osmo)
PREEMPTED_EXIT = "3006"  # OSMO ExitCode.FAILED_PREEMPTED
SERVER_WAIT_S = 1800  # how long a runner waits for its server's port before starting anyway
COLLECT_RESOURCE = {"cpu": 2, "gpu": 0, "memory": "8Gi"}
TOKEN = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
INSTALL_HINT = ("the `osmo` CLI is not on PATH: install it and log in (OSMO user guide → Getting Started → "
                "Install the CLI, then `osmo login <service URL>`), or preview with --dry-run")


@dataclass
class RunPlacement:
    run: str
    group: str
    runner: str
    server: str | None
    needs: Any = None  # ServerResources of the server, if any
    server_pool: str | None = None
    server_platform: str | None = None

    @property
    def tasks(self) -> int:
        return 2 if self.server else 1


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


# ============================================================================ names


def _canonical(name: str) -> str:
    """OSMO compares names ignoring case and treating '-' and '_' alike."""
    return name.lower().replace("_", "-")


def _slug(text: str, limit: int = 40) -> str:
    s = re.sub(r"[^A-Za-z0-9_-]+", "-", text)[:limit].strip("-_")
    return s or "x"


def _short_hash(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:6]


def task_names(runs: list[str]) -> dict[str, str]:
    """Run → a slug usable in OSMO names, unique under OSMO's comparison (case, '-'/'_')."""
    out: dict[str, str] = {}
    seen: set[str] = set()
    for run in runs:
        slug = _slug(run)
        if _canonical(slug) in seen:
            slug = f"{_slug(run, 33)}-{_short_hash(run)}"
        seen.add(_canonical(slug))
        out[run] = slug
    return out


def workflow_base_name(settings: OsmoSettings, experiment_name: str) -> str:
    if settings.workflow_name:
        return settings.workflow_name
    name = _slug(experiment_name, OSMO_NAME_MAX - 12)
    if not name[0].isalpha():
        name = f"e-{name}"[: OSMO_NAME_MAX - 12].rstrip("-_")
    assert OSMO_NAME.match(name), name
    return name


# ============================================================================ checks


def _server_constraint(options: dict[str, Any], key: str) -> str | None:
    """A server's own pool/platform, from its policy options (`server:` or `server_resources:`)."""
    for section in ("server", "server_resources"):
        value = (options.get(section) or {}).get(key) if isinstance(options.get(section), dict) else None
        if value:
            return str(value)
    return None


def placements(loaded: Any) -> list[RunPlacement]:
    from evalfleet.serving.bindings import binding_for, needs_server

    names = task_names(list(loaded.experiment.runs))
    out = []
    for run_name, run in loaded.experiment.runs.items():
        slug = names[run_name]
        options = run.policy.options()
        p = RunPlacement(run_name, f"run-{slug}", f"runner-{slug}", None)
        if needs_server(run.policy.type, options):
            binding = binding_for(run.policy.type)
            p.server = f"server-{slug}"
            p.needs = binding.resources(options)
            p.server_pool = _server_constraint(options, "pool")
            p.server_platform = _server_constraint(options, "platform")
        out.append(p)
    return out


def check_resources(places: list[RunPlacement], settings: OsmoSettings, given: dict[str, Any],
                    where: str | None = None) -> None:
    """Fail before rendering when servers disagree on pool/platform or the profile is too small."""
    for key in ("pool", "platform"):
        wanted = [(p.run, getattr(p, f"server_{key}")) for p in places if getattr(p, f"server_{key}")]
        explicit = getattr(settings, key)
        for run, value in wanted:
            if explicit is not None and value != explicit:
                raise UserError(f"osmo.{key}={explicit} but Run {run!r}'s server needs {key} {value!r}; drop the"
                                f" override or set osmo.{key}={value}", where=WHERE, key=f"osmo.{key}")
            first_run, first = wanted[0]
            if value != first:
                raise UserError(f"the servers of Runs {first_run!r} and {run!r} need different {key}s ({first!r} vs"
                                f" {value!r}); one workflow runs in one {key}: submit them separately",
                                where=where, key=f"runs.{run}.policy")
    memory = settings.memory_gib()
    for p in places:
        if p.needs is None:
            continue
        shortfalls = []
        if settings.gpus < p.needs.gpus:
            shortfalls.append(("gpus", f"{p.needs.gpus} GPU(s)", f"osmo.gpus={settings.gpus}", str(p.needs.gpus)))
        if settings.cpus < p.needs.cpus:
            shortfalls.append(("cpus", f"{p.needs.cpus:g} CPUs", f"osmo.cpus={settings.cpus}",
                               str(int(-(-p.needs.cpus // 1)))))
        if memory + 1e-9 < p.needs.memory_gb:
            shortfalls.append(("memory", f"{p.needs.memory_gb:g}Gi of memory", f"osmo.memory={settings.memory}",
                               f"{int(-(-p.needs.memory_gb // 1))}Gi"))
        if shortfalls:
            key, need, have, fix = shortfalls[0]
            origin = "given on the command line" if key in given else "the default"
            raise UserError(f"Run {p.run!r}'s policy server needs {need} but {have} ({origin}); set"
                            f" osmo.{key}={fix} or more", where=WHERE, key=f"osmo.{key}")


def _check_no_tokens(text: str, where_key: str) -> None:
    m = TOKEN.search(text)
    if m:
        raise UserError(f"the value {m.group(0)!r} would be read by OSMO as one of its {{{{...}}}} tokens; remove"
                        " the double braces", where=WHERE, key=where_key)


def _scan_values(node: Any, key: str) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            _check_no_tokens(str(k), f"{key}.{k}")
            _scan_values(v, f"{key}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _scan_values(v, f"{key}.{i}")
    elif isinstance(node, str):
        _check_no_tokens(node, key)


# ============================================================================ rendering


def run_document(loaded: Any, run: str, policy: dict[str, Any] | None = None) -> dict[str, Any]:
    """The single-Run experiment a runner task runs: the resolved Experiment restricted to `run`."""
    doc = loaded.resolved_document()
    run_doc = doc["runs"][run]
    if policy is not None:
        run_doc = {**run_doc, "policy": policy}
    return {"name": doc["name"], "seed": doc["seed"], "runs": {run: run_doc}}


def runner_script(run: str, task: str, policy: str, planned: int | None, server_host: str | None,
                  server_port: int | None) -> str:
    lines = [
        "#!/bin/bash",
        "# evalfleet runner task: watchdog → runner; always exits 0 and leaves <run>/run_status.json.",
        "set -u",
        sh.assign("OUT", "{{output}}"),
        sh.assign("EXP", TASK_DIR + "/experiment.yaml"),
        sh.assign("RUN", run, key="runs"),
        *_wait_for_server(server_host, server_port),
        sh.command("evalfleet", "watchdog", "--heartbeat", TASK_DIR + "/heartbeat.json", "--status-file",
                   TASK_DIR + "/watchdog_status.json", "--", "evalfleet", "runner", sh.Var("EXP"), "--output",
                   sh.Var("OUT")),
        "RC=$?",
        sh.command(sh.Raw('"$(command -v python3 || command -v python)"'), "-m", "evalfleet.execution.osmo",
                   "finish-run", "--output", sh.Var("OUT"), "--run", sh.Var("RUN"), "--exit-code", sh.Var("RC"),
                   "--task", task, "--policy", policy, *(["--planned", int(planned)] if planned is not None else []),
                   "--watchdog-status", TASK_DIR + "/watchdog_status.json", key=f"runs.{run}"),
        "exit 0",
        "",
    ]
    return "\n".join(lines)


def _wait_for_server(host: str | None, port: int | None) -> list[str]:
    """Wait (at most SERVER_WAIT_S) for the server task's port; OSMO fills in the `{{host:...}}` token."""
    if host is None:
        return []
    return [sh.assign("SERVER_HOST", host), sh.assign("SERVER_PORT", str(port)),
            f"for _ in $(seq {SERVER_WAIT_S // 2}); do",
            '  (exec 3<>"/dev/tcp/$SERVER_HOST/$SERVER_PORT") 2>/dev/null && break',
            "  sleep 2",
            "done"]


# ============================================================================ Arena Runs

ARENA_RUNNER_SCRIPT = "isaaclab_arena/evaluation/experiment_runner.py"  # relative to the image's work dir
ARENA_RESULT_FILE = "experiment_runner_result.json"  # what Arena's collector reads in a runner's output
ARENA_ATTEMPTS_DIR = "arena_attempts"  # {{output}}/arena_attempts/attempt-<NNN>: one Arena output per attempt
ATTEMPT_FOLDER = "attempt-{attempt:03d}"  # zero-padded: collect reads the attempts in name order = launch order


def is_arena_run(run: Any) -> bool:
    """A Run whose environment is an Isaac Lab Arena type: no evalfleet runner can build it, Arena's can."""
    from evalfleet.experiment.validation import is_external_type
    from evalfleet.sim.base import ENVIRONMENTS

    name = run.environment.type
    return ENVIRONMENTS.get(name) is None and is_external_type(name, ENVIRONMENTS.names())


def arena_run_document(loaded: Any, run: str, policy: dict[str, Any] | None = None) -> dict[str, Any]:
    """The single-Run file Arena's runner reads: only the keys the user's file (shared + Run + overrides) set,
    in Arena's own names (evalfleet's defaults such as `recording` or `max_attempts` mean nothing to Arena);
    the policy as wired to its server task. A literal secret is there only as the variable it travels in
    (`<key>_env`); `arena-config` puts the value back inside the task."""
    dumped = loaded.experiment.runs[run].model_dump(mode="json", exclude_none=True, exclude_unset=True)
    if policy is not None:
        dumped["policy"] = policy
    return {"runs": {run: _secrets_as_variables(dumped, f"runs.{run}")}}


def _secrets_as_variables(node: Any, path: str) -> Any:
    """Every literal secret (`api_key`, Arena's `remote_api_token`, ...) → `<key>_env: <variable>`."""
    from evalfleet.secrets import env_name

    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            where = f"{path}.{key}"
            if looks_secret(str(key)) and not str(key).endswith("_env") and isinstance(value, str) and value:
                out[f"{key}_env"] = env_name(where)
            else:
                out[key] = _secrets_as_variables(value, where)
        return out
    if isinstance(node, list):
        return [_secrets_as_variables(v, f"{path}[{i}]") for i, v in enumerate(node)]
    return node


def arena_planned_episodes(run: Any) -> int | None:
    """Episodes Arena's runner records for the Run: num_episodes in each of its num_rebuilds builds."""
    n = run.rollout_limit.num_episodes
    return None if n is None else n * (run.num_rebuilds or 1)


def arena_runner_command(settings: Any, config: sh.Piece | tuple[sh.Piece, ...],
                         output: sh.Piece | tuple[sh.Piece, ...]) -> list[Any]:
    """Arena's documented runner command line (osmo/tasks/experiment_runner_task.py); `config` and `output` may
    be the script's own variables (`shell.Var`), never expanded from a user value."""
    argv = [settings.python, ARENA_RUNNER_SCRIPT, "--experiment_config", config, "--experiment_output_directory",
            output, "--viz", "none", "--enable_cameras"]
    if settings.record_camera_video:
        argv.append("--record_camera_video")
    if settings.record_viewport_video:
        argv.append("--record_viewport_video")
    return argv


def arena_attempt_script(settings: Any) -> str:
    """One attempt: Arena's runner into this attempt's own folder, its log beside it (the watchdog's liveness
    reads both). $OUT, $TASK_DIR and EVALFLEET_ATTEMPT come from run.sh and the watchdog."""
    argv = arena_runner_command(settings, (sh.Var("TASK_DIR"), "/arena_experiment.yaml"), sh.Var("DIR"))
    line = sh.command(*argv, key="experiment_runner.python")
    return "\n".join([
        "#!/bin/bash",
        "# one attempt of Arena's runner: a fresh output folder per attempt, so a restart keeps what came before",
        "set -u -o pipefail",
        f'DIR="$OUT/{ARENA_ATTEMPTS_DIR}/attempt-$(printf %03d "${{EVALFLEET_ATTEMPT:-1}}")"',
        f'mkdir -p "$OUT/{ARENA_ATTEMPTS_DIR}"',
        f'{line} 2>&1 | tee "$DIR.log"',
        "",
    ])


def _heredoc(path: str, text: str) -> list[str]:
    return [f"cat > {path} <<'EVALFLEET_EOF'", text, "EVALFLEET_EOF"]


def arena_runner_script(run: str, task: str, policy: str, planned: int | None, server_host: str | None,
                        server_port: int | None, settings: Any, metadata: dict[str, Any]) -> str:
    """run.sh of an Arena Run's runner task. Always exits 0 and leaves <run>/run_status.json and Arena's
    experiment_runner_result.json, also when evalfleet cannot be found in the image."""
    q = sh.quote
    liveness = [f"/{ARENA_ATTEMPTS_DIR}/{ATTEMPT_FOLDER}/**", f"/{ARENA_ATTEMPTS_DIR}/{ATTEMPT_FOLDER}.log"]
    missing = "evalfleet is not installed in experiment_runner.image (its watchdog supervises Arena's runner):" \
        " install it there or set experiment_runner.evalfleet_pip"
    lines = [
        "#!/bin/bash",
        "# evalfleet runner task, Isaac Lab Arena Run: evalfleet's watchdog -> Arena's experiment_runner.py;",
        "# always exits 0 and leaves <run>/run_status.json and experiment_runner_result.json.",
        "set -u",
        sh.assign("OUT", "{{output}}"),
        sh.assign("TASK_DIR", TASK_DIR),
        sh.assign("RUN", run, key="runs"),
        sh.assign("ARENA_PY", settings.python, key="experiment_runner.python"),
        "export OUT TASK_DIR",
        'mkdir -p "$OUT/$RUN"',
        *_wait_for_server(server_host, server_port),

        'EF_PY=""',
        'for candidate in python3 python "$ARENA_PY"; do',
        '  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c "import evalfleet" 2>/dev/null; then',
        '    EF_PY=$(command -v "$candidate"); break',
        "  fi",
        "done",
    ]
    if settings.evalfleet_pip:
        lines += [
            'if [ -z "$EF_PY" ] && "$ARENA_PY" -m pip install --quiet ' + q(settings.evalfleet_pip, key="experiment_runner.evalfleet_pip") +
            ' && "$ARENA_PY" -c "import evalfleet"; then EF_PY="$ARENA_PY"; fi',
        ]
    lines += ['if [ -z "$EF_PY" ]; then', f"  echo {q('evalfleet: ' + missing)} >&2"]
    # (a heredoc's end line must start at column 0; JSON is one ASCII line, never the end line; the quoted
    # delimiter expands nothing)
    lines += [x for x in _heredoc('"$OUT/$RUN/run_status.json"', json.dumps(
        {"run": run, "task": task, "policy": policy, "planned_episodes": planned, "state": "failed",
         "reason": missing}))]
    lines += [x for x in _heredoc(f'"$OUT/{ARENA_RESULT_FILE}"', json.dumps(
        {"execution_status": "failed", "process_exit_code": 127, "runs": metadata}))]
    lines += ["  exit 0", "fi"]
    task_dir = sh.Var("TASK_DIR")
    watchdog: list[Any] = [
        sh.Var("EF_PY"), "-m", "evalfleet.execution.watchdog",
        "--startup-timeout", f"{settings.startup_grace_s:g}", "--stall-timeout", f"{settings.stall_s:g}",
        "--max-restarts", settings.max_restarts, "--backoff", f"{settings.restart_backoff_s:g}",
        "--heartbeat", (task_dir, "/heartbeat.json"), "--status-file", (task_dir, "/watchdog_status.json"),
    ]
    for pattern in liveness:
        watchdog += ["--liveness-from-files", (sh.Var("OUT"), pattern)]
    watchdog += ["--", "bash", (task_dir, "/arena_attempt.sh")]
    lines += [
        '"$EF_PY" -m evalfleet.execution.osmo arena-config --template "$TASK_DIR/experiment.yaml"'
        ' --output "$TASK_DIR/arena_experiment.yaml"',
        "RC=$?",
        'if [ "$RC" -eq 0 ]; then',
        "  " + sh.command(*watchdog),
        "  RC=$?",
        "fi",
        sh.command(sh.Var("EF_PY"), "-m", "evalfleet.execution.osmo", "finish-arena-run", "--output", sh.Var("OUT"),
                   "--run", sh.Var("RUN"), "--exit-code", sh.Var("RC"), "--task", task, "--policy", policy,
                   *(["--planned", int(planned)] if planned is not None else []),
                   "--watchdog-status", (task_dir, "/watchdog_status.json"), "--runs-metadata", json.dumps(metadata),
                   key=f"runs.{run}"),
        "exit 0",
        "",
    ]
    return "\n".join(lines)


def _resource(settings: OsmoSettings) -> dict[str, Any]:
    res: dict[str, Any] = {"cpu": settings.cpus, "gpu": settings.gpus, "memory": settings.memory,
                           "storage": settings.storage}
    if settings.platform:
        res["platform"] = settings.platform
    return res


def _platform(settings: OsmoSettings, places: list[RunPlacement]) -> str | None:
    return settings.platform or next((p.server_platform for p in places if p.server_platform), None)


def render_group(loaded: Any, p: RunPlacement, settings: OsmoSettings) -> dict[str, Any]:
    from evalfleet.experiment.plan import run_plan
    from evalfleet.serving.bindings import binding_for

    run = loaded.experiment.runs[p.run]
    rp = run_plan(p.run, run, loaded.experiment.seed)
    _scan_values(run_document(loaded, p.run)["runs"], "runs")
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
        extra_files = [{"path": f"{TASK_DIR}/arena_attempt.sh", "contents": arena_attempt_script(arena)}]
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


def server_script(command: Any, *, key: str) -> str:
    """serve.sh: the binding's `ServerCommand` (cwd, variables, argv), every value quoted by `evalfleet.shell`;
    `exec` so that OSMO's signals reach the server itself."""
    lines = ["#!/bin/bash", "set -u"]
    if command.cwd:
        lines.append(sh.command("cd", "--", command.cwd, key=key))
    lines += ["export " + sh.assign(name, value, key=key) for name, value in command.env.items()]
    lines.append(sh.command("exec", "--", *command.argv, key=key))
    return "\n".join([*lines, ""])


def _policy_context(loaded: Any, run: str) -> Any:
    """The PolicyContext the server gets on its command line (as the local backend builds it)."""
    from evalfleet.experiment.plan import run_plan
    from evalfleet.serving.planning import policy_context

    r = loaded.experiment.runs[run]
    return policy_context(run, r, run_plan(run, r, loaded.experiment.seed).base_seed)


def secret_env_names(node: Any) -> list[str]:
    """The environment variables a Run's options read secrets from (`api_key_env: NAME`, ...)."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key.endswith("_env") and looks_secret(key[:-4]) and isinstance(value, str):
                found.append(value)
            else:
                found += secret_env_names(value)
    elif isinstance(node, list):
        for value in node:
            found += secret_env_names(value)
    return sorted(set(found))


def secret_credentials(policy: dict[str, Any], settings: OsmoSettings) -> dict[str, Any]:
    """A task's `credentials`: every variable its policy reads a secret from, out of the OSMO generic
    credential `osmo.credential` (key = the variable's name). Nothing secret is in the spec itself."""
    names = secret_env_names(policy)
    return {"credentials": {settings.credential: {name: name for name in names}}} if names else {}


def output_credentials(settings: OsmoSettings) -> tuple[str | None, dict[str, Any]]:
    """`osmo.output_url` without the credentials it may carry (s3://KEY:SECRET@bucket/...), and the collect
    task's `credentials` that hand the bucket keys over instead (from `osmo.credential`)."""
    url = settings.output_url
    bare, had_credentials = strip_url_credentials(url) if url else (url, False)
    if not had_credentials:
        return url, {}
    return bare, {"credentials": {settings.credential: {"AWS_ACCESS_KEY_ID": "AWS_ACCESS_KEY_ID",
                                                        "AWS_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY"}}}


def collect_group(runners: list[str], settings: OsmoSettings, experiment_yaml: str) -> dict[str, Any]:
    url, credentials = output_credentials(settings)
    output = url or "{{output}}/collected"
    sources = [f"{{{{input:{i}}}}}" for i in range(len(runners))]
    script = "\n".join([
        "#!/bin/bash",
        "# evalfleet collect task: merge every Run's logs and upload the report.",
        "set -eu",
        sh.command("evalfleet", "collect", TASK_DIR + "/experiment", *sources, "--output", output,
                   key="osmo.output_url"),
        "",
    ])
    return {"name": "collect-group", "tasks": [{
        "name": "collect",
        "lead": True,
        "image": settings.image,
        "command": ["bash", f"{TASK_DIR}/collect.sh"],
        "files": [{"path": f"{TASK_DIR}/collect.sh", "contents": script},
                  {"path": f"{TASK_DIR}/experiment/experiment.yaml", "contents": experiment_yaml}],
        "inputs": [{"task": r} for r in runners],
        "resource": "collect",
        **credentials,
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


def render_workflows(loaded: Any, settings: OsmoSettings | None = None) -> list[RenderedWorkflow]:
    """Every workflow the Experiment needs (one unless it has more than osmo.max_tasks tasks)."""
    given = (loaded.backend_settings or {}).get("osmo") or {}
    check_backend_settings(loaded.backend_settings)  # experiment_runner.* too, also without an Arena Run
    settings = settings or backend_settings("osmo", loaded.backend_settings)
    assert isinstance(settings, OsmoSettings)
    places = placements(loaded)
    check_resources(places, settings, given, loaded.path)
    if settings.output_url:
        bad = [t for t in TOKEN.findall(settings.output_url) if t != "workflow_id"]
        if bad:
            raise UserError(f"osmo.output_url may hold only the {{{{workflow_id}}}} token, not {{{{{bad[0]}}}}}",
                            where=WHERE, key="osmo.output_url")
    parts = split(places, settings.max_tasks)
    if len(parts) > 1 and settings.output_url and "workflow_id" not in TOKEN.findall(settings.output_url):
        raise UserError(f"the Experiment is split into {len(parts)} workflows (more than osmo.max_tasks="
                        f"{settings.max_tasks} tasks) and every part uploads to osmo.output_url: keep"
                        " {{workflow_id}} in it so the parts do not overwrite each other", where=WHERE,
                        key="osmo.output_url")
    base = workflow_base_name(settings, loaded.experiment.name)
    platform = _platform(settings, places)
    resources = {"default": _resource(settings),
                 "collect": {**COLLECT_RESOURCE, "storage": settings.storage}}
    if platform:
        resources["default"]["platform"] = platform
        resources["collect"]["platform"] = platform
    timeout = {k: getattr(settings, k) for k in ("exec_timeout", "queue_timeout") if getattr(settings, k)}
    out = []
    for i, part in enumerate(parts, 1):
        name = base if len(parts) == 1 else f"{base}-part{i}"
        part_doc = loaded.resolved_document()
        # Any literal secret (not only api_key, e.g. Arena's remote_api_token) as the variable it would travel in.
        part_doc["runs"] = {p.run: _secrets_as_variables(part_doc["runs"][p.run], f"runs.{p.run}") for p in part}
        full_yaml = yaml.safe_dump(part_doc, sort_keys=False, width=10**9, allow_unicode=True)
        groups = [render_group(loaded, p, settings) for p in part]
        limit_parallel_runs(groups, [p.runner for p in part], settings.max_parallel_runs)
        groups.append(collect_group([p.runner for p in part], settings, full_yaml))
        workflow: dict[str, Any] = {"name": name, "resources": resources}
        if timeout:
            workflow["timeout"] = timeout
        workflow["groups"] = groups
        out.append(RenderedWorkflow(name, [p.run for p in part], {"workflow": workflow}))
    return out


# ============================================================================ submission


@dataclass
class Submitted:
    file: str
    workflow_id: str
    overview: str | None = None


def osmo_executable() -> str:
    exe = shutil.which("osmo")
    if exe is None:
        raise UserError(INSTALL_HINT, where=WHERE)
    return exe


def submit_command(exe: str, path: str, settings: OsmoSettings) -> list[str]:
    argv = [exe, "workflow", "submit", path, "-t", "json"]
    if settings.pool:
        argv += ["--pool", settings.pool]
    if settings.priority != "NORMAL":
        argv += ["--priority", settings.priority]
    return argv


def parse_submit_answer(stdout: str) -> dict[str, Any]:
    """The JSON object `osmo workflow submit -t json` prints (possibly after log lines)."""
    start = stdout.find("{")
    if start < 0:
        raise ValueError("no JSON object in the answer")
    answer, _ = json.JSONDecoder().raw_decode(stdout[start:])
    if not isinstance(answer, dict) or not isinstance(answer.get("name"), str):
        raise ValueError("the JSON answer has no workflow `name`")
    return answer


def write_workflows(workflows: list[RenderedWorkflow], folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for wf in workflows:
        path = folder / f"{wf.name}.yaml"
        path.write_text(wf.to_yaml(), encoding="utf-8")
        paths.append(path)
    return paths


class SubmissionError(Exception):
    def __init__(self, message: str, submitted: list[Submitted]):
        super().__init__(message)
        self.submitted = submitted


def submit_workflows(paths: list[Path], settings: OsmoSettings) -> list[Submitted]:
    exe = osmo_executable()
    done: list[Submitted] = []
    for path in paths:
        argv = submit_command(exe, str(path), settings)
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            detail = (proc.stderr.strip() or proc.stdout.strip() or f"exit code {proc.returncode}").splitlines()[-1]
            raise SubmissionError(f"osmo workflow submit {path} failed: {detail}", done)
        try:
            answer = parse_submit_answer(proc.stdout)
        except ValueError as exc:
            raise SubmissionError(f"osmo workflow submit {path}: cannot read the workflow ID ({exc});"
                                  f" it printed: {proc.stdout.strip()[:200]!r}", done) from None
        done.append(Submitted(str(path), answer["name"], answer.get("overview")))
    return done


# ============================================================================ the backend


@BACKENDS.register("osmo", summary="OSMO workflows: one task group per Run, policy servers, a collect task")
class OsmoBackend(BackendBase):
    """Submits only: the workflow runs every shard under the watchdog in OSMO tasks and collects there."""

    name = "osmo"

    def __init__(self, *, workers: int | None = None, address: str | None = None):
        if address:
            raise UserError("--ray-address needs --backend ray", where=WHERE, key="--ray-address")

    def check(self) -> None:
        self.open()  # refuses: OSMO runs the workflow, not this machine

    def submit(self, loaded: Any, *, dry_run: bool, output_dir: str | None, stream: Any) -> int:
        """Render the workflows; print them (dry run, also written to `output_dir` when given) or submit each
        with the `osmo` CLI and print the workflow IDs. 1 when a submission failed (what went before is named)."""
        settings = backend_settings("osmo", loaded.backend_settings)
        workflows = render_workflows(loaded, settings)
        if dry_run or settings.dry_run:  # osmo.dry_run=true is Arena's spelling of --dry-run
            if output_dir:
                for path in write_workflows(workflows, Path(output_dir)):
                    print(f"# wrote {path}", file=sys.stderr)
            if len(workflows) > 1:
                print(f"# {len(workflows)} workflows (more than osmo.max_tasks={settings.max_tasks} tasks in one)",
                      file=sys.stderr)
            for wf in workflows:
                order = parallel_order(wf.runs, settings.max_parallel_runs)
                if order:
                    print(f"# {wf.name}: {order}", file=sys.stderr)
            stream.write("---\n".join(wf.to_yaml() for wf in workflows))
            return 0
        osmo_executable()  # a missing CLI is an error before anything is written
        folder = Path(output_dir) if output_dir else Path(tempfile.mkdtemp(prefix="evalfleet-osmo-"))
        paths = write_workflows(workflows, folder)
        try:
            submitted = submit_workflows(paths, settings)
        except SubmissionError as exc:
            for s in exc.submitted:
                print(f"submitted {s.workflow_id} ({s.file})", file=stream)
            print(f"error: {exc}", file=sys.stderr)
            if exc.submitted:
                print(f"{len(exc.submitted)} of {len(paths)} workflows were submitted before the failure",
                      file=sys.stderr)
            return 1
        for s in submitted:
            line = f"submitted {s.workflow_id} ({s.file})"
            print(line + (f" {s.overview}" if s.overview else ""), file=stream)
        print("workflow IDs: " + " ".join(s.workflow_id for s in submitted), file=stream)
        return 0


# ============================================================================ inside a runner task


def finish_run(output: Path, run: str, exit_code: int, *, task: str | None = None, policy: str | None = None,
               planned: int | None = None, watchdog_status: Path | None = None) -> dict[str, Any]:
    """Write `<output>/<run>/run_status.json` after the watchdog returned `exit_code`."""
    from evalfleet.execution.output_dir import write_run_status

    reason = None
    if exit_code != 0:
        detail = None
        if watchdog_status is not None:
            try:
                detail = json.loads(watchdog_status.read_text()).get("reason")
            except (OSError, ValueError, AttributeError):
                detail = None
        reason = f"watchdog gave up (exit code {exit_code})" + (f": {detail}" if detail else "")
    fields = {"run": run, "task": task, "policy": policy, "planned_episodes": planned,
              "state": "completed" if exit_code == 0 else "failed", "reason": reason}
    (output / run).mkdir(parents=True, exist_ok=True)
    write_run_status(output, run, **{k: v for k, v in fields.items() if k != "run"})
    return fields


def write_arena_config(template: Path, output: Path) -> None:
    """Arena's runner reads secrets from its file, not from variables: `<key>_env: NAME` → `<key>: $NAME`.
    Written inside the task only (never into {{output}})."""
    from evalfleet.secrets import resolve

    def put_back(node: Any, path: str) -> Any:
        if isinstance(node, dict):
            out: dict[str, Any] = {}
            for key, value in node.items():
                bare = str(key)[:-4] if str(key).endswith("_env") else None
                if bare and looks_secret(bare) and isinstance(value, str):
                    out[bare] = resolve(None, value, key=f"{path}.{bare}")
                else:
                    out[key] = put_back(value, f"{path}.{key}")
            return out
        if isinstance(node, list):
            return [put_back(v, f"{path}.{i}") for i, v in enumerate(node)]
        return node

    doc = put_back(yaml.safe_load(template.read_text(encoding="utf-8")), "experiment")
    output.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        yaml.safe_dump(doc, f, sort_keys=False, width=10**9, allow_unicode=True)


def _arena_attempt_records(folder: Path, run: str) -> int:
    """Complete lines in one attempt's Arena record files of `run`."""
    from evalfleet.analysis.loading import arena_file_order

    run_dir = folder / run
    if not run_dir.is_dir():
        return 0
    total = 0
    for path in run_dir.iterdir():
        if path.is_file() and arena_file_order(path.name):
            total += path.read_bytes().count(b"\n")
    return total


def finish_arena_run(output: Path, run: str, exit_code: int, *, task: str | None = None,
                     policy: str | None = None, planned: int | None = None, watchdog_status: Path | None = None,
                     metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """After the watchdog over Arena's runner: `<output>/<run>/run_status.json` (state, reason, every attempt
    with its outcome and the episodes it recorded, what a restart reran) and Arena's
    `<output>/experiment_runner_result.json` ({execution_status, process_exit_code, runs})."""
    from evalfleet.execution.output_dir import write_run_status

    watchdog: dict[str, Any] = {}
    if watchdog_status is not None:
        try:
            loaded = json.loads(watchdog_status.read_text())
            watchdog = loaded if isinstance(loaded, dict) else {}
        except (OSError, ValueError):
            watchdog = {}
    attempts = []
    for a in watchdog.get("attempts") or []:
        if not isinstance(a, dict) or not isinstance(a.get("attempt"), int):
            continue
        folder = f"{ARENA_ATTEMPTS_DIR}/{ATTEMPT_FOLDER.format(attempt=a['attempt'])}"
        attempts.append({"attempt": a["attempt"], "folder": folder, "outcome": a.get("outcome"),
                         "reason": a.get("reason"), "exit_code": a.get("exit_code"),
                         "episodes_recorded": _arena_attempt_records(output / folder, run)})
    reran = None
    if len(attempts) > 1:
        earlier = ", ".join(f"attempt {a['attempt']} ({a['outcome']}, {a['episodes_recorded']} episodes kept in"
                            f" {a['folder']})" for a in attempts[:-1])
        reran = (f"Arena's runner does not resume: {len(attempts) - 1} restart(s) reran the Run from its first"
                 f" episode; {earlier}; collect reads every attempt, a later attempt's record of an episode wins")
    reason = None
    if exit_code != 0:
        detail = watchdog.get("reason")
        reason = f"watchdog gave up (exit code {exit_code})" + (f": {detail}" if detail else "")
    state = "completed" if exit_code == 0 else "failed"
    fields = {"task": task, "policy": policy, "planned_episodes": planned, "state": state, "reason": reason,
              "runner": "isaaclab_arena experiment_runner.py", "restarts": max(len(attempts) - 1, 0),
              "attempts": attempts, "reran": reran}
    (output / run).mkdir(parents=True, exist_ok=True)
    write_run_status(output, run, **fields)
    last = attempts[-1]["exit_code"] if attempts else None
    process_exit = exit_code if last is None else last
    result = {"execution_status": state, "process_exit_code": int(process_exit) if exit_code else 0,
              "runs": metadata or {}}
    (output / ARENA_RESULT_FILE).write_text(json.dumps(result) + "\n", encoding="utf-8")
    return {"run": run, **fields}


def _main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m evalfleet.execution.osmo")
    sub = parser.add_subparsers(dest="action", required=True)
    f = sub.add_parser("finish-run", help="write <output>/<run>/run_status.json (inside a runner task)")
    f.add_argument("--output", required=True)
    f.add_argument("--run", required=True)
    f.add_argument("--exit-code", type=int, required=True)
    f.add_argument("--task")
    f.add_argument("--policy")
    f.add_argument("--planned", type=int)
    f.add_argument("--watchdog-status")
    a = sub.add_parser("finish-arena-run", help="write run_status.json and experiment_runner_result.json"
                       " after Arena's runner (inside an Arena Run's runner task)")
    for flag in ("--output", "--run"):
        a.add_argument(flag, required=True)
    a.add_argument("--exit-code", type=int, required=True)
    a.add_argument("--task")
    a.add_argument("--policy")
    a.add_argument("--planned", type=int)
    a.add_argument("--watchdog-status")
    a.add_argument("--runs-metadata", default="{}")
    c = sub.add_parser("arena-config", help="the single-Run file for Arena's runner, secrets put back from the"
                       " variables they travel in")
    c.add_argument("--template", required=True)
    c.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    status = Path(args.watchdog_status) if getattr(args, "watchdog_status", None) else None
    if args.action == "finish-run":
        finish_run(Path(args.output), args.run, args.exit_code, task=args.task, policy=args.policy,
                   planned=args.planned, watchdog_status=status)
    elif args.action == "finish-arena-run":
        finish_arena_run(Path(args.output), args.run, args.exit_code, task=args.task, policy=args.policy,
                         planned=args.planned, watchdog_status=status, metadata=json.loads(args.runs_metadata))
    else:
        try:
            write_arena_config(Path(args.template), Path(args.output))
        except UserError as exc:
            print(f"evalfleet: error: {exc.line()}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
