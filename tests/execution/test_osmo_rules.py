"""OSMO's workflow-spec rules, written down as a validator (`validate_workflow`) that the OSMO tests use.

There is no offline OSMO schema and the OSMO CLI needs a live service, so the rules are taken from OSMO's own
pydantic models in the NVIDIA/OSMO repository and checked here:

* src/utils/job/workflow.py `WorkflowSpec` (extra="forbid"): keys name, pool, groups, tasks, resources,
  timeout, backend; groups and tasks are exclusive and one is required; every group and task name is unique
  after `k8s_name` (case-insensitive, '-' == '_'); a group's task inputs must come from groups defined before it
  (`_validate_groups`: "requires input group ... exists before itself"), and name existing tasks.
* src/utils/job/common.py: NAMEREGEX ``[a-zA-Z]([a-zA-Z0-9_-]*[a-zA-Z0-9])?`` for workflow, group and task
  names; TASKNAMEREGEX ``name`` or ``workflow_id:name`` for task inputs.
* src/utils/job/task.py: `TaskGroupSpec` (name, barrier, ignoreNonleadStatus, tasks; extra forbidden; at least
  one task; exactly one lead, a single task being lead by default); `TaskSpec` (extra forbidden; name, image,
  command required, command non-empty; files `{path, contents, base64}` with unique paths not under /osmo;
  exitActions keys COMPLETE|FAIL|RESCHEDULE with codes matching CODE_REGEX; task name not "osmo-ctrl");
  inputs are `{task, regex}` | `{dataset: {...}}` | `{url, regex}`, outputs `{dataset}` | `{url}` |
  `{update_dataset}`; `resource` (default "default") must name an entry of `resources`
  (`propagate_resource_values`); ExitCode.FAILED_PREEMPTED = 3006. Tokens substituted per task
  (`TaskSpec.parse`, `TaskGroupSpec.parse`): ``{{workflow_id}}``, ``{{output}}``, ``{{input:<index>}}``,
  ``{{input:<input task>}}`` and ``{{host:<task of the same group>}}``; anything else stays unsubstituted.
* src/utils/connectors (`ResourceSpec`, extra forbidden): cpu (int), storage, memory, gpu (int), platform,
  nodesExcluded, topology; `TimeoutSpec`: exec_timeout, queue_timeout.
* src/cli/workflow.py: a workflow file is ``workflow:`` plus an optional ``default-values:`` section.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

NAME = re.compile(r"^[a-zA-Z]([a-zA-Z0-9_-]*[a-zA-Z0-9])?$")
TASK_REF = re.compile(rf"^{NAME.pattern[1:-1]}(:{NAME.pattern[1:-1]})?$")
CODE = re.compile(r"^(\d+(-\d+)?)+(,\d+(-\d+)?)*$")
QUANTITY = re.compile(r"^\d+(\.\d+)?(Ki|Mi|Gi|Ti)$")
TOKEN = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")

TOP_KEYS = {"workflow", "default-values"}
WORKFLOW_KEYS = {"name", "pool", "groups", "tasks", "resources", "timeout", "backend"}
GROUP_KEYS = {"name", "barrier", "ignoreNonleadStatus", "tasks"}
TASK_KEYS = {"name", "image", "command", "inputs", "outputs", "kpis", "args", "lead", "environment", "files",
             "privileged", "hostNetwork", "volumeMounts", "credentials", "downloadType", "cacheSize",
             "exitActions", "checkpoint", "resources", "backend", "resource"}
FILE_KEYS = {"base64", "path", "contents"}
RESOURCE_KEYS = {"cpu", "storage", "memory", "gpu", "platform", "nodesExcluded", "topology"}
TIMEOUT_KEYS = {"exec_timeout", "queue_timeout"}
EXIT_ACTIONS = {"COMPLETE", "FAIL", "RESCHEDULE"}


class SpecError(AssertionError):
    pass


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise SpecError(message)


def k8s_name(name: str) -> str:
    return name.lower().replace("_", "-")


def _check_name(name: Any, what: str) -> None:
    _require(isinstance(name, str) and bool(NAME.match(name)), f"{what} name {name!r} breaks OSMO's name rule")
    _require(len(name) <= 63, f"{what} name {name!r} is longer than 63 characters")


def _check_task(task: dict[str, Any], group_tasks: set[str], resources: dict[str, Any]) -> None:
    _require(isinstance(task, dict), f"a task must be a map: {task!r}")
    extra = set(task) - TASK_KEYS
    _require(not extra, f"task {task.get('name')!r} has unknown keys {sorted(extra)}")
    for key in ("name", "image", "command"):
        _require(key in task, f"task {task.get('name')!r} is missing {key!r}")
    name = task["name"]
    _check_name(name, "task")
    _require(k8s_name(name) != "osmo-ctrl", "a task cannot be named osmo-ctrl")
    _require(isinstance(task["image"], str) and task["image"], f"task {name}: image must be a non-empty string")
    cmd = task["command"]
    _require(isinstance(cmd, list) and cmd and all(isinstance(c, str) for c in cmd),
             f"task {name}: command must be a non-empty list of strings")
    _require(all(isinstance(a, str) for a in task.get("args", [])), f"task {name}: args must be strings")
    env = task.get("environment", {})
    _require(isinstance(env, dict) and all(isinstance(v, str) for v in env.values()),
             f"task {name}: environment values must be strings")
    paths: set[str] = set()
    for f in task.get("files", []):
        _require(isinstance(f, dict) and not set(f) - FILE_KEYS and {"path", "contents"} <= set(f),
                 f"task {name}: a file is {{path, contents[, base64]}}: {sorted(f) if isinstance(f, dict) else f}")
        _require(isinstance(f["contents"], str), f"task {name}: file contents must be a string")
        parts = [p for p in str(f["path"]).split("/") if p]
        _require(bool(parts) and parts[0] != "osmo", f"task {name}: file path {f['path']!r} is empty or under /osmo")
        _require(f["path"] not in paths, f"task {name}: two files at {f['path']}")
        paths.add(f["path"])
    for action, codes in task.get("exitActions", {}).items():
        _require(str(action).upper() in EXIT_ACTIONS, f"task {name}: unknown exit action {action!r}")
        _require(bool(CODE.match(str(codes))), f"task {name}: bad exit codes {codes!r}")
    inputs = task.get("inputs", [])
    _require(isinstance(inputs, list), f"task {name}: inputs must be a list")
    input_names = []
    for inp in inputs:
        _require(isinstance(inp, dict), f"task {name}: an input must be a map")
        if "task" in inp:
            _require(not set(inp) - {"task", "regex"}, f"task {name}: task input keys are task, regex")
            _require(bool(TASK_REF.match(str(inp["task"]))), f"task {name}: bad input task {inp['task']!r}")
            input_names.append(str(inp["task"]).split(":")[-1])
        elif "dataset" in inp:
            _require(set(inp) == {"dataset"} and isinstance(inp["dataset"], dict) and "name" in inp["dataset"],
                     f"task {name}: dataset input is {{dataset: {{name, ...}}}}")
        elif "url" in inp:
            _require(not set(inp) - {"url", "regex"}, f"task {name}: url input keys are url, regex")
        else:
            raise SpecError(f"task {name}: an input is a task, a dataset or a url: {inp!r}")
    for out in task.get("outputs", []):
        _require(isinstance(out, dict) and len({"dataset", "url", "update_dataset"} & set(out)) == 1
                 and "task" not in out, f"task {name}: an output is a dataset, a url or update_dataset: {out!r}")
    resource = task.get("resource", "default")
    _require(resource in resources, f"task {name}: resource {resource!r} is not defined in workflow.resources")
    # Tokens: only those OSMO substitutes for this task.
    allowed = {"workflow_id", "output", *(f"host:{t}" for t in group_tasks),
               *(f"input:{i}" for i in range(len(inputs))), *(f"input:{n}" for n in input_names)}
    for token in TOKEN.findall(json.dumps(task)):
        _require(token in allowed, f"task {name}: token {{{{{token}}}}} is not one OSMO fills in here")
    _require("{{" not in TOKEN.sub("", json.dumps(task)), f"task {name}: stray '{{{{'")


def validate_workflow(doc: Any) -> dict[str, Any]:
    """Raise SpecError unless `doc` (a parsed workflow file) follows OSMO's rules; return its `workflow`."""
    _require(isinstance(doc, dict), "a workflow file is a map")
    _require(not set(doc) - TOP_KEYS, f"unknown top-level keys {sorted(set(doc) - TOP_KEYS)}")
    wf = doc.get("workflow")
    _require(isinstance(wf, dict), "missing the top-level `workflow:` map")
    _require(not set(wf) - WORKFLOW_KEYS, f"workflow has unknown keys {sorted(set(wf) - WORKFLOW_KEYS)}")
    _check_name(wf.get("name"), "workflow")
    groups, tasks = wf.get("groups") or [], wf.get("tasks") or []
    _require(bool(groups) != bool(tasks), "a workflow has either groups or tasks (exactly one of them)")
    resources = wf.get("resources", {"default": {}})
    _require(isinstance(resources, dict), "resources must be a map")
    for rname, res in resources.items():
        _require(isinstance(res, dict) and not set(res) - RESOURCE_KEYS, f"resource {rname!r} has unknown keys")
        for key in ("cpu", "gpu"):
            _require(key not in res or (isinstance(res[key], int) and res[key] >= 0), f"resource {rname}.{key}")
        for key in ("memory", "storage"):
            _require(key not in res or bool(QUANTITY.match(str(res[key]))), f"resource {rname}.{key}")
    timeout = wf.get("timeout", {})
    _require(isinstance(timeout, dict) and not set(timeout) - TIMEOUT_KEYS, "timeout keys are exec/queue_timeout")
    if tasks:
        groups = [{"name": f"{t.get('name')}-group", "tasks": [t]} for t in tasks]
    seen: set[str] = set()

    def unique(name: str) -> None:
        _require(k8s_name(name) not in seen, f"name {name!r} repeats (ignoring case and '-'/'_')")
        seen.add(k8s_name(name))

    for g in groups:
        unique(g["name"]) if not tasks else None
        for t in g.get("tasks", []):
            unique(t["name"])
    task_group: dict[str, str] = {t["name"]: g["name"] for g in groups for t in g.get("tasks", [])}
    earlier: set[str] = set()
    for g in groups:
        _require(isinstance(g, dict) and not set(g) - GROUP_KEYS, f"group {g.get('name')!r} has unknown keys")
        _check_name(g.get("name"), "group")
        gtasks = g.get("tasks") or []
        _require(bool(gtasks), f"group {g['name']} has no task")
        leads = 1 if len(gtasks) == 1 else sum(1 for t in gtasks if t.get("lead") is True)
        _require(leads == 1, f"group {g['name']} has {leads} lead tasks; exactly one is needed")
        names = {t.get("name") for t in gtasks}
        for t in gtasks:
            _check_task(t, names, resources)
            for inp in t.get("inputs", []):
                if "task" in inp and ":" not in inp["task"]:
                    _require(inp["task"] in task_group, f"input task {inp['task']!r} does not exist")
                    _require(task_group[inp["task"]] in earlier,
                             f"group {g['name']} takes input from {task_group[inp['task']]}, defined after it")
        earlier.add(g["name"])
    return wf


