"""The runner task of an Isaac Lab Arena Run (an external environment type, see experiment/validation.py):
Arena's own runner in `experiment_runner.image`, under evalfleet's watchdog judging liveness from the files
Arena's runner writes, each attempt into its own folder ``{{output}}/arena_attempts/attempt-<NNN>`` (Arena's
runner wants an empty one, and a restart then keeps what an earlier attempt recorded). The task leaves
``<run>/run_status.json`` (what each attempt did, what a restart reran) and Arena's
``experiment_runner_result.json``, and exits 0 (task_steps.finish_arena_run writes both)."""

from __future__ import annotations

import json
from typing import Any

from evalfleet import shell as sh
from evalfleet.backends.osmo.credentials import secrets_as_variables
from evalfleet.backends.osmo.names import TASK_DIR
from evalfleet.backends.osmo.scripts import heredoc, wait_for_server
from evalfleet.layout import ARENA_ATTEMPT_FOLDER, ARENA_ATTEMPTS_DIR, ARENA_RESULT_FILE, STATUS_FILE

ARENA_RUNNER_SCRIPT = "isaaclab_arena/evaluation/experiment_runner.py"  # relative to the image's work dir
ARENA_CONDITIONS_FILE = f"{TASK_DIR}/episode_conditions.jsonl"  # a Run's episode_conditions_path, in its task


def is_arena_run(run: Any) -> bool:
    """A Run whose environment is an Isaac Lab Arena type: no evalfleet runner can build it, Arena's can."""
    from evalfleet.experiment.arena_types import is_external_type
    from evalfleet.sim.base import ENVIRONMENTS

    name = run.environment.type
    return ENVIRONMENTS.get(name) is None and is_external_type(name, ENVIRONMENTS.names())


def arena_run_document(loaded: Any, run: str, policy: dict[str, Any] | None = None) -> dict[str, Any]:
    """The single-Run file Arena's runner reads: only the keys the user's file (shared + Run + overrides) set,
    in Arena's own names (evalfleet's defaults such as `recording` or `max_attempts` mean nothing to Arena);
    the policy as wired to its server task. A literal secret is there only as the variable it travels in
    (`<key>_env`); `arena-config` puts the value back inside the task."""
    from evalfleet.experiment.arena_types import arena_spelling

    dumped = loaded.experiment.runs[run].model_dump(mode="json", exclude_none=True, exclude_unset=True)
    if policy is not None:
        dumped["policy"] = policy
    for section in ("environment", "policy"):  # `arena:NAME` is NAME to Arena
        dumped[section] = {**dumped[section], "type": arena_spelling(dumped[section]["type"])}
    labels = {**dumped.pop("labels", {}), **{arena: dumped.pop(ours) for ours, arena in
                                             (("task", "task"), ("policy_name", "policy")) if ours in dumped}}
    if labels:  # Arena's spelling of evalfleet's task / policy_name tags
        dumped["labels"] = labels
    if dumped.get("environment_builder", {}).get("episode_conditions_path") is not None:
        # The file travels in the task (ARENA_CONDITIONS_FILE); Arena takes the episode count from it.
        dumped["environment_builder"] = {**dumped["environment_builder"], "episode_conditions_path":
                                         ARENA_CONDITIONS_FILE}
        dumped.pop("rollout_limit", None)
    return {"runs": {run: secrets_as_variables(dumped, f"runs.{run}")}}


def arena_conditions_files(loaded: Any, run: str) -> list[dict[str, str]]:
    """The Run's episode_conditions_path file as an OSMO task file (none when the Run replays nothing)."""
    from evalfleet.experiment.arena_keys import conditions_file
    from evalfleet.experiment.safe_yaml import read_text_bounded

    given = loaded.experiment.runs[run].environment_builder.episode_conditions_path
    if given is None:
        return []
    return [{"path": ARENA_CONDITIONS_FILE, "contents": read_text_bounded(conditions_file(loaded.path, given))}]


def arena_planned_episodes(run: Any) -> int | None:
    """Episodes Arena's runner records for the Run: num_episodes in all, split across its num_rebuilds builds
    (isaaclab_arena/evaluation/run_execution.py, _split_episodes_across_rebuilds); with episode_conditions_path,
    the file's lines (the loader set num_episodes to that count)."""
    return run.rollout_limit.num_episodes


