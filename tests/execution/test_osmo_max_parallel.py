"""osmo.max_parallel_runs=K: Run i starts after Run i-K's runner, in a workflow that passes OSMO's rules."""

from __future__ import annotations

from pathlib import Path

import yaml

from evalfleet.backends.osmo.workflow import render_workflows
from evalfleet.experiment.loading import load_experiment
from test_osmo_rules import validate_workflow

RUN = """  run{i}:
    environment: {{type: pick_and_place_maple_table}}
    policy: {{type: zero_action}}
    rollout_limit: {{num_episodes: 2}}
"""


def _six_runs(tmp_path: Path) -> Path:
    path = tmp_path / "six.yaml"
    path.write_text("runs:\n" + "".join(RUN.format(i=i) for i in range(6)))
    return path


def test_two_at_a_time_orders_the_runs(tmp_path: Path) -> None:
    (wf,) = render_workflows(load_experiment(_six_runs(tmp_path), ["osmo.max_parallel_runs=2"]))
    validate_workflow(wf.spec)
    doc = wf.spec
    groups = [g for g in doc["workflow"]["groups"] if g["name"] != "collect-group"]
    runners = [g["tasks"][0]["name"] for g in groups]
    for i, group in enumerate(groups):
        waits_for = [x["task"] for x in group["tasks"][0].get("inputs", [])]
        assert waits_for == ([runners[i - 2]] if i >= 2 else [])
    collect = doc["workflow"]["groups"][-1]["tasks"][0]
    assert [x["task"] for x in collect["inputs"]] == runners


def test_without_the_setting_every_run_starts_at_once(tmp_path: Path) -> None:
    (wf,) = render_workflows(load_experiment(_six_runs(tmp_path)))
    validate_workflow(wf.spec)
    groups = wf.spec["workflow"]["groups"][:-1]
    assert all("inputs" not in g["tasks"][0] for g in groups)
    assert "max_parallel_runs" not in yaml.safe_dump(wf.spec)


def test_plan_and_dry_run_state_the_ordering(tmp_path: Path, capsys) -> None:
    from evalfleet.cli import main

    path = _six_runs(tmp_path)
    assert main(["plan", str(path), "osmo.max_parallel_runs=2"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "osmo.max_parallel_runs=2: at most 2 Runs at once" in out
    assert "run2 after run0, run3 after run1, run4 after run2, run5 after run3" in out
    assert main(["submit", str(path), "--backend", "osmo", "--dry-run", "osmo.max_parallel_runs=2"]) == 0
    captured = capsys.readouterr()
    comments = [line for line in captured.err.splitlines() if "max_parallel_runs" in line]
    assert len(comments) == 1 and comments[0].startswith("# ")
    assert "run2 after run0, run3 after run1, run4 after run2, run5 after run3" in comments[0]
    validate_workflow(yaml.safe_load(captured.out))
    assert main(["plan", str(path)]) == 0
    assert "max_parallel_runs" not in capsys.readouterr().out
