"""OSMO dry-runs checked against OSMO's spec rules (test_osmo_rules.validate_workflow), splitting, resource
checks before rendering, and the osmo.* settings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalfleet.errors import UserError
from evalfleet.backends.osmo.workflow import render_workflows
from evalfleet.backend_registry import backend_settings
from evalfleet.experiment.listing import backend_setting_leaves
from evalfleet.experiment.loading import load_experiment
from evalfleet.experiment.plan import make_plan
from evalfleet.serving.bindings import binding_for, needs_server
from test_osmo_rules import validate_workflow

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
ARENA = ROOT / "tests" / "data" / "arena_experiment.yaml"
COSMOS = "isaaclab_arena_cosmos.policy.cosmos_remote_policy.CosmosRemotePolicy"
PI0 = "isaaclab_arena_openpi.policy.pi0_remote_policy.Pi0RemotePolicy"
URL = "swift://pdx.example/AUTH_team/evals/{{workflow_id}}"


def dry_run(path: Path, *overrides: str, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evalfleet.cli", "submit", str(path), "--backend", "osmo",
                           "--dry-run", *extra, *overrides], capture_output=True, text=True, cwd=ROOT)


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def groups_by_run(wf: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["name"]: g for g in wf["groups"]}


def task_file(task: dict[str, Any], suffix: str) -> str:
    return next(f["contents"] for f in task["files"] if f["path"].endswith(suffix))


def render(path: Path, *overrides: str):
    loaded = load_experiment(path, overrides)
    return loaded, render_workflows(loaded)


# ------------------------------------------------------------------ the quickstart


def test_quickstart_dry_run_follows_osmo_rules(tmp_path):
    proc = dry_run(QUICKSTART, f"osmo.output_url={URL}", "osmo.workflow_name=qs_eval", "osmo.gpus=0",
                   extra=("--output-dir", str(tmp_path / "rendered")))
    assert proc.returncode == 0, proc.stderr
    [doc] = docs(proc.stdout)
    wf = validate_workflow(doc)
    assert wf["name"] == "qs_eval"
    assert (tmp_path / "rendered" / "qs_eval.yaml").read_text() == proc.stdout
    runs = list(load_experiment(QUICKSTART).experiment.runs)
    assert [g["name"] for g in wf["groups"]] == [f"run-{r}" for r in runs] + ["collect-group"]
    for run, group in zip(runs, wf["groups"]):
        [runner] = group["tasks"]  # metaworld_expert runs in the runner: no server task
        assert runner["lead"] is True and runner["name"] == f"runner-{run}"
        assert runner["exitActions"] == {"RESCHEDULE": "3006"}
        script = task_file(runner, "run.sh")
        assert "evalfleet watchdog" in script and "-- evalfleet runner" in script
        assert script.rstrip().endswith("exit 0")
    collect = wf["groups"][-1]["tasks"][0]
    assert collect["inputs"] == [{"task": f"runner-{r}"} for r in runs]
    script = task_file(collect, "collect.sh")
    assert "{{workflow_id}}" in script and "--output 'swift://pdx.example/AUTH_team/evals/{{workflow_id}}'" in script
    assert all(f"{{{{input:{i}}}}}" in script for i in range(len(runs)))
    assert wf["resources"]["default"]["gpu"] == 0


def test_embedded_single_run_experiment_plans_the_same_episodes(tmp_path):
    loaded, [wf] = render(QUICKSTART)
    full = make_plan(loaded, workers=1)
    for group in wf.spec["workflow"]["groups"][:-1]:
        runner = group["tasks"][0]
        path = tmp_path / f"{runner['name']}.yaml"
        path.write_text(task_file(runner, "experiment.yaml"))
        one = load_experiment(path)
        [name] = one.experiment.runs
        assert group["name"] == f"run-{name}"
        mine = make_plan(one, workers=1).runs[name]
        assert [e.to_json() for e in mine.episodes()] == [e.to_json() for e in full.runs[name].episodes()]


# ------------------------------------------------------------------ Arena-shaped, served policies


def test_arena_dry_run_with_pi0_and_cosmos_servers():
    proc = dry_run(ARENA, f"runs.banana_in_bowl_cosmos.policy.type={COSMOS}",
                   f"runs.mug_on_plate_cosmos.policy.type={COSMOS}", f"osmo.output_url={URL}",
                   "osmo.platform=ovx-l40", "osmo.pool=isaac-dev-l40-03")
    assert proc.returncode == 0, proc.stderr
    [doc] = docs(proc.stdout)
    wf = validate_workflow(doc)
    assert len(wf["groups"]) == 5
    assert wf["resources"]["default"]["platform"] == "ovx-l40"
    for group in wf["groups"][:-1]:
        runner, server = group["tasks"]
        assert runner["lead"] is True and "lead" not in server
        run = group["name"].removeprefix("run-")
        policy = yaml.safe_load(task_file(runner, "experiment.yaml"))["runs"][run]["policy"]
        binding = binding_for(policy["type"])
        assert policy["remote_host"] == f"{{{{host:{server['name']}}}}}"
        assert policy["remote_port"] == binding.default_port
        command = binding.command({k: v for k, v in policy.items() if k != "type"}, "0.0.0.0", binding.default_port)
        serve = task_file(server, "serve.sh")
        assert " ".join(command.argv[:3]) in serve and "exec -- " in serve
        assert server["image"] == command.image
        assert f"SERVER_HOST='{{{{host:{server['name']}}}}}'" in task_file(runner, "run.sh")


def test_arena_file_as_is_serves_only_bound_policy_types():
    loaded, [wf] = render(ARENA)
    validate_workflow(wf.spec)
    for group in wf.spec["workflow"]["groups"][:-1]:
        run = loaded.experiment.runs[group["name"].removeprefix("run-")]
        assert len(group["tasks"]) == (2 if needs_server(run.policy.type, run.policy.options()) else 1)
    # pi0 is bound; the file's CosmosActionEdgeRemotePolicy has no binding.
    assert [len(g["tasks"]) for g in wf.spec["workflow"]["groups"]] == [2, 1, 2, 1, 1]


def test_profile_short_of_a_server_requirement_fails_before_rendering():
    for override, key in (("osmo.gpus=0", "osmo.gpus"), ("osmo.memory=16Gi", "osmo.memory"),
                          ("osmo.cpus=2", "osmo.cpus")):
        proc = dry_run(ARENA, override)
        assert proc.returncode == 2 and proc.stdout == "", (override, proc.stdout[:200])
        assert key in proc.stderr and "banana_in_bowl_pi0" in proc.stderr and len(proc.stderr.splitlines()) == 1


def test_conflicting_server_platforms_and_pools_fail(write_experiment):
    def pi0(**server):
        return {"environment": {"type": "isaaclab_arena_environments/robolab/tasks/banana_in_bowl.yaml"},
                "rollout_limit": {"num_episodes": 2}, "policy": {"type": PI0, "server": server}}

    path = write_experiment({"a": pi0(platform="ovx-l40"), "b": pi0(platform="dgx-h100")})
    with pytest.raises(UserError, match="different platforms"):
        render(path)
    path = write_experiment({"a": pi0(pool="p1"), "b": pi0(pool="p2")}, filename="pools.yaml")
    with pytest.raises(UserError, match="different pools"):
        render(path)
    path = write_experiment({"a": pi0(platform="ovx-l40"), "b": pi0()}, filename="one.yaml")
    with pytest.raises(UserError, match="osmo.platform=dgx"):
        render(path, "osmo.platform=dgx")
    _, [wf] = render(path)  # the server's platform becomes the workflow's
    assert validate_workflow(wf.spec)["resources"]["default"]["platform"] == "ovx-l40"


# ------------------------------------------------------------------ splitting


def _runs(n: int, served_every: int = 0) -> dict[str, Any]:
    runs = {}
    for i in range(n):
        run: dict[str, Any] = {"environment": {"type": "metaworld", "task": "push-v3"},
                               "rollout_limit": {"num_episodes": 100}, "policy": {"type": "metaworld_expert"}}
        if served_every and i % served_every == 0:
            run["policy"] = {
                "type": "openpi_remote", "serve": {"type": "metaworld_expert"}, "allow_unauthenticated": True
            }
        runs[f"run_{i:02d}"] = run
    return runs


def test_thirty_runs_split_into_valid_workflows(write_experiment):
    path = write_experiment(_runs(30, served_every=3), name="big.eval")
    loaded, wfs = render(path, f"osmo.output_url={URL}")
    assert len(wfs) > 1
    names = [wf.name for wf in wfs]
    assert names == [f"big-eval-part{i}" for i in range(1, len(wfs) + 1)]
    seen: list[str] = []
    for wf in wfs:
        spec = validate_workflow(yaml.safe_load(wf.to_yaml()))
        assert sum(len(g["tasks"]) for g in spec["groups"]) <= 20
        collect = spec["groups"][-1]["tasks"][0]
        assert [i["task"] for i in collect["inputs"]] == [f"runner-{r}" for r in wf.runs]
        assert sorted(yaml.safe_load(task_file(collect, "experiment.yaml"))["runs"]) == sorted(wf.runs)
        seen += wf.runs
    assert seen == list(loaded.experiment.runs)
    _, small = render(path, f"osmo.output_url={URL}", "osmo.max_tasks=5")
    assert all(validate_workflow(w.spec) for w in small) and len(small) > len(wfs)
    with pytest.raises(UserError, match="workflow_id"):
        render(path, "osmo.output_url=s3://bucket/evals")


def test_names_follow_osmo_rules_for_awkward_run_names(write_experiment):
    runs = _runs(4)
    awkward = {"_lead": runs["run_00"], "Push_A": runs["run_01"], "push-a": runs["run_02"],
               "x" * 60 + "_": runs["run_03"]}
    _, [wf] = render(write_experiment(awkward, name="9lives"))
    spec = validate_workflow(wf.spec)
    assert spec["name"] == "e-9lives"


# ------------------------------------------------------------------ settings


def test_settings_defaults_overrides_and_errors():
    leaves = backend_setting_leaves({"osmo": {"pool": "p", "priority": "low"}})
    assert "osmo.max_tasks=20" in leaves and "osmo.pool=p" in leaves and "osmo.priority=LOW" in leaves
    assert "osmo.workflow_name=null" in leaves
    with pytest.raises(UserError, match=r"did you mean osmo\.pool") as err:
        backend_settings("osmo", {"osmo": {"pol": "x"}})
    assert err.value.key == "osmo.pol"
    for bad in ({"memory": "8GB"}, {"gpus": -1}, {"max_tasks": 2}, {"exec_timeout": "soon"},
                {"workflow_name": "a b"}, {"priority": "URGENT"}):
        with pytest.raises(UserError):
            backend_settings("osmo", {"osmo": bad})


def test_overrides_command_lists_osmo_settings_and_they_round_trip():
    run = [sys.executable, "-m", "evalfleet.cli", "overrides", str(QUICKSTART)]
    first = subprocess.run([*run, "osmo.pool=dev", f"osmo.output_url={URL}"], capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    osmo_lines = [line for line in first.stdout.splitlines() if line.startswith("osmo.")]
    assert "osmo.pool=dev" in osmo_lines and len(osmo_lines) == 16  # incl. credential, max_parallel_runs, dry_run
    again = subprocess.run([*run, *osmo_lines], capture_output=True, text=True)
    assert again.stdout == first.stdout
    bad = subprocess.run([*run, "osmo.gpu=2"], capture_output=True, text=True)
    assert bad.returncode == 2 and "osmo.gpus" in bad.stderr


def test_submit_list_overrides():
    proc = dry_run(QUICKSTART, extra=("--list-overrides",))
    assert proc.returncode == 0 and "osmo.max_tasks=20" in proc.stdout and "runs.push_expert." in proc.stdout


def test_server_requirement_is_checked_after_run_overrides(write_experiment):
    served = {"environment": {"type": "metaworld", "task": "push-v3"}, "rollout_limit": {"num_episodes": 2},
              "policy": {"type": "openpi_remote", "serve": {"type": "metaworld_expert"},
                         "server_resources": {"gpus": 2, "memory_gb": 8}, "allow_unauthenticated": True}}
    path = write_experiment({"served": served})
    with pytest.raises(UserError, match="2 GPU") as err:
        render(path, "osmo.gpus=1")
    assert err.value.key == "osmo.gpus"
    _, [wf] = render(path, "osmo.gpus=1", "runs.served.policy.server_resources.gpus=1")
    validate_workflow(wf.spec)
    with pytest.raises(UserError, match="osmo.memory"):
        render(path, "runs.served.policy.server_resources.gpus=0", "runs.served.policy.server_resources.memory_gb=300")


def test_makespan_bench_prints_its_table_as_json():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "cluster_makespan.py"), "--gpus", "8", "16"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    table = json.loads(proc.stdout)
    assert table["workload"]["episodes"] == 4000 and set(table["by_gpus"]) == {"8", "16"}
    for row in table["by_gpus"].values():
        for scheme in ("arena", "evalfleet"):
            assert row[scheme]["makespan_h"]["median"] > 0 and row[scheme]["gpu_hours"]["median"] > 0
            assert row[scheme]["cpu_hours"]["median"] > 0  # runner cost is part of the figures


def test_arena_spellings_and_ray_needs_an_address():
    plain = dry_run(QUICKSTART, "osmo.gpus=0")
    proc = subprocess.run([sys.executable, "-m", "evalfleet.cli", "submit", "--experiment_cfg", str(QUICKSTART),
                           "--backend", "osmo", "--dry_run", "osmo.gpus=0"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout == plain.stdout
    ray = subprocess.run([sys.executable, "-m", "evalfleet.cli", "submit", str(QUICKSTART), "--backend", "ray"],
                         capture_output=True, text=True)
    assert ray.returncode == 2 and "--ray-address" in ray.stderr
