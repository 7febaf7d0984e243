from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import serving_test_policies  # noqa: E402,F401 - registers `serving_test`

import evalfleet.serving  # noqa: E402,F401 - registers openpi_remote / gr00t_remote


@pytest.fixture()
def subprocess_env(monkeypatch):
    """Environment for `evalfleet serve` subprocesses: the test policies are importable."""
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    monkeypatch.setenv("PYTHONPATH", path)
    return {"PYTHONPATH": path}


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    # websockets' clients honour proxy variables; loopback tests must not go through one.
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
