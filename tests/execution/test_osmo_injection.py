"""Issue #30, shell scripts and cluster settings: a value never becomes shell code in a rendered OSMO task
script, credentials in osmo.output_url never reach a rendered file or a printed line, and cluster settings
that are not what they say are a UserError (exit 2) before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from osmo_sandbox import Sandbox, fill, task_scripts

from evalfleet.cli import main
from evalfleet.backends.osmo.workflow import render_workflows
from evalfleet.experiment.loading import load_experiment
from evalfleet.experiment.overrides import format_value

ROOT = Path(__file__).resolve().parents[2]
GROOT = ROOT / "tests" / "data" / "arena" / "droid_pnp_gr00t_experiment.yaml"
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
RUN = "droid_pnp_gr00t"


# ------------------------------------------------------------------ finding 1: experiment_runner.* reaching bash


@pytest.mark.parametrize("python", ['$PWD"; touch X; echo "', "$(touch X)", "`touch X`", "$HOME"])
def test_arena_runner_python_starting_with_dollar_is_a_word_never_expanded(python: str, tmp_path: Path) -> None:
    """Arena's attempt script runs exactly the program named `experiment_runner.python` (a stand-in by that
    name on PATH records its argv): no `touch` runs, no variable expands."""
    [wf] = render_workflows(load_experiment(GROOT, [f"experiment_runner.python={format_value(python)}"]))
    files = task_scripts(wf.spec)[f"runner-{RUN}"]
    box = Sandbox.create(tmp_path, programs=(python,))
    task_dir, out = tmp_path / "task", tmp_path / "out"
    task_dir.mkdir()
    attempt = fill(files["arena_attempt.sh"], task_dir, out, 0)
    proc = box.run(attempt, OUT=str(out), TASK_DIR=str(task_dir), EVALFLEET_ATTEMPT="2")
    assert proc.returncode == 0, proc.stderr
    assert box.nothing_injected(), list(box.work.iterdir())
    [call] = box.calls()
    assert call[0] == python
    assert call[1:4] == ["isaaclab_arena/evaluation/experiment_runner.py", "--experiment_config",
                         f"{task_dir}/arena_experiment.yaml"]
    assert call[4:6] == ["--experiment_output_directory", f"{out}/arena_attempts/attempt-002"]


# ------------------------------------------------------------------ finding 2: a secret with / and @ in output_url


SECRET = "wJalr/XUtn+FEMI@K7MDENG"


@pytest.mark.parametrize("secret", [SECRET, "wJalr (XUtn) 'FEMI' [K7MDENG]"])
def test_output_url_with_credentials_is_refused_and_never_printed(tmp_path: Path, capsys, secret: str) -> None:
    """#52 polish: credentials in osmo.output_url were stripped (silently dropped); now refused, exit 2, the
    key named, nothing rendered, no part of the key printed."""
    url = f"s3://AKIAEXAMPLE:{secret}@my-bucket/evals/{{{{workflow_id}}}}"
    rendered = tmp_path / "rendered"
    assert main(["submit", str(QUICKSTART), "--backend", "osmo", "--dry-run", "--output-dir", str(rendered),
                 f"osmo.output_url={url}", "osmo.gpus=0"]) == 2
    printed = capsys.readouterr()
    assert "osmo.output_url" in printed.err and "credentials in the URL are not accepted" in printed.err
    for part in ("wJalr", "XUtn", "FEMI", "K7MDENG", "AKIAEXAMPLE"):
        assert part not in printed.out + printed.err
    assert not rendered.exists()


def test_output_url_without_credentials_reaches_the_collect_line(tmp_path: Path) -> None:
    rendered = tmp_path / "rendered"
    assert main(["submit", str(QUICKSTART), "--backend", "osmo", "--dry-run", "--output-dir", str(rendered),
                 "osmo.output_url=s3://my-bucket/evals/{{workflow_id}}", "osmo.gpus=0"]) == 0
    [spec] = [yaml.safe_load(p.read_text()) for p in rendered.iterdir()]
    assert "--output 's3://my-bucket/evals/{{workflow_id}}'" in task_scripts(spec)["collect"]["collect.sh"]


# ------------------------------------------------------------------ finding 3: cluster settings validated


BAD_SETTINGS = [
    ("osmo.max_parallel_runs=true", "osmo.max_parallel_runs", "number"),
    ("osmo.gpus=false", "osmo.gpus", "number"),
    ("experiment_runner.max_restarts=true", "experiment_runner.max_restarts", "number"),
    ("experiment_runner.image='$(touch X)'", "experiment_runner.image", "container image reference"),
    ("experiment_runner.image=Registry/Arena:1 x", "experiment_runner.image", "container image reference"),
    ("osmo.image=evalfleet;latest", "osmo.image", "container image reference"),
    ("osmo.pool=--help", "osmo.pool", "OSMO name"),
    ("osmo.pool=my pool", "osmo.pool", "OSMO name"),
    ("osmo.platform=ovx-l40;x", "osmo.platform", "OSMO name"),
    ("osmo.credential=evalfleet secrets", "osmo.credential", "OSMO name"),
    ("osmo.exec_timeout=0s", "osmo.exec_timeout", "positive duration"),
    ("osmo.queue_timeout=0h0m", "osmo.queue_timeout", "positive duration"),
    ('experiment_runner.python="/isaac-sim/python.sh\\ntouch X"', "experiment_runner.python", "one line"),
    ('osmo.output_url="s3://b/x\\ny"', "osmo.output_url", "one line"),
]


@pytest.mark.parametrize(("override", "key", "expected"), BAD_SETTINGS, ids=[b[0] for b in BAD_SETTINGS])
@pytest.mark.parametrize("command", ["submit", "plan", "plan-json"])
def test_a_wrong_cluster_setting_is_exit_2_naming_the_key_before_anything_is_written(
        override: str, key: str, expected: str, command: str, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    rendered = tmp_path / "rendered"
    argv = {"submit": ["submit", str(QUICKSTART), "--backend", "osmo", "--dry-run", "--output-dir", str(rendered)],
            "plan": ["plan", str(QUICKSTART)], "plan-json": ["plan", str(QUICKSTART), "--json"]}[command]
    assert main([*argv, override]) == 2
    printed = capsys.readouterr()
    [line] = printed.err.strip().splitlines()
    assert f"command line: {key}:" in line and expected in line, line
    assert printed.out == ""
    assert list(tmp_path.iterdir()) == []  # no --output-dir, no X


def test_good_cluster_settings_still_pass() -> None:
    from evalfleet.backend_registry import backend_settings

    osmo = backend_settings("osmo", {"osmo": {
        "pool": "isaac-dev-l40-03", "platform": "ovx-l40", "credential": "evalfleet-secrets", "exec_timeout": "1d0h",
        "image": "localhost:5000/team/evalfleet@sha256:" + "a" * 64, "max_parallel_runs": 2}})
    assert osmo.exec_timeout == "1d0h" and osmo.max_parallel_runs == 2
    arena = backend_settings("experiment_runner", {"experiment_runner": {"image": "nvcr.io/a/b_c:1.0-x"}})
    assert arena.image == "nvcr.io/a/b_c:1.0-x"