def arena_runner_command(settings: Any, config: sh.Piece | tuple[sh.Piece, ...],
                         output: sh.Piece | tuple[sh.Piece, ...], *, continue_on_error: bool = False) -> list[Any]:
    """Arena's documented runner command line (osmo/tasks/experiment_runner_task.py); `config` and `output` may
    be the script's own variables (`shell.Var`), never expanded from a user value."""
    argv = [settings.python, ARENA_RUNNER_SCRIPT, "--experiment_config", config, "--experiment_output_directory",
            output, "--viz", "none", "--enable_cameras"]
    if continue_on_error:
        argv.append("--continue_on_error")
    if settings.record_camera_video:
        argv.append("--record_camera_video")
    if settings.record_viewport_video:
        argv.append("--record_viewport_video")
    return argv


def arena_attempt_script(settings: Any, *, continue_on_error: bool = False) -> str:
    """One attempt: Arena's runner into this attempt's own folder, its log beside it (the watchdog's liveness
    reads both). $OUT, $TASK_DIR and EVALFLEET_ATTEMPT come from run.sh and the watchdog."""
    argv = arena_runner_command(settings, (sh.Var("TASK_DIR"), "/arena_experiment.yaml"), sh.Var("DIR"),
                                continue_on_error=continue_on_error)
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


def arena_runner_script(run: str, task: str, policy: str, planned: int | None, server_host: str | None,
                        server_port: int | None, settings: Any, metadata: dict[str, Any]) -> str:
    """run.sh of an Arena Run's runner task. Always exits 0 and leaves <run>/run_status.json and Arena's
    experiment_runner_result.json, also when evalfleet cannot be found in the image."""
    q = sh.quote
    liveness = [f"/{ARENA_ATTEMPTS_DIR}/{ARENA_ATTEMPT_FOLDER}/**", f"/{ARENA_ATTEMPTS_DIR}/{ARENA_ATTEMPT_FOLDER}.log"]
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
        *wait_for_server(server_host, server_port),

        'EF_PY=""',
        'for candidate in python3 python "$ARENA_PY"; do',
        '  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c "import evalfleet" 2>/dev/null; then',
        '    EF_PY=$(command -v "$candidate"); break',
        "  fi",
        "done",
    ]
    if settings.evalfleet_pip:
        lines += [
            'if [ -z "$EF_PY" ] && "$ARENA_PY" -m pip install --quiet '
            + q(settings.evalfleet_pip, key="experiment_runner.evalfleet_pip")
            + ' && "$ARENA_PY" -c "import evalfleet"; then EF_PY="$ARENA_PY"; fi',
        ]
    lines += ['if [ -z "$EF_PY" ]; then', f"  echo {q('evalfleet: ' + missing)} >&2"]
    # (a heredoc's end line must start at column 0; JSON is one ASCII line, never the end line; the quoted
    # delimiter expands nothing)
    lines += [x for x in heredoc(f'"$OUT/$RUN/{STATUS_FILE}"', json.dumps(
        {"run": run, "task": task, "policy": policy, "planned_episodes": planned, "state": "failed",
         "reason": missing}))]
    lines += [x for x in heredoc(f'"$OUT/{ARENA_RESULT_FILE}"', json.dumps(
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
        ('"$EF_PY" -m evalfleet.backends.osmo arena-config --template "$TASK_DIR/experiment.yaml"'
         ' --output "$TASK_DIR/arena_experiment.yaml"'),
        "RC=$?",
        'if [ "$RC" -eq 0 ]; then',
        "  " + sh.command(*watchdog),
        "  RC=$?",
        "fi",
        sh.command(sh.Var("EF_PY"), "-m", "evalfleet.backends.osmo", "finish-arena-run", "--output", sh.Var("OUT"),
                   "--run", sh.Var("RUN"), "--exit-code", sh.Var("RC"), "--task", task, "--policy", policy,
                   *(["--planned", int(planned)] if planned is not None else []),
                   "--watchdog-status", (task_dir, "/watchdog_status.json"), "--runs-metadata", json.dumps(metadata),
                   key=f"runs.{run}"),
        "exit 0",
        "",
    ]
    return "\n".join(lines)