# ---------------------------------------------------------------- the validator bites


def _good() -> dict[str, Any]:
    return {"workflow": {
        "name": "wf",
        "resources": {"default": {"cpu": 2, "gpu": 0, "memory": "8Gi", "storage": "10Gi"}},
        "groups": [
            {"name": "run-a", "tasks": [
                {"name": "runner-a", "lead": True, "image": "img", "command": ["bash", "/tmp/x/run.sh"],
                 "files": [{"path": "/tmp/x/run.sh", "contents": "echo {{host:server-a}} > {{output}}/x"}],
                 "exitActions": {"RESCHEDULE": "3006"}},
                {"name": "server-a", "image": "img", "command": ["serve"]}]},
            {"name": "collect-group", "tasks": [
                {"name": "collect", "image": "img", "command": ["bash", "-c", "ls {{input:0}} {{input:runner-a}}"],
                 "inputs": [{"task": "runner-a"}]}]},
        ]}}


def test_a_good_workflow_passes():
    validate_workflow(_good())


BREAKERS = {
    "top-level key": lambda d: d.update({"version": 2}),
    "workflow key": lambda d: d["workflow"].update({"priority": "HIGH"}),
    "groups and tasks": lambda d: d["workflow"].update({"tasks": [{"name": "t", "image": "i", "command": ["c"]}]}),
    "name starts with digit": lambda d: d["workflow"]["groups"][0].update({"name": "1run"}),
    "name ends with dash": lambda d: d["workflow"]["groups"][0]["tasks"][1].update({"name": "server-"}),
    "name with a dot": lambda d: d["workflow"].update({"name": "wf.1"}),
    "names equal ignoring case/_": lambda d: d["workflow"]["groups"][0]["tasks"][1].update({"name": "Runner_A"}),
    "group and task share a name": lambda d: d["workflow"]["groups"][1]["tasks"][0].update({"name": "run-a"}),
    "two leads": lambda d: d["workflow"]["groups"][0]["tasks"][1].update({"lead": True}),
    "no lead": lambda d: d["workflow"]["groups"][0]["tasks"][0].update({"lead": False}),
    "upstream after": lambda d: d["workflow"].update({"groups": d["workflow"]["groups"][::-1]}),
    "missing input task": lambda d: d["workflow"]["groups"][1]["tasks"][0].update({"inputs": [{"task": "nope"}]}),
    "task output": lambda d: d["workflow"]["groups"][0]["tasks"][0].update({"outputs": [{"task": "x"}]}),
    "input shape": lambda d: d["workflow"]["groups"][1]["tasks"][0].update({"inputs": [{"path": "x"}]}),
    "undefined resource": lambda d: d["workflow"]["groups"][0]["tasks"][0].update({"resource": "gpu"}),
    "resource key": lambda d: d["workflow"]["resources"]["default"].update({"gpus": 1}),
    "memory unit": lambda d: d["workflow"]["resources"]["default"].update({"memory": "8GB"}),
    "file under /osmo": lambda d: d["workflow"]["groups"][0]["tasks"][0]["files"][0].update({"path": "/osmo/x"}),
    "file key": lambda d: d["workflow"]["groups"][0]["tasks"][0]["files"][0].update({"mode": "0755"}),
    "exit action": lambda d: d["workflow"]["groups"][0]["tasks"][0].update({"exitActions": {"RETRY": "3006"}}),
    "exit code": lambda d: d["workflow"]["groups"][0]["tasks"][0].update({"exitActions": {"RESCHEDULE": "x"}}),
    "empty command": lambda d: d["workflow"]["groups"][0]["tasks"][1].update({"command": []}),
    "task key": lambda d: d["workflow"]["groups"][0]["tasks"][1].update({"cmd": ["x"]}),
    "host of another group": lambda d: d["workflow"]["groups"][1]["tasks"][0].update(
        {"command": ["echo", "{{host:server-a}}"]}),
    "token misspelt": lambda d: d["workflow"]["groups"][0]["tasks"][0].update({"args": ["{{workflow-id}}"]}),
    "input index out of range": lambda d: d["workflow"]["groups"][1]["tasks"][0].update({"args": ["{{input:1}}"]}),
    "stray braces": lambda d: d["workflow"]["groups"][0]["tasks"][1].update({"args": ["{{oops"]}),
}


@pytest.mark.parametrize("rule", sorted(BREAKERS))
def test_each_rule_rejects_a_broken_spec(rule):
    doc = copy.deepcopy(_good())
    BREAKERS[rule](doc)
    with pytest.raises(SpecError):
        validate_workflow(doc)
