"""Tiny random LeRobot checkpoints, made in LeRobot's own venv (no downloads), and helpers. Everything here
skips, saying why, when that venv has not been built (`bash scripts/lerobot-env.sh`; scripts/test.sh does)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SRC = HERE.parent.parent / "src"


def lerobot_python() -> Path:
    from evalfleet.serving.bindings import interpreter
    from evalfleet.serving.lerobot import lerobot_venv

    return Path(interpreter(str(lerobot_venv())))


def venv_env() -> dict[str, str]:
    """For evalfleet subprocesses: this checkout's code, no test plugins (the venv has none of their deps)."""
    env = {k: v for k, v in os.environ.items() if k != "EVALFLEET_PLUGINS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))
    return env


@pytest.fixture(scope="session")
def lerobot_py() -> Path:
    python = lerobot_python()
    if not python.exists():
        pytest.skip(f"LeRobot's Python 3.12 venv is not built ({python} missing): run `bash scripts/lerobot-env.sh`"
                    " (scripts/test.sh does unless EVALFLEET_LEROBOT=0)")
    return python


def make_checkpoint(python: Path, kind: str, out: Path, *args: str) -> Path:
    proc = subprocess.run([str(python), str(HERE / "tiny_checkpoint.py"), kind, str(out), *args],
                          capture_output=True, text=True, env=venv_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="session")
def act_pusht(lerobot_py, tmp_path_factory) -> Path:
    """ACT for Push-T pixels_agent_pos at 32 px: camera `top`, state 2, actions 2 in pixels (~256 +- 100)."""
    return make_checkpoint(lerobot_py, "act", tmp_path_factory.mktemp("ckpt") / "act_pusht", "--state-dim", "2",
                           "--action-dim", "2", "--image", "top=32", "--action-mean", "256", "--action-std", "100")


@pytest.fixture(scope="session")
def diffusion_metaworld(lerobot_py, tmp_path_factory) -> Path:
    """Diffusion for Meta-World with camera `corner` at 32 px, state 39, actions 4 in [-1, 1]."""
    return make_checkpoint(lerobot_py, "diffusion", tmp_path_factory.mktemp("ckpt") / "diffusion_mw", "--state-dim",
                           "39", "--action-dim", "4", "--image", "corner=32", "--action-mean", "0",
                           "--action-std", "0.5")


def run_cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evalfleet.cli", *args], capture_output=True, text=True,
                          env=venv_env(), timeout=timeout, stdin=subprocess.DEVNULL)
