"""The template local runners are forked from (backends/local/runner_template.py): the modules imported once, in
it; its standbys children of the process that asked for them, released and waited for as any standby; a
template that cannot serve costs nothing but the fallback; nothing left behind, nothing printed. The forking
happens in separate Python processes, never in pytest's own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from evalfleet_testkit import metaworld_run, plugin_env, process_gone, results_by_episode

# A module whose import leaves a line (its process and parent) in $PRELOAD_MARKS, and prints, which nobody
# may see: the template's output goes nowhere.
MARKER = """
import os
with open(os.environ["PRELOAD_MARKS"], "a") as f:
    f.write(f"{os.getpid()} {os.getppid()}\\n")
print("preload marker imported")
"""


def _python(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    (tmp_path / "preload_marker.py").write_text(MARKER)
    env = plugin_env(PRELOAD_MARKS=str(tmp_path / "marks"))
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                          env=env, stdin=subprocess.DEVNULL, cwd=tmp_path)


def _marks(tmp_path: Path) -> list[tuple[int, int]]:
    path = tmp_path / "marks"
    return [tuple(map(int, line.split())) for line in path.read_text().splitlines()] if path.exists() else []


def test_standbys_come_from_the_template_with_its_imports_and_are_this_process_children(tmp_path):
    done = _python("""
        import os, sys
        from evalfleet.backends.local.runner_template import RunnerTemplate

        def main(argv):
            print("preloaded" if "preload_marker" in sys.modules else "missing", os.getpid(), os.getppid(), *argv)
            return 3

        template = RunnerTemplate(main, ["preload_marker", "no_such_module_anywhere"])
        standbys = template.standbys(["a.log", "b.log"], timeout=60)
        cmd = [sys.executable, "-m", "evalfleet.cli", "runner", "exp.yaml"]
        procs = [s.release([*cmd, name], dict(os.environ)) for s, name in zip(standbys, "ab")]
        print(os.getpid(), template.pid, *[p.wait() for p in procs])
        print("marker here" if "preload_marker" in sys.modules else "marker not here")
        template.close()  # already gone: nothing to do
    """, tmp_path)
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    parent, template, *codes = map(int, first.split())
    assert codes == [3, 3] and second == "marker not here"
    assert _marks(tmp_path) == [(template, parent)]  # imported once, in the template
    for name in "ab":
        state, pid, ppid, *argv = (tmp_path / f"{name}.log").read_text().split()
        assert state == "preloaded" and ppid == str(parent) and argv == ["runner", "exp.yaml", name]
        assert int(pid) not in (parent, template)
    assert "preload marker imported" not in done.stdout + done.stderr
    assert process_gone(template)


def test_a_template_that_cannot_serve_returns_none_and_leaves_nothing(tmp_path):
    done = _python("""
        import os, signal
        from evalfleet.backends.local.runner_template import RunnerTemplate

        dead = RunnerTemplate(print, ["preload_marker"])
        os.kill(dead.pid, signal.SIGKILL)
        print(dead.standbys(["a.log"], timeout=60), dead.standbys(["b.log"], timeout=60))
        unused = RunnerTemplate(print, ["preload_marker"])
        unused.close()
        print(unused.standbys(["c.log"]), unused.pid, dead.pid)
    """, tmp_path)
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert first == "None None"
    unused, dead = map(int, second.split()[1:])
    assert second.split()[0] == "None"
    assert process_gone(unused) and process_gone(dead)
    assert not list(tmp_path.glob("*.log"))


def test_standbys_of_a_template_whose_asker_died_exit_unreleased(tmp_path):
    done = _python("""
        import os
        from evalfleet.backends.local.runner_template import RunnerTemplate

        template = RunnerTemplate(print, ["preload_marker"])
        standbys = template.standbys(["a.log", "b.log"], timeout=60)
        print(template.pid, *[s.pid for s in standbys], flush=True)
        os._exit(0)  # dies without releasing them
    """, tmp_path)
    assert done.returncode == 0, done.stderr
    pids = list(map(int, done.stdout.split()))
    assert len(pids) == 3
    assert all(process_gone(pid) for pid in pids), "a template or its standby outlived the process that asked for them"
    assert not list(tmp_path.glob("*.log"))


def test_the_modules_are_those_the_runs_environment_types_list(tmp_path):
    from evalfleet.backends.local.runner_template import preload_modules, start_runner_template
    from evalfleet.experiment.loading import load_experiment

    def loaded(*environments: str) -> object:
        path = tmp_path / "exp.yaml"
        path.write_text("name: t\nruns:\n" + "".join(
            f"  r{i}:\n    environment: {env}\n    policy: {{type: random}}\n    rollout_limit: {{num_episodes: 1}}\n"
            for i, env in enumerate(environments)))
        return load_experiment(path)

    metaworld = ["evalfleet.sim.metaworld_env", "metaworld.env_dict", "metaworld.policies"]
    cartpole = "{type: gymnasium, id: CartPole-v1, success: {terminated: true}}"
    assert preload_modules(loaded("{type: metaworld, task: reach-v3}", cartpole,
                                  "{type: metaworld, task: push-v3}")) == metaworld  # each once
    assert preload_modules(loaded(cartpole)) == []
    assert start_runner_template(loaded(cartpole), print) is None  # nothing to import: no process forked


@pytest.mark.slow
def test_evalfleet_run_imports_the_simulator_once_in_the_template(write_experiment, tmp_path):
    """A Run type whose preload is the marker: imported once, by a child of `evalfleet run`, whose runners
    were forked, and ran as fresh runners do."""
    (tmp_path / "preload_marker.py").write_text(MARKER)
    (tmp_path / "preload_probe_plugin.py").write_text(textwrap.dedent("""
        import dataclasses

        from evalfleet.sim.base import ENVIRONMENTS

        entry = ENVIRONMENTS.get("metaworld")
        ENVIRONMENTS.add("metaworld_preload_probe", entry.factory, options=entry.options, summary="test",
                         info=dataclasses.replace(entry.info, preload=("preload_marker",)))
    """))
    runs = {name: metaworld_run(task, episodes=3) for name, task in (("reach", "reach-v3"), ("push", "push-v3"))}
    for run in runs.values():
        run["environment"]["type"] = "metaworld_preload_probe"
    path = write_experiment(runs)
    env = plugin_env(PRELOAD_MARKS=str(tmp_path / "marks"), EVALFLEET_PLUGINS="preload_probe_plugin")
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "evalfleet.cli", "run", str(path), "--output", str(out),
                             "--workers", "2", "--shard-size", "2", "--no-progress"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr
    [(template, parent)] = _marks(tmp_path)
    assert parent == proc.pid
    runners = []
    for worker in (0, 1):
        log = (out / ".evalfleet" / f"worker-{worker}.log").read_text()
        assert "attempt 1: forked pid" in log and "attempt 1: completed" in log
        runners.append(int(log.split("attempt 1: forked pid ")[1].split(":")[0]))
    assert template not in runners
    assert "preload marker imported" not in stdout + stderr
    assert len(results_by_episode(out)) == 6
