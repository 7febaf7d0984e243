"""The report of a finished run says so (#55, the fix on the way): index.html and experiment_result.json were
written while experiment_metadata.json still said `running`, so a finished Experiment's report header read
"status running"."""

from __future__ import annotations

import json
import re

import yaml
from evalfleet_testkit import metaworld_run, run_evalfleet


def test_the_report_of_a_finished_run_says_finished(tmp_path) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({"name": "status", "runs": {"push": metaworld_run("push-v3", episodes=2)}}))
    out = tmp_path / "out"
    proc = run_evalfleet("run", str(exp), "--output", str(out), "--workers", "1")
    assert proc.returncode == 0, proc.stderr
    page = (out / "index.html").read_text()
    assert re.search(r'<b id="metadata-status">finished</b>', page), re.findall(r'metadata-status">\w+', page)
    result = json.loads((out / "experiment_result.json").read_text())
    assert result["experiment_metadata"]["document"]["status"] == "finished"
    assert json.loads((out / "experiment_metadata.json").read_text())["status"] == "finished"
