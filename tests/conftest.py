"""Fixtures shared by the whole suite."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
import yaml

# A suite started in the background by a shell without job control (`cmd &` in a script) inherits SIGINT ignored,
# and so would every `evalfleet run` it starts: the Ctrl-C tests would wait for an interrupt that never lands.
# A handler (unlike SIG_IGN) is reset to the default in every child the tests exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def write_experiment(tmp_path: Path):
    def write(runs: dict[str, Any], name: str = "test", seed: int = 0, filename: str = "exp.yaml", **top: Any) -> Path:
        path = tmp_path / filename
        path.write_text(yaml.safe_dump({"name": name, "seed": seed, **top, "runs": runs}, sort_keys=False))
        return path

    return write
