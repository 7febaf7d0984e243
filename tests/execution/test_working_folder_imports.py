"""No code from the working folder (issue 30): a hostile package in the folder a command runs in is never
imported, whatever an Experiment's `import:` or `id:` names.

Loading an Experiment (plan, overrides) checks the spelling of `import:` and `id:` only; the runner imports
`import:` exactly as named, and no Python evalfleet starts (a fresh runner, a runner forked from
`evalfleet run`, a restarted runner: `invocation.runner_command`) has the current folder on `sys.path`.
Every command runs as `python -m evalfleet.cli` (the form that puts the current folder first on
`sys.path`) in a temporary folder holding `evilpkg/__init__.py`, which writes a marker file if imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evalfleet.execution.invocation import runner_command

ZEN = "Beautiful is better than ugly"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """The working folder: `evilpkg` (and `evilpkg.sub`) there writes tmp_path/MARKER when imported."""
    folder = tmp_path / "work"
    (folder / "evilpkg").mkdir(parents=True)
    marker = tmp_path / "MARKER"
    (folder / "evilpkg" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\n")
    (folder / "evilpkg" / "sub.py").write_text("")
    return folder


def marker_of(work: Path) -> Path:
    return work.parent / "MARKER"


def experiment(work: Path, **environment: object) -> Path:
    env = {"type": "gymnasium", "id": "CartPole-v1", "success": {"terminated": True}, "max_steps": 5, **environment}
    path = work / "e.yaml"
    path.write_text(yaml.safe_dump({"runs": {"cart": {"environment": env, "policy": {"type": "random"},
                                                       "rollout_limit": {"num_episodes": 2}}}}))
    return path


def cli(work: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("EVALFLEET_FRESH_RUNNERS", "EVALFLEET_PLUGINS")}
    return subprocess.run([sys.executable, "-m", "evalfleet.cli", *args], cwd=work, capture_output=True, text=True,
                          check=False, timeout=300, stdin=subprocess.DEVNULL, env={**environ, **env})


def test_plan_imports_nothing_that_import_names(work: Path) -> None:
    path = experiment(work, **{"import": "evilpkg.sub"})
    done = cli(work, "plan", str(path))
    assert done.returncode == 0, done.stderr
    done = cli(work, "plan", str(path), "runs.cart.environment.import=evilpkg", "--json")
    assert done.returncode == 0, done.stderr
    assert not marker_of(work).exists()


def test_import_this_at_plan_prints_nothing_of_this(work: Path) -> None:
    done = cli(work, "plan", str(experiment(work, **{"import": "this.x"})))
    assert done.returncode == 0, done.stderr
    assert ZEN not in done.stdout + done.stderr


def test_a_module_colon_id_is_refused_with_the_fix(work: Path) -> None:
    done = cli(work, "plan", str(experiment(work, id="evilpkg:Env-v1")))
    assert done.returncode == 2
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1, line
    assert "runs.cart.environment.id" in line and "`import: evilpkg` and `id: Env-v1`" in line, line
    assert not marker_of(work).exists()


@pytest.mark.parametrize("module", ["evilpkg/sub", "evilpkg..sub", "os; touch x", "class.x", ".evilpkg", ""])
def test_import_must_be_a_dotted_module_name(work: Path, module: str) -> None:
    done = cli(work, "plan", str(experiment(work, **{"import": module})))
    assert done.returncode == 2
    assert "runs.cart.environment.import" in done.stderr and "dotted module name" in done.stderr, done.stderr


def check_refused_import(out: Path, work: Path) -> None:
    status = json.loads((out / "cart" / "run_status.json").read_text())
    assert status["failed_because"] == "environment_error", status
    assert "No module named 'evilpkg'" in status["reason"], status
    assert not marker_of(work).exists()


@pytest.mark.parametrize("fresh", ["1", "0"], ids=["fresh-runner", "forked-runner"])
def test_evalfleet_run_never_imports_from_the_working_folder(work: Path, fresh: str) -> None:
    path = experiment(work, **{"import": "evilpkg.sub"})
    done = cli(work, "run", str(path), "--output", "out", "--workers", "1", "--no-progress",
               EVALFLEET_FRESH_RUNNERS=fresh)
    assert done.returncode == 1, done.stderr
    assert "cart: failed: environment_error" in done.stderr and "evilpkg" in done.stderr, done.stderr
    check_refused_import(work / "out", work)


def test_a_restarted_runner_never_imports_from_the_working_folder(work: Path) -> None:
    """A restart is a fresh process started with `runner_command` (here, run the way the watchdog does)."""
    path = experiment(work, **{"import": "evilpkg"})
    out = work / "out"
    command = runner_command(path, out)
    assert "-P" in command[1:command.index("-m")]
    environ = {k: v for k, v in os.environ.items() if k != "EVALFLEET_PLUGINS"}
    done = subprocess.run(command, cwd=work, capture_output=True, text=True, check=False, timeout=300,
                          stdin=subprocess.DEVNULL, env=environ)
    assert done.returncode == 0, done.stderr  # the Run failed; the runner did its job
    check_refused_import(out, work)


def test_a_runner_forked_from_python_dash_m_drops_the_working_folder(work: Path) -> None:
    """What a standby child (or a runner on Python 3.10, which has no -P) does before importing anything."""
    code = ("import sys; from evalfleet.interpreter import drop_working_folder; drop_working_folder(); "
            "import importlib.util; print(importlib.util.find_spec('evilpkg') is None)")
    done = subprocess.run([sys.executable, "-c", code], cwd=work, capture_output=True, text=True, check=False,
                          timeout=60)
    assert done.stdout.strip() == "True", done.stderr
    explicit = subprocess.run([sys.executable, "-c", code], cwd=work, capture_output=True, text=True, check=False,
                              timeout=60, env={**os.environ, "PYTHONPATH": str(work)})
    assert explicit.stdout.strip() == "False", explicit.stderr  # named on purpose: kept


def test_the_gl_probe_never_imports_from_the_working_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sim/rendering.py decides the GL backend in a `python -c` child: `-c` alone would put the working
    folder first on its sys.path, and a ./mujoco.py there would run."""
    from evalfleet.sim.rendering import _probe

    marker = tmp_path / "MARKER"
    (tmp_path / "mujoco.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\nraise SystemExit(3)\n")
    monkeypatch.chdir(tmp_path)
    _probe("egl")  # whether EGL works here does not matter
    assert not marker.exists()


def test_python_dash_m_evalfleet_drops_the_working_folder_before_any_import(work: Path) -> None:
    """`python -m evalfleet.cli` itself: a plugin (or any module) is found as in the runners it starts,
    installed or on PYTHONPATH, never in the folder the command runs in."""
    path = experiment(work)
    done = cli(work, "plan", str(path), EVALFLEET_PLUGINS="evilpkg")
    assert done.returncode == 2 and "EVALFLEET_PLUGINS" in done.stderr, done.stderr
    assert not marker_of(work).exists()
    done = cli(work, "plan", str(path), EVALFLEET_PLUGINS="evilpkg", PYTHONPATH=str(work))
    assert marker_of(work).exists()  # named on purpose in PYTHONPATH: imported
