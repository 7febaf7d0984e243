"""Issue #30, must-show 2: random strings (quotes, `$`, backticks, line breaks, NUL, redirections, injected
`touch PWNED`) rendered into every script-bound setting of an OSMO workflow (the Run's task and policy labels,
a served policy's options, `osmo.output_url`, `experiment_runner.python`, `experiment_runner.evalfleet_pip`),
and every rendered script run with bash in a sandbox whose programs are recording stand-ins
(tests/execution/osmo_sandbox.py). Either the value is refused when the Experiment loads or renders (a
UserError: NUL, line breaks and other control characters in settings and labels, OSMO's `{{...}}` tokens,
blank labels), or no injected command ever runs and every program receives the value byte for byte."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from osmo_sandbox import Sandbox, fill, listener, task_scripts

from evalfleet.errors import UserError
from evalfleet.backends.osmo.workflow import render_workflows
from evalfleet.experiment.loading import load_experiment
from evalfleet.experiment.overrides import format_value
from evalfleet.secrets import carries_credentials

GROOT = Path(__file__).resolve().parents[1] / "data" / "arena" / "droid_pnp_gr00t_experiment.yaml"
ARENA_RUN = "droid_pnp_gr00t"
BUILTINS = set(subprocess.run(["bash", "-c", "compgen -b; compgen -k"], capture_output=True, text=True,
                              check=True).stdout.split())

PAYLOADS = ["$(touch PWNED)", "`touch PWNED`", "'; touch PWNED; '", '"; touch PWNED; echo "', "$PWD\"; touch PWNED",
            ">PWNED", "${IFS}touch${IFS}PWNED", "\\'$(touch PWNED)", "a;touch PWNED"]
LOAD_REFUSED = ["\n touch PWNED\n", "\0touch PWNED", "{{output}}", "\r$(touch PWNED)"]
SHELL_CHARS = list("'\"$`\\;|&<>(){}[]*?!#~= -:@/%^,.+") + ["é", "✓"]
PRINTABLE = st.one_of(st.sampled_from(SHELL_CHARS), st.characters(categories=["L", "N", "P", "S", "Zs"]))
ANY = st.one_of(st.sampled_from([*SHELL_CHARS, "\t", "\n", "\r", "\0", "\x85"]), st.characters(codec="utf-8"))


def _strings(chars: st.SearchStrategy[str], payloads: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(st.text(chars, min_size=1, max_size=16),
                     st.builds(lambda a, p, b: a + p + b, st.text(chars, max_size=6), st.sampled_from(payloads),
                               st.text(chars, max_size=6)))


# Mostly values that stay on one printable line (they must reach the programs intact), some with anything in
# them (line breaks, NUL, controls, OSMO tokens: refused at load or render, or quoted all the same).
HOSTILE = st.one_of(*[_strings(PRINTABLE, PAYLOADS)] * 8, _strings(ANY, PAYLOADS + LOAD_REFUSED))


def _may_be_refused(value: str) -> bool:
    """What load/render may refuse: a character that cannot stay on one printable line (NUL, line breaks,
    controls), an OSMO token, a blank or over-long label, a URL that may carry credentials (`x://a:b@c`)."""
    return (not value.isprintable() or "{{" in value or "}}" in value or not value.strip() or len(value) > 200
            or carries_credentials(value))


def _program_name(value: str) -> bool:
    """A value that can be a stand-in's file name on PATH (and that bash does not take for a builtin, or for a
    job spec: a command word starting with `%` is `fg %...`)."""
    return ("/" not in value and value not in (".", "..") and value not in BUILTINS and "\0" not in value
            and not value.startswith("%"))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task=HOSTILE, policy=HOSTILE, note=HOSTILE, url=HOSTILE)
def test_hostile_labels_options_and_output_url_never_execute_in_runner_server_and_collect_tasks(
        task, policy, note, url):
    with tempfile.TemporaryDirectory() as d:
        output_url = f"s3://bucket/{url}/{{{{workflow_id}}}}"
        _check_metaworld(Path(d), task, policy, note, output_url)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task=HOSTILE, policy=HOSTILE, python=HOSTILE.filter(_program_name), pip=HOSTILE)
def test_hostile_experiment_runner_settings_never_execute_in_an_arena_runner_task(task, policy, python, pip):
    with tempfile.TemporaryDirectory() as d:
        _check_arena(Path(d), task, policy, python, pip)


def _render(path: Path, overrides: list[str], values: list[str]):
    try:
        [wf] = render_workflows(load_experiment(path, overrides))
    except UserError as exc:
        assert "\n" not in exc.line() and (exc.key or exc.where), exc.line()
        assert any(_may_be_refused(v) for v in values), exc.line()
        event(f"refused: {exc.key}")
        return None
    event(f"ran the scripts of {path.name}")
    return yaml.safe_load(wf.to_yaml())  # what OSMO reads: the YAML round trip is part of the rule


def _check_metaworld(root: Path, task: str, policy: str, note: str, output_url: str) -> None:
    env = {"type": "metaworld", "task": "push-v3"}
    runs = {"plain": {"environment": env, "task": task, "policy_name": policy, "rollout_limit": {"num_episodes": 1},
                      "policy": {"type": "metaworld_expert"}},
            "served": {"environment": env, "task": task, "rollout_limit": {"num_episodes": 1},
                       "policy": {"type": "openpi_remote", "api_key_env": "EVALFLEET_TEST_KEY",
                                  "serve": {"type": "metaworld_expert", "note": note}}}}
    exp = root / "exp.yaml"
    exp.write_text(yaml.safe_dump({"name": "hostile", "seed": 0, "runs": runs}))  # escaped: exact
    spec = _render(exp, [f"osmo.output_url={format_value(output_url)}", "osmo.gpus=0"],
                   [task, policy, note, output_url])
    if spec is None:
        return
    scripts = task_scripts(spec)
    box = Sandbox.create(root / "box")
    sock = listener()
    try:
        port = sock.getsockname()[1]
        for name, files in scripts.items():
            task_dir, out = root / name, root / "out" / name
            task_dir.mkdir()
            script = next(text for file, text in files.items() if file.endswith(".sh"))
            proc = box.run(fill(script, task_dir, out, port, inputs=[root / "in0", root / "in1"]))
            assert proc.returncode == 0, (name, proc.stderr)
    finally:
        sock.close()
    assert box.nothing_injected(), list(box.work.iterdir())
    calls = box.calls()
    finishes = [c for c in calls if c[:4] == ["python3", "-m", "evalfleet.backends.osmo", "finish-run"]]
    assert len(finishes) == 2
    for c in finishes:
        assert c[c.index("--task") + 1] == task
    plain = next(c for c in finishes if c[c.index("--run") + 1] == "plain")
    assert plain[plain.index("--policy") + 1] == policy
    [serve] = [c for c in calls if c[:2] == ["evalfleet", "serve"]]
    assert json.loads(serve[serve.index("--options-json") + 1])["note"] == note
    assert serve[serve.index("--task") + 1] == task
    [collect] = [c for c in calls if c[:2] == ["evalfleet", "collect"]]
    assert collect[collect.index("--output") + 1] == output_url.replace("{{workflow_id}}", "wf-1")


def _check_arena(root: Path, task: str, policy: str, python: str, pip: str) -> None:
    overrides = [f"runs.{ARENA_RUN}.task={format_value(task)}", f"runs.{ARENA_RUN}.policy_name={format_value(policy)}",
                 f"experiment_runner.python={format_value(python)}",
                 f"experiment_runner.evalfleet_pip={format_value(pip)}"]
    spec = _render(GROOT, overrides, [task, policy, python, pip])
    if spec is None:
        return
    files = task_scripts(spec)[f"runner-{ARENA_RUN}"]
    box = Sandbox.create(root / "box", programs=("evalfleet", "python3", "python", python))
    task_dir, out = root / "task", root / "out"
    task_dir.mkdir()
    sock = listener()
    try:
        run_sh = fill(files["run.sh"], task_dir, out, sock.getsockname()[1])
        # evalfleet importable in the image: arena-config, the watchdog, finish-arena-run
        proc = box.run(run_sh)
        assert proc.returncode == 0, proc.stderr
        [finish] = [c for c in box.calls() if "finish-arena-run" in c]
        assert finish[finish.index("--task") + 1] == task and finish[finish.index("--policy") + 1] == policy
        # evalfleet missing: pip installs experiment_runner.evalfleet_pip with Arena's Python, then the
        # task still leaves run_status.json (a quoted heredoc: nothing in it expands)
        box.clear()
        proc = box.run(run_sh, STAND_IN_NO_EVALFLEET="1")
        assert proc.returncode == 0, proc.stderr
        assert [python, "-m", "pip", "install", "--quiet", pip] in box.calls()
        status = json.loads((out / ARENA_RUN / "run_status.json").read_text())
        assert (status["task"], status["policy"]) == (task, policy)
    finally:
        sock.close()
    # one attempt of Arena's runner, as the watchdog starts it
    box.clear()
    attempt = fill(files["arena_attempt.sh"], task_dir, out, 0)
    proc = box.run(attempt, OUT=str(out), TASK_DIR=str(task_dir), EVALFLEET_ATTEMPT="1")
    assert proc.returncode == 0, proc.stderr
    [call] = box.calls()
    assert call[0] == python and call[1] == "isaaclab_arena/evaluation/experiment_runner.py"
    assert box.nothing_injected(), list(box.work.iterdir())
