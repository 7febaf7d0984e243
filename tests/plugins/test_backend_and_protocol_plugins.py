"""A backend and a wire protocol from a plug-in package, found through its `evalfleet.plugins` entry point (a
distribution's metadata laid out on PYTHONPATH, as pip would install it): the backend's settings are listed,
validated and reach it, and it runs an Experiment; the protocol is served by `evalfleet serve` and used by a
Run. Every built-in backend's root refuses an unknown key too, naming the valid ones."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from evalfleet_testkit import PLUGINS_DIR, run_evalfleet

EXPERIMENT = """\
name: plugged
seed: 3
runs:
  push:
    environment: {type: metaworld, task: push-v3}
    policy: {type: metaworld_expert}
    rollout_limit: {num_episodes: 4}
"""


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An installed distribution `evalfleet-toy` whose entry point names tests/plugins/evalfleet_toy_plugins."""
    site = tmp_path_factory.mktemp("site")
    dist = site / "evalfleet_toy-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: evalfleet-toy\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[evalfleet.plugins]\ntoy = evalfleet_toy_plugins\n")
    env = {k: v for k, v in os.environ.items() if k != "EVALFLEET_PLUGINS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), str(PLUGINS_DIR), env.get("PYTHONPATH")]))
    return env


@pytest.fixture
def experiment(tmp_path: Path) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT)
    return path


def test_the_plugin_backends_settings_are_listed_with_their_defaults(plugin_env, experiment):
    done = run_evalfleet("overrides", str(experiment), "toy.label=hello", env=plugin_env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "toy.label=hello" in lines and "toy.shards_per_runner=1" in lines
    assert "ray.address=null" in lines and "local.fresh_runners=false" in lines  # built-in ones beside it


@pytest.mark.parametrize(("override", "key", "named"), [
    ("toy.nonsense=1", "toy.nonsense", "valid keys: toy.label, toy.shards_per_runner"),
    ("toy.shards_per_runner=0", "toy.shards_per_runner", "greater than or equal to 1"),
    ("ray.nonsense=1", "ray.nonsense", "valid keys: ray.address, ray.object_store_mb"),
    ("local.whatever=2", "local.whatever", "valid keys: local.fresh_runners"),
    ("slurm.partitoin=gpu", "slurm.partitoin", "did you mean slurm.partition"),
    ("nowhere.x=1", None, "keys start with runs., shared., stopping., experiment_runner., local., osmo., ray., "
                          "slurm., toy."),
])
def test_an_unknown_or_bad_backend_key_is_refused_at_plan_and_run(plugin_env, experiment, tmp_path, override, key,
                                                                   named):
    for command in (("plan", str(experiment), override), ("run", str(experiment), override, "--output",
                                                          str(tmp_path / "out"))):
        done = run_evalfleet(*command, env=plugin_env)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert named in done.stderr, done.stderr
        if key:
            assert key in done.stderr
        assert not (tmp_path / "out").exists()  # nothing written


def test_the_plugin_backend_runs_an_experiment_with_its_settings(plugin_env, experiment, tmp_path):
    out = tmp_path / "out"
    done = run_evalfleet("run", str(experiment), "--backend", "toy", "toy.label=from-the-command-line",
                         "toy.shards_per_runner=2", "--shard-size", "1", "--output", str(out), "--no-progress",
                         env=plugin_env)
    assert done.returncode == 0, done.stderr
    receipt = json.loads((out / "toy_backend.json").read_text())
    assert receipt == {"label": "from-the-command-line", "shards": 4, "runners": 2}
    result = json.loads((out / "experiment_result.json").read_text())
    assert result["runs"]["push"]["status"] == "completed"
    assert result["runs"]["push"]["episodes_recorded"] == 4 and result["runs"]["push"]["decided"] == 4
    assert json.loads((out / "experiment_metadata.json").read_text())["backend"] == "toy"


def test_a_capability_the_plugin_backend_lacks_is_refused_before_anything_is_written(plugin_env, tmp_path):
    path = tmp_path / "served.yaml"
    path.write_text(EXPERIMENT.replace("{type: metaworld_expert}", "{type: openpi_remote, serve: {type: zero}}"))
    done = run_evalfleet("run", str(path), "--backend", "toy", "--output", str(tmp_path / "out"), env=plugin_env)
    assert done.returncode == 2, done.stderr
    assert "runs.push.policy.type" in done.stderr and "the toy backend does not start" in done.stderr
    assert not (tmp_path / "out").exists()
    done = run_evalfleet("submit", str(path), "--backend", "toy", "--dry-run", env=plugin_env)
    assert done.returncode == 2 and "the toy backend runs here" in done.stderr, done.stderr


def test_a_plugin_protocol_is_served_and_used_by_a_run(plugin_env, tmp_path):
    """The local backend starts `evalfleet serve metaworld_expert --protocol toy-json` for the Run, checks its
    health with the protocol's own probe, and the Run's toy-json client plays every episode through it: the
    episodes are the in-process expert's, step for step."""
    served = tmp_path / "served.yaml"
    served.write_text(EXPERIMENT.replace("{type: metaworld_expert}",
                                         "{type: toyjson_remote, serve: {type: metaworld_expert}}"))
    direct = tmp_path / "direct.yaml"
    direct.write_text(EXPERIMENT)
    outcomes = {}
    for name, path in (("served", served), ("direct", direct)):
        out = tmp_path / name
        done = run_evalfleet("run", str(path), "--workers", "1", "--output", str(out), "--no-progress",
                             env=plugin_env)
        assert done.returncode == 0, done.stderr
        records = [json.loads(line) for line in (out / "push" / "episode_results.jsonl").read_text().splitlines()]
        outcomes[name] = sorted((r["episode"], r["seed"], r["success"], r["episode_length"]) for r in records)
    assert len(outcomes["served"]) == 4 and outcomes["served"] == outcomes["direct"]
    log = (tmp_path / "served" / "push" / "server.log").read_text()
    assert "serving toy-json on 127.0.0.1:" in log


def test_serve_refuses_an_unknown_protocol_naming_the_known_ones(plugin_env):
    done = run_evalfleet("serve", "zero", "--protocol", "toy-jsn", env=plugin_env)
    assert done.returncode == 2
    assert "unknown protocol 'toy-jsn'" in done.stderr and "toy-json" in done.stderr


def test_a_served_run_asking_for_gpus_is_refused_by_a_backend_that_has_none(tmp_path, monkeypatch):
    from evalfleet.backend_registry import BACKENDS, register_backend
    from evalfleet.errors import UserError
    from evalfleet.execution.backends import check_capabilities
    from evalfleet.experiment.loading import load_experiment

    path = tmp_path / "gpu.yaml"
    path.write_text(EXPERIMENT.replace("{type: metaworld_expert}", "{type: openpi_remote, serve: {type: zero}, "
                                       "server_resources: {gpus: 2}}"))
    loaded = load_experiment(path)
    monkeypatch.setattr(BACKENDS, "_entries", dict(BACKENDS._entries))  # the registration below is undone after
    register_backend("cpu-only", "evalfleet.backends.local.backend:LocalBackend", served_policies=True, gpus=False)
    with pytest.raises(UserError) as refused:
        check_capabilities(loaded, "cpu-only", submitting=False)
    assert refused.value.key == "runs.push.policy.server_resources.gpus"
    assert "needs 2 GPU(s), which the cpu-only backend cannot give it" in refused.value.message
    assert "--backend local, osmo, ray or slurm" in refused.value.message
    check_capabilities(loaded, "local", submitting=False)  # this machine's GPUs: not refused here
