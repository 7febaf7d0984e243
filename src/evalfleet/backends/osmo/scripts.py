"""The shell scripts of evalfleet's own tasks: the runner's run.sh, the server's serve.sh, the collect task's
collect.sh. Every value placed in a shell line goes through `evalfleet.shell` (one quoting rule: a value is
one word bash never expands; only the script's own variables, `shell.Var`, expand)."""

from __future__ import annotations

from typing import Any

from evalfleet import shell as sh
from evalfleet.backends.osmo.names import TASK_DIR

SERVER_WAIT_S = 1800  # how long a runner waits for its server's port before starting anyway


def runner_script(run: str, task: str, policy: str, planned: int | None, server_host: str | None,
                  server_port: int | None) -> str:
    lines = [
        "#!/bin/bash",
        "# evalfleet runner task: watchdog → runner; always exits 0 and leaves <run>/run_status.json.",
        "set -u",
        sh.assign("OUT", "{{output}}"),
        sh.assign("EXP", TASK_DIR + "/experiment.yaml"),
        sh.assign("RUN", run, key="runs"),
        *wait_for_server(server_host, server_port),
        sh.command("evalfleet", "watchdog", "--heartbeat", TASK_DIR + "/heartbeat.json", "--status-file",
                   TASK_DIR + "/watchdog_status.json", "--", "evalfleet", "runner", sh.Var("EXP"), "--output",
                   sh.Var("OUT")),
        "RC=$?",
        sh.command(sh.Raw('"$(command -v python3 || command -v python)"'), "-m", "evalfleet.backends.osmo",
                   "finish-run", "--output", sh.Var("OUT"), "--run", sh.Var("RUN"), "--exit-code", sh.Var("RC"),
                   "--task", task, "--policy", policy, *(["--planned", int(planned)] if planned is not None else []),
                   "--watchdog-status", TASK_DIR + "/watchdog_status.json", key=f"runs.{run}"),
        "exit 0",
        "",
    ]
    return "\n".join(lines)


def wait_for_server(host: str | None, port: int | None) -> list[str]:
    """Wait (at most SERVER_WAIT_S) for the server task's port; OSMO fills in the `{{host:...}}` token."""
    if host is None:
        return []
    return [sh.assign("SERVER_HOST", host), sh.assign("SERVER_PORT", str(port)),
            f"for _ in $(seq {SERVER_WAIT_S // 2}); do",
            '  (exec 3<>"/dev/tcp/$SERVER_HOST/$SERVER_PORT") 2>/dev/null && break',
            "  sleep 2",
            "done"]


def heredoc(path: str, text: str) -> list[str]:
    """Lines writing `text` to `path` verbatim (the quoted delimiter expands nothing; its end line starts at
    column 0, so `text` must not hold a line `EVALFLEET_EOF`)."""
    return [f"cat > {path} <<'EVALFLEET_EOF'", text, "EVALFLEET_EOF"]


def server_script(command: Any, *, key: str) -> str:
    """serve.sh: the binding's `ServerCommand` (cwd, variables, argv), every value quoted by `evalfleet.shell`;
    `exec` so that OSMO's signals reach the server itself."""
    lines = ["#!/bin/bash", "set -u"]
    if command.cwd:
        lines.append(sh.command("cd", "--", command.cwd, key=key))
    lines += ["export " + sh.assign(name, value, key=key) for name, value in command.env.items()]
    lines.append(sh.command("exec", "--", *command.argv, key=key))
    return "\n".join([*lines, ""])


def collect_script(sources: list[str], output: str) -> str:
    """collect.sh: ``evalfleet collect`` of every runner's output (`sources`) into `output`, as the submitted
    Experiment's collect step (`--finish-submission`: its metadata finished or failed, its tracking: sinks)."""
    return "\n".join([
        "#!/bin/bash",
        "# evalfleet collect task: merge every Run's logs and upload the report.",
        "set -eu",
        sh.command("evalfleet", "collect", TASK_DIR + "/experiment", *sources, "--output", output,
                   "--finish-submission", key="osmo.output_url"),
        "",
    ])
