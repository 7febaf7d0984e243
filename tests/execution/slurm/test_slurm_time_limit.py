"""Issue #24 must-show 3, the time limit: an array task past its limit shows Slurm's TIMEOUT in run_status.json,
experiment_result.json and index.html. Its Experiment was submitted by the first cluster test (the session
fixture `past_its_time_limit`); this file runs last, so the minute Slurm takes has passed under the other tests."""

from __future__ import annotations

import json
import time
from pathlib import Path


def test_a_task_past_its_time_limit_shows_slurms_timeout(past_its_time_limit: Path) -> None:
    out = past_its_time_limit
    deadline = time.monotonic() + 240  # a safety net: Slurm checks limits every 30 s
    while not (out / "index.html").exists():
        assert time.monotonic() < deadline, "timed out after 240 s waiting for the collect job's index.html"
        time.sleep(0.5)
    reason = json.loads((out / "expert" / "run_status.json").read_text())["reason"]
    assert "TIMEOUT (" in reason and "time limit 00:01:00" in reason and "DUE TO TIME LIMIT" in reason, reason
    assert "TIMEOUT" in (out / "experiment_result.json").read_text()
    assert "TIMEOUT" in (out / "index.html").read_text()
