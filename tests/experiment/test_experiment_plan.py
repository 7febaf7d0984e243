"""The episode plan's determinism contract: an episode's seed and variation values depend only on
(experiment seed, the Run's task, the episode index, the variation's name) — never on shard size,
worker count, num_envs, the order of Runs, other Runs, or other variations."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evalfleet.cli import main
from evalfleet.experiment.loading import load_experiment
from evalfleet.experiment.plan import episode_seed, make_plan, sample, shard_bounds, stable_hash, variation_rng

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
ARENA = ROOT / "tests" / "data" / "arena_experiment.yaml"

PAIRED = """\
name: paired
seed: 3
shared:
  rollout_limit: {num_episodes: 12}
  variations:
    robot.action_noise: {enabled: true}
    object.position_noise: {enabled: true}
    scene.friction_scale: {enabled: false, distribution: normal, mean: 1.0, std: 0.2, low: 0.6, high: 1.4}
runs:
  reach_zero:
    environment: {type: metaworld, task: reach-v3}
    policy: {type: zero}
  reach_random:
    environment: {type: metaworld, task: reach-v3}
    policy: {type: random, chunk_size: 4}
    environment_builder: {num_envs: 5}
  reach_expert:
    environment: {type: metaworld, task: reach-v3, max_steps: 150}
    policy: {type: metaworld_expert}
    rollout_limit: {num_episodes: 7}
  push_zero:
    environment: {type: metaworld, task: push-v3}
    policy: {type: zero}
  push_steps:
    environment: {type: metaworld, task: push-v3}
    policy: {type: zero}
    rollout_limit: {num_steps: 1000, num_episodes: null}
