"""What runs inside an OSMO task, after (or before) the work itself: `finish_run` writes a runner task's
`<run>/run_status.json` after the watchdog returned; `finish_arena_run` does that for an Arena Run (every
attempt, what a restart reran) and writes Arena's `experiment_runner_result.json`; `write_arena_config`
writes the file Arena's runner reads, secrets put back from the variables they travel in. The generated
task scripts call them as ``python -m evalfleet.backends.osmo finish-run|finish-arena-run|arena-config``
(command.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from evalfleet.arena_format import arena_file_order
from evalfleet.execution.output_dir import write_run_status
from evalfleet.layout import ARENA_ATTEMPT_FOLDER, ARENA_ATTEMPTS_DIR, ARENA_RESULT_FILE
from evalfleet.secrets import looks_secret


def finish_run(output: Path, run: str, exit_code: int, *, task: str | None = None, policy: str | None = None,
               planned: int | None = None, watchdog_status: Path | None = None) -> dict[str, Any]:
    """Write `<output>/<run>/run_status.json` after the watchdog returned `exit_code`."""
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
        folder = f"{ARENA_ATTEMPTS_DIR}/{ARENA_ATTEMPT_FOLDER.format(attempt=a['attempt'])}"
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
