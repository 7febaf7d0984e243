"""Runners forked from `evalfleet run` for their first attempt (backends/local/standby.py): the same results as
fresh runners, the command and environment the watchdog released them with, nothing left behind when one
is never released. The forking happens in a separate Python process, never in pytest's own."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from evalfleet_testkit import metaworld_run, plugin_env, process_gone, results_by_episode, run_evalfleet


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                          env=plugin_env(**env), stdin=subprocess.DEVNULL)


@pytest.mark.slow
def test_evalfleet_run_forks_first_attempts_and_gets_what_fresh_runners_get(write_experiment, tmp_path):
    path = write_experiment({
        "reach": metaworld_run("reach-v3", episodes=3),
        "push_noisy": metaworld_run("push-v3", episodes=3, variations={
            "robot.action_noise": {"enabled": True, "distribution": "uniform", "low": 0.0, "high": 0.6}}),
    })
    outs = {}
    # fresh runners asked for by the environment variable, or by the local backend's setting
    for name, how, env, settings in (("forked", "forked", plugin_env(), []),
                                     ("started", "started", plugin_env(EVALFLEET_FRESH_RUNNERS="1"), []),
                                     ("setting", "started", plugin_env(), ["local.fresh_runners=true"])):
        out = outs[name] = tmp_path / name
        proc = run_evalfleet("run", str(path), *settings, "--output", str(out), "--workers", "2", "--shard-size", "2",
                             "--no-progress", env=env)
        assert proc.returncode == 0, proc.stderr
        for worker in (0, 1):
            log = (out / ".evalfleet" / f"worker-{worker}.log").read_text()
            assert f"attempt 1: {how} pid" in log and "attempt 1: completed" in log
    assert results_by_episode(outs["forked"]) == results_by_episode(outs["started"])
    assert results_by_episode(outs["setting"]) == results_by_episode(outs["started"])
    assert len(results_by_episode(outs["forked"])) == 6


def test_a_released_standby_runs_the_command_with_the_given_environment_cwd_and_log(tmp_path):
    (tmp_path / "exp.yaml").write_text("name: t\nruns:\n  r:\n    environment: {type: metaworld, task: reach-v3}\n"
                                       "    policy: {type: metaworld_expert}\n    rollout_limit: {num_episodes: 1}\n")
    log = tmp_path / "worker.log"
    done = _python(f"""
        import os, sys
        from evalfleet.backends.local.standby import StandbyRunner
        from evalfleet.cli import main
        standby = StandbyRunner({str(log)!r}, main)
        env = dict(os.environ, EVALFLEET_PLUGINS="no_such_plugin_module")
        cmd = [sys.executable, "-m", "evalfleet.cli", "runner", "exp.yaml", "--output", "out"]
        proc = standby.release(cmd, env, cwd={str(tmp_path)!r})
        print(proc.pid, proc.wait(), os.getpid())
    """)
    assert done.returncode == 0, done.stderr
    pid, code, parent = map(int, done.stdout.split())
    assert pid != parent and code == 2
    text = log.read_text()
    # The relative experiment path was found (the cwd applied), then the released environment's plugin failed.
    assert "plugin module 'no_such_plugin_module' named in EVALFLEET_PLUGINS cannot be imported" in text, text
    assert not (tmp_path / "out").exists()


def test_a_discarded_or_orphaned_standby_exits_without_running_anything(tmp_path):
    done = _python(f"""
        import os
        from evalfleet.backends.local.standby import StandbyRunner
        discarded = StandbyRunner({str(tmp_path / "a.log")!r}, print)
        discarded.discard()  # reaps it
        try:
            os.kill(discarded.pid, 0)
            print("alive")
        except ProcessLookupError:
            print("gone")
        orphan = StandbyRunner({str(tmp_path / "b.log")!r}, print)
        print(orphan.pid, flush=True)
        os._exit(0)  # its parent dies without releasing it
    """)
    assert done.returncode == 0, done.stderr
    state, orphan = done.stdout.split()
    assert state == "gone"
    assert process_gone(int(orphan)), "an orphaned standby runner kept running"
    assert not list(tmp_path.glob("*.log"))


def test_forking_needs_the_commands_own_single_threaded_process_and_can_be_turned_off():
    library = """
        from evalfleet.backends.local.standby import can_fork
        print(can_fork())
    """
    assert _python(library).stdout.split() == ["False"]  # a library caller's process is not ours to fork
    code = """
        import threading
        from evalfleet.backends.local.standby import can_fork
        from evalfleet.forking import mark_command_process
        mark_command_process()  # what the `evalfleet` command's entry point does
        alone = can_fork()
        stop = threading.Event()
        t = threading.Thread(target=stop.wait)
        t.start()
        print(alone, can_fork())
        stop.set()
    """
    assert _python(code).stdout.split() == ["True", "False"]
    assert _python(code, EVALFLEET_FRESH_RUNNERS="off").stdout.split() == ["True", "False"]
    assert _python(code, EVALFLEET_FRESH_RUNNERS="1").stdout.split() == ["False", "False"]
    assert _python(code, EVALFLEET_FRESH_RUNNERS="Yes").stdout.split() == ["False", "False"]


def test_an_unreadable_fresh_runners_value_is_refused_before_anything_is_written(write_experiment, tmp_path):
    path = write_experiment({"reach": metaworld_run("reach-v3", episodes=1)})
    out = tmp_path / "out"
    proc = run_evalfleet("run", str(path), "--output", str(out), "--no-progress",
                         env=plugin_env(EVALFLEET_FRESH_RUNNERS="sometimes"))
    assert proc.returncode == 2, proc.stderr
    assert "EVALFLEET_FRESH_RUNNERS='sometimes'" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


def test_only_runner_commands_of_this_interpreter_are_run_in_place():
    from evalfleet.execution.invocation import runner_command
    from evalfleet.backends.local.standby import runner_argv

    cmd = runner_command("exp.yaml", "out")
    assert runner_argv(cmd) == ["runner", "exp.yaml", "--output", "out"]
    assert runner_argv(runner_command("exp.yaml", "out", python="/other/python")) is None
    assert runner_argv([sys.executable, "-m", "evalfleet.cli", "run", "exp.yaml"]) is None
    assert json.dumps(runner_argv(cmd))  # travels to the child as JSON


@pytest.mark.slow
def test_a_standby_that_died_before_its_release_is_replaced_by_a_started_runner(tmp_path):
    (tmp_path / "exp.yaml").write_text("name: t\nruns:\n  r:\n    environment: {type: metaworld, task: reach-v3}\n"
                                       "    policy: {type: metaworld_expert}\n    rollout_limit: {num_episodes: 1}\n")
    done = _python(f"""
        import os, signal, sys, time
        from evalfleet.cli import main
        from evalfleet.backends.local.standby import StandbyRunner
        from evalfleet.execution.watchdog import WatchdogConfig, supervise
        root = {str(tmp_path)!r}
        standby = StandbyRunner(root + "/worker.log", main)
        os.kill(standby.pid, signal.SIGKILL)
        while open(f"/proc/{{standby.pid}}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
            time.sleep(0.01)  # dead (a zombie until its release reaps it), however long the kill takes to land
        lines = []
        with open(root + "/worker.log", "ab") as log:
            result = supervise([sys.executable, "-m", "evalfleet.cli", "runner", root + "/exp.yaml", "--output",
                                root + "/out"], root + "/hb", WatchdogConfig.local(), stdout=log, stderr=log,
                               log=lines.append, standby=standby)
        print(result.state, len(result.attempts))
        print(*lines, sep="\\n")
    """)
    assert done.returncode == 0, done.stderr
    first, *log = done.stdout.splitlines()
    assert first == "completed 1"
    assert any(line.startswith("attempt 1: started pid") for line in log), log
    assert len((tmp_path / "out" / "r" / "parts").glob("*.jsonl").__next__().read_text().splitlines()) == 1
