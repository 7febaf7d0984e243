"""Fixtures shared by the whole suite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml


@pytest.fixture
def write_experiment(tmp_path: Path):
    def write(runs: dict[str, Any], name: str = "test", seed: int = 0, filename: str = "exp.yaml", **top: Any) -> Path:
        path = tmp_path / filename
        path.write_text(yaml.safe_dump({"name": name, "seed": seed, **top, "runs": runs}, sort_keys=False))
        return path

    return write