"""


@pytest.fixture
def paired(tmp_path: Path) -> Path:
    path = tmp_path / "paired.yaml"
    path.write_text(PAIRED)
    return path


def plan_json(capsys: pytest.CaptureFixture[str], path: Path, *args: str) -> dict:
    rc = main(["plan", str(path), *args, "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


def episodes(plan: dict) -> dict[str, list[dict]]:
    """Run name → its episodes (index, seed, variation values): what must not move."""
    return {r["name"]: r["episodes"] for r in plan["runs"]}


def per_run(plan: dict) -> dict[str, dict]:
    """Everything about a Run except how it is cut into shards."""
    return {r["name"]: {k: v for k, v in r.items() if k != "shards"} for r in plan["runs"]}


@pytest.mark.parametrize("path_name", ["quickstart", "paired", "arena"])
def test_shard_size_and_workers_do_not_change_episodes(path_name: str, paired: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = {"quickstart": QUICKSTART, "paired": paired, "arena": ARENA}[path_name]
    wrist = "shared.variations.droid_abs_joint_pos.camera_extrinsics_wrist_camera.enabled=true"
    extra = [wrist] if path == ARENA else []
    base = plan_json(capsys, path, *extra)
    seen_shard_counts = set()
    for args in (["--shard-size", "1"], ["--shard-size", "3"], ["--shard-size", "1000"], ["--workers", "1"],
                 ["--workers", "16"], ["--workers", "3", "--shard-size", "5"], []):
        plan = plan_json(capsys, path, *extra, *args)
        assert per_run(plan) == per_run(base), args
        seen_shard_counts.add(len(plan["shards"]))
        # The shards cover each Run's episodes exactly once, in order.
        for run in plan["runs"]:
            mine = [s for s in plan["shards"] if s["run"] == run["name"]]
            assert [s["id"] for s in mine] == run["shards"]
            if run["num_episodes"] is None:
                assert mine == [{"run": run["name"], "id": "000000", "start": 0, "stop": None}]
                continue
            covered = [i for s in mine for i in range(s["start"], s["stop"])]
            assert covered == list(range(run["num_episodes"]))
    assert len(seen_shard_counts) > 2  # the sharding really did change


@pytest.mark.parametrize("episodes", [0, 1, 2, 7, 99, 100, 101, 250, 1000, 4321])
@pytest.mark.parametrize("size", [1, 3, 13, 100])
def test_tapered_shards_cover_a_run_once_and_end_small(episodes: int, size: int) -> None:
    bounds = shard_bounds(episodes, size, taper=True)
    assert [i for start, stop in bounds for i in range(start, stop)] == list(range(episodes))
    sizes = [stop - start for start, stop in bounds]
    assert all(1 <= n <= size for n in sizes)
    assert sizes == sorted(sizes, reverse=True)  # never a larger shard after a smaller one
    # A shard holds at most half of what its Run has left, unless that is below an eighth of `size`.
    smallest = -(-size // 8)
    for (start, stop) in bounds:
        assert stop - start <= max(smallest, -(-(episodes - start) // 2))
    if episodes >= 2 * size:
        assert sizes[-1] <= smallest  # the Run ends on a small shard, whatever `size` is
    assert shard_bounds(episodes, size) == [(a, min(a + size, episodes)) for a in range(0, episodes, size)]


def test_local_default_plan_tapers_and_a_given_shard_size_is_kept(capsys: pytest.CaptureFixture[str]) -> None:
    loaded = load_experiment(QUICKSTART)
    tapered = make_plan(loaded, workers=2, taper=True)
    assert [s.stop - s.start for s in tapered.shards if s.run == "push_expert"] == [25, 13, 6, 4, 2]
    assert len(tapered.shards) > len(make_plan(loaded, workers=2).shards)
    kept = make_plan(loaded, shard_size=10, workers=2, taper=True)
    assert {s.stop - s.start for s in kept.shards} == {10}
    # `evalfleet plan` shows what `evalfleet run` cuts on the local backend.
    assert plan_json(capsys, QUICKSTART, "--workers", "2")["shards"] == [
        {"run": s.run, "id": s.id, "start": s.start, "stop": s.stop} for s in tapered.shards]


def test_num_envs_does_not_change_episodes(paired: Path) -> None:
    a = make_plan(load_experiment(paired)).to_json()
    b = make_plan(load_experiment(paired, ["shared.environment_builder.num_envs=7",
                                           "runs.reach_random.environment_builder.num_envs=1"])).to_json()
    assert episodes(a) == episodes(b)
    assert {r["name"]: r["num_envs"] for r in b["runs"]}["reach_zero"] == 7


@pytest.mark.parametrize("path_name", ["quickstart", "paired", "arena"])
def test_order_of_runs_in_the_file_does_not_matter(path_name: str, paired: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = {"quickstart": QUICKSTART, "paired": paired, "arena": ARENA}[path_name]
    doc = yaml.safe_load(path.read_text())
    doc["runs"] = dict(reversed(list(doc["runs"].items())))
    reordered = tmp_path / "reordered.yaml"
    reordered.write_text(yaml.safe_dump(doc, sort_keys=False))
    a, b = plan_json(capsys, path, "--shard-size", "4"), plan_json(capsys, reordered, "--shard-size", "4")
    assert [r["name"] for r in b["runs"]] == list(reversed([r["name"] for r in a["runs"]]))
    assert per_run(a) == per_run(b)


def test_raising_one_runs_episodes_changes_nothing_else(capsys: pytest.CaptureFixture[str], paired: Path) -> None:
    for path, run, old, new in [(QUICKSTART, "push_expert_noisy", 50, 80), (paired, "reach_expert", 7, 30)]:
        before = episodes(plan_json(capsys, path))
        after = episodes(plan_json(capsys, path, f"runs.{run}.rollout_limit.num_episodes={new}"))
        assert len(after[run]) == new
        assert after[run][:old] == before[run]  # that Run's earlier episodes are unchanged
        assert [e["episode"] for e in after[run]] == list(range(new))
        assert {k: v for k, v in after.items() if k != run} == {k: v for k, v in before.items() if k != run}


def test_same_task_different_policies_face_identical_episodes(paired: Path) -> None:
    eps = episodes(make_plan(load_experiment(paired)).to_json())
    zero, rand, expert = eps["reach_zero"], eps["reach_random"], eps["reach_expert"]
    assert zero == rand  # different policy, different num_envs: same episodes
    assert expert == zero[:7]  # different policy, fewer episodes, different env options: a prefix
    assert {e["seed"] for e in zero}.isdisjoint({e["seed"] for e in eps["push_zero"]})  # another task: other seeds
    assert eps["push_steps"] == []  # a num_steps Run has no fixed episode list
    for e in zero:
        assert set(e["variations"]) == {"robot.action_noise", "object.position_noise"}
        assert 0.0 <= e["variations"]["robot.action_noise"] <= 0.5  # metaworld's default sampler
        x, y, z = e["variations"]["object.position_noise"]
        assert -0.03 <= x <= 0.03 and -0.03 <= y <= 0.03 and z == 0.0
    assert len({e["seed"] for e in zero}) == len(zero)


def test_quickstart_pairs_by_task(capsys: pytest.CaptureFixture[str]) -> None:
    eps = episodes(plan_json(capsys, QUICKSTART))
    strip = lambda es: [(e["episode"], e["seed"]) for e in es]  # noqa: E731 - a one-line local helper
    assert strip(eps["push_expert"]) == strip(eps["push_expert_noisy"])
    assert strip(eps["pick_place_expert"]) == strip(eps["pick_place_expert_noisy"])
    assert all(e["variations"] == {} for e in eps["push_expert"])
    assert all(0.2 <= e["variations"]["robot.action_noise"] <= 0.8 for e in eps["push_expert_noisy"])


def test_enabling_one_variation_leaves_the_others_draws_alone(paired: Path) -> None:
    base = episodes(make_plan(load_experiment(paired)).to_json())["reach_zero"]
    more = episodes(make_plan(load_experiment(paired, [
        "runs.reach_zero.variations.scene.friction_scale.enabled=true",
        "runs.reach_zero.variations.object.mass_scale.enabled=true"])).to_json())["reach_zero"]
    fewer = episodes(make_plan(load_experiment(paired, [
        "runs.reach_zero.variations.object.position_noise.enabled=false"])).to_json())["reach_zero"]
    for b, m, f in zip(base, more, fewer):
        assert b["seed"] == m["seed"] == f["seed"]
        noise = "robot.action_noise"
        assert m["variations"][noise] == b["variations"][noise] == f["variations"][noise]
        assert m["variations"]["object.position_noise"] == b["variations"]["object.position_noise"]
        assert set(m["variations"]) == {"robot.action_noise", "object.position_noise", "scene.friction_scale",
                                        "object.mass_scale"}
        assert 0.6 <= m["variations"]["scene.friction_scale"] <= 1.4  # normal, clipped to low/high
        assert set(f["variations"]) == {"robot.action_noise"}


def test_changing_a_samplers_range_only_changes_that_variation(paired: Path) -> None:
    base = episodes(make_plan(load_experiment(paired)).to_json())["reach_zero"]
    wider = episodes(make_plan(load_experiment(paired, [
        "runs.reach_zero.variations.robot.action_noise.low=0.1",
        "runs.reach_zero.variations.robot.action_noise.high=0.9"])).to_json())["reach_zero"]
    pos, noise = "object.position_noise", "robot.action_noise"
    assert [e["variations"][pos] for e in base] == [e["variations"][pos] for e in wider]
    assert [e["variations"][noise] for e in base] != [e["variations"][noise] for e in wider]


def test_seeds_follow_the_experiment_seed_the_builder_seed_and_the_task_tag(paired: Path) -> None:
    def seeds(*overrides: str) -> dict[str, list[int]]:
        eps = episodes(make_plan(load_experiment(paired, list(overrides))).to_json())
        return {name: [e["seed"] for e in es] for name, es in eps.items()}

    base = seeds()
    assert seeds("seed=4")["reach_zero"] != base["reach_zero"]
    # environment_builder.seed replaces the experiment seed for that Run only.
    own = seeds("runs.reach_zero.environment_builder.seed=4")
    assert own["reach_zero"] == seeds("seed=4")["reach_zero"] and own["reach_random"] == base["reach_random"]
    # An explicit task tag pairs Runs on different environments.
    tagged = seeds("runs.push_zero.task=reach-v3")
    assert tagged["push_zero"] == base["reach_zero"]
    # The policy tag plays no part.
    assert seeds("runs.reach_zero.policy_name=other")["reach_zero"] == base["reach_zero"]


def test_seeds_are_stable_constants() -> None:
    # Pinned: changing the hash (or how its parts are joined) silently changes every evaluation's episodes.
    assert stable_hash("episode", 0, "push-v3", 0) == 8061185172941975318
    assert episode_seed(0, "push-v3", 0) == 1843015446
    assert episode_seed(0, "push-v3", 1) == 1946411182
    assert episode_seed(0, "pick-place-v3", 0) == 204684846
    assert episode_seed(7, "push-v3", 0) == 1166146873
    uniform = {"distribution": "uniform", "low": 0.2, "high": 0.8}
    value = sample(uniform, variation_rng(1843015446, "robot.action_noise"))
    assert value == pytest.approx(0.20741196612861937, abs=1e-12)
    assert all(0 <= episode_seed(s, t, i) < 2**31 for s in (0, 1, 2**40) for t in ("a", "push-v3") for i in range(50))


def test_pinned_seeds_appear_in_the_quickstart_plan(capsys: pytest.CaptureFixture[str]) -> None:
    eps = episodes(plan_json(capsys, QUICKSTART))
    assert [e["seed"] for e in eps["push_expert"][:2]] == [1843015446, 1946411182]
    assert eps["pick_place_expert"][0]["seed"] == 204684846
    noisy = eps["push_expert_noisy"][0]["variations"]["robot.action_noise"]
    uniform = {"distribution": "uniform", "low": 0.2, "high": 0.8}
    assert noisy == sample(uniform, variation_rng(1843015446, "robot.action_noise"))


def test_choice_and_normal_samplers(tmp_path: Path) -> None:
    path = tmp_path / "e.yaml"
    path.write_text(
        "runs:\n"
        "  r:\n"
        "    environment: {type: some/task.yaml}\n"
        "    policy: {type: pkg.Policy}\n"
        "    rollout_limit: {num_episodes: 200}\n"
        "    variations:\n"
        "      table: {color: {enabled: true, distribution: choice, values: [red, green, blue]}}\n"
        "      light.level: {enabled: true, distribution: normal, mean: [0.0, 1.0], std: [1.0, 0.0]}\n"
        "      cup.size: {enabled: true}\n"  # unknown environment type and no sampler: no value
    )
    eps = make_plan(load_experiment(path)).runs["r"].episodes()
    colors = [e.variations["table.color"] for e in eps]
    assert set(colors) == {"red", "green", "blue"}
    assert all(e.variations["light.level"][1] == 1.0 for e in eps)
    assert all(e.variations["cup.size"] is None for e in eps)


def test_plan_does_not_depend_on_python_hash_seed(tmp_path: Path) -> None:
    exe = shutil.which("evalfleet")
    cmd = [exe] if exe else [sys.executable, "-m", "evalfleet.cli"]
    outs = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        proc = subprocess.run([*cmd, "plan", str(QUICKSTART), "runs.push_expert.rollout_limit.num_episodes=5", "--json",
                               "--shard-size", "2"], capture_output=True, text=True, env=env, timeout=60, check=True)
        outs.append(proc.stdout)
    assert outs[0] == outs[1]
    assert episodes(json.loads(outs[0]))["push_expert"][0]["seed"] == 1843015446


def test_plan_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(QUICKSTART), "--shard-size", "10"]) == 0
    out = capsys.readouterr().out
    assert "200 episodes" in out and "20 shards" in out and "servers: none needed" in out


def test_choice_sampler_on_metaworld_variations(tmp_path: Path) -> None:
    path = tmp_path / "e.yaml"
    path.write_text(
        "runs:\n"
        "  r:\n"
        "    environment: {type: metaworld, task: reach-v3}\n"
        "    policy: {type: zero}\n"
        "    rollout_limit: {num_episodes: 60}\n"
        "    variations:\n"
        "      robot.action_noise: {enabled: true, distribution: choice, values: [0, 0.1, 0.3]}\n"
        "      object.position_noise: {enabled: true, distribution: choice, values: [[0, 0, 0], [0.01, -0.01, 0]]}\n"
    )
    eps = make_plan(load_experiment(path)).runs["r"].episodes()
    assert {e.variations["robot.action_noise"] for e in eps} == {0, 0.1, 0.3}
    assert {tuple(e.variations["object.position_noise"]) for e in eps} == {(0, 0, 0), (0.01, -0.01, 0)}
