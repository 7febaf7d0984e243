"""Condition sets (issue #25): `evalfleet conditions export` writes the planned episodes' conditions with a content
hash; a Run's `conditions:` replays them for any policy, per-condition counts included; Arena's
`episode_conditions_path` shape is read too; a bad set is a UserError naming the file and key (exit 2)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from evalfleet.errors import UserError
from evalfleet.experiment.condition_export import export_conditions
from evalfleet.experiment.conditions import content_hash, repeat_seed
from evalfleet.experiment.loading import load_experiment
from evalfleet.experiment.plan import make_plan
from evalfleet_testkit import run_evalfleet

ENV = {"type": "pusht", "obs_type": "state", "actions": "normalized", "max_steps": 5}
VARIATIONS = {"robot.action_noise": {"enabled": True},
              "robot.observation_noise": {"enabled": True, "distribution": "choice", "values": [0.0, 1.0]}}


def write_yaml(path: Path, doc: dict) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def source_experiment(folder: Path, episodes: int = 4) -> Path:
    return write_yaml(folder / "source.yaml", {
        "name": "source", "seed": 3,
        "shared": {"environment": ENV, "rollout_limit": {"num_episodes": episodes}, "variations": VARIATIONS},
        "runs": {"random": {"policy": {"type": "random"}}},
    })


def replay_experiment(folder: Path, conditions, seed: int = 99, **run) -> Path:
    return write_yaml(folder / "replay.yaml", {
        "name": "replay", "seed": seed, "shared": {"environment": ENV},
        "runs": {"zero": {"policy": {"type": "zero"}, "conditions": conditions, **run}},
    })


def exported(folder: Path, episodes: int = 4) -> tuple[Path, dict]:
    doc = export_conditions(load_experiment(source_experiment(folder, episodes)))
    path = folder / "set.json"
    path.write_text(json.dumps(doc))
    return path, doc


def records(out: Path, run: str) -> list[dict]:
    lines = (out / run / "episode_results.jsonl").read_text().splitlines()
    return sorted((json.loads(line) for line in lines if line.strip()), key=lambda r: r["episode"])


# ---------------------------------------------------------------------------------------------- end to end


def test_replay_with_another_policy_and_seed_faces_the_same_episodes(tmp_path):
    """A real `evalfleet conditions export`, then two real `evalfleet run`s: the source Experiment (random policy,
    seed 3) and a replay (zero policy, seed 99, counts 1, 2, 1, 3) give the same seeds and variation values
    episode by episode, and k episodes of each condition."""
    source = source_experiment(tmp_path)
    done = run_evalfleet("conditions", "export", str(source), "--output", str(tmp_path / "set.json"))
    assert done.returncode == 0, done.stderr
    replay = replay_experiment(tmp_path, {"path": "set.json", "counts": [1, 2, 1, 3]})
    for exp, out in ((source, "out_source"), (replay, "out_replay")):
        done = run_evalfleet("run", str(exp), "--output", str(tmp_path / out), "--workers", "1")
        assert done.returncode == 0, done.stderr

    original = records(tmp_path / "out_source", "random")
    replayed = records(tmp_path / "out_replay", "zero")
    assert len(original) == 4 and len(replayed) == 7
    # Round by round: every condition once, then the repeats; repeat 0 is the condition's own episode.
    for before, after in zip(original, replayed[:4]):
        assert (after["seed"], after["variations"]) == (before["seed"], before["variations"])
    by_variations = Counter(json.dumps(r["variations"], sort_keys=True) for r in replayed)
    assert [by_variations[json.dumps(r["variations"], sort_keys=True)] for r in original] == [1, 2, 1, 3]
    repeats = {(r["seed"], json.dumps(r["variations"], sort_keys=True)) for r in replayed}
    assert len(repeats) == 7  # repeats differ by seed, so (task, seed) pairs stay unique
    saved = yaml.safe_load((tmp_path / "out_replay" / "experiment.yaml").read_text())
    assert saved["runs"]["zero"]["conditions"]["set_sha256"] == json.loads((tmp_path / "set.json").read_text())[
        "sha256"]


# ---------------------------------------------------------------------------------------------- the plan


def test_export_holds_the_plan_per_task_with_its_hash(tmp_path):
    loaded = load_experiment(source_experiment(tmp_path))
    doc = export_conditions(loaded)
    assert doc["sha256"] == content_hash({k: v for k, v in doc.items() if k != "sha256"})
    task = doc["tasks"]["pusht"]
    planned = make_plan(loaded).runs["random"].episodes()
    assert [(c["seed"], c["initial_state"], c["variations"]) for c in task["conditions"]] == [
        (e.seed, e.index, e.variations) for e in planned]
    assert task["environment_type"] == "pusht" and task["runs"] == ["random"]


def test_replay_plan_is_a_function_of_the_episode_index_alone(tmp_path):
    path, doc = exported(tmp_path)
    conditions = doc["tasks"]["pusht"]["conditions"]
    loaded = load_experiment(replay_experiment(tmp_path, {"path": path.name, "counts": 2}))
    rp = make_plan(loaded, shard_size=3).runs["zero"]
    assert rp.num_episodes == 8
    episodes = rp.episodes()
    assert [(e.condition, e.repeat) for e in episodes] == [(i, 0) for i in range(4)] + [(i, 1) for i in range(4)]
    for e in episodes:
        c = conditions[e.condition]
        assert (e.seed, e.variations, e.initial_state) == (repeat_seed(c["seed"], e.repeat), c["variations"],
                                                            c["initial_state"])
    assert [rp.episode(i) for i in (7, 0, 3)] == [episodes[7], episodes[0], episodes[3]]
    # The resolved Experiment carries the conditions: loading it back gives the same plan (workers, resume).
    back = tmp_path / "resolved.yaml"
    back.write_text(loaded.resolved_yaml())
    assert make_plan(load_experiment(back)).runs["zero"].episodes() == episodes


def test_per_condition_counts_in_the_file(tmp_path):
    path, doc = exported(tmp_path, episodes=2)
    task = doc["tasks"]["pusht"]
    task["conditions"][1]["count"] = 3
    doc["sha256"] = content_hash({k: v for k, v in doc.items() if k != "sha256"})
    path.write_text(json.dumps(doc))
    rp = make_plan(load_experiment(replay_experiment(tmp_path, path.name))).runs["zero"]
    assert [(e.condition, e.repeat) for e in rp.episodes()] == [(0, 0), (1, 0), (1, 1), (1, 2)]


def test_arena_episode_conditions_shape(tmp_path):
    """Arena's JSON lines (`episode_results_rebuild<R>.jsonl`: a `variations` map per line) become the same list;
    without a seed in the line, the seed comes from the file's content and the line number."""
    lines = [{"episode_in_env": 0, "variations": {"robot.action_noise": 0.1}},
             {"episode_in_env": 1, "variations": {"robot.action_noise": 0.2}},
             {"episode_in_env": 2, "seed": 7, "episode": 5, "variations": {"robot.action_noise": 0.3}}]
    (tmp_path / "episodes.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    first = make_plan(load_experiment(replay_experiment(tmp_path, "episodes.jsonl"))).runs["zero"].episodes()
    again = make_plan(load_experiment(replay_experiment(tmp_path, "episodes.jsonl", seed=5))).runs["zero"].episodes()
    assert [e.variations for e in first] == [line["variations"] for line in lines]
    assert [(e.seed, e.initial_state) for e in first][2] == (7, 5)
    assert [e.initial_state for e in first][:2] == [0, 1]
    assert first == again and len({e.seed for e in first}) == 3


# ---------------------------------------------------------------------------------------------- errors


def _resealed(doc: dict) -> dict:
    doc["sha256"] = content_hash({k: v for k, v in doc.items() if k != "sha256"})
    return doc


def _edit(edit):
    def apply(doc):
        edit(doc["tasks"]["pusht"]["conditions"])
        return _resealed(doc)
    return apply


BAD_SETS = {
    "tampered": (lambda doc: {**doc, "seed": 4}, "set.json", "sha256", "changed after export"),
    "unknown-variation": (_edit(lambda cs: cs[0]["variations"].update({"robot.gravity": 1.0})), "replay.yaml",
                          "runs.zero.conditions", "unknown variation 'robot.gravity'"),
    "nan": (None, "set.json", "", "not a finite number"),
    "wrong-type": (_edit(lambda cs: cs[1].update(seed="12")), "set.json", "tasks.pusht.conditions.1.seed",
                   "whole number"),
    "vector-for-scalar": (_edit(lambda cs: cs[0]["variations"].update({"robot.action_noise": [0.1, 0.2]})),
                          "replay.yaml", "runs.zero.conditions", "expected a single number"),
    "huge-list": (_edit(lambda cs: cs.extend([cs[0]] * 10_001)), "set.json", "tasks.pusht.conditions",
                  "at most 10,000"),
    "another-task": (lambda doc: _resealed({**doc, "tasks": {"lift": doc["tasks"]["pusht"]}}), "replay.yaml",
                     "runs.zero.conditions", "no conditions for this Run's task 'pusht'"),
    "unknown-key": (_edit(lambda cs: cs[0].update(sed=1)), "set.json", "tasks.pusht.conditions.0.sed",
                    "unknown key 'sed'"),
}


@pytest.mark.parametrize("case", sorted(BAD_SETS))
def test_a_bad_set_names_the_file_and_key(tmp_path, case):
    edit, where, key, words = BAD_SETS[case]
    path, doc = exported(tmp_path)
    if edit is None:
        path.write_text(json.dumps(doc).replace(str(doc["tasks"]["pusht"]["conditions"][0]["seed"]), "NaN", 1))
    else:
        path.write_text(json.dumps(edit(doc)))
    with pytest.raises(UserError) as err:
        load_experiment(replay_experiment(tmp_path, path.name))
    assert Path(err.value.where).name == where and (err.value.key or "") == key and words in err.value.message


@pytest.mark.parametrize("run, key, words", [
    ({"rollout_limit": {"num_episodes": 5}}, "runs.zero.rollout_limit.num_episodes", "gives 4 episodes"),
    ({"rollout_limit": {"num_steps": 50}}, "runs.zero.rollout_limit.num_steps", "drop num_steps"),
    ({"variations": {"robot.action_noise": {"enabled": True}}}, "runs.zero.variations.robot.action_noise.enabled",
     "takes its variation values from the set"),
])
def test_a_run_that_contradicts_its_set(tmp_path, run, key, words):
    path, _ = exported(tmp_path)
    with pytest.raises(UserError) as err:
        load_experiment(replay_experiment(tmp_path, path.name, **run))
    assert err.value.key == key and words in err.value.message


@pytest.mark.parametrize("conditions, key, words", [
    ("missing.json", "runs.zero.conditions", "does not exist"),
    ({"path": "set.json", "counts": [1, 2]}, "runs.zero.conditions.counts", "2 counts for 4 conditions"),
    ({"path": "set.json", "counts": 0}, "runs.zero.conditions.counts", "1..1,000"),
    ({"path": "set.json", "count": 2}, "runs.zero.conditions.count", "unknown key 'count'"),
])
def test_a_bad_conditions_key(tmp_path, conditions, key, words):
    exported(tmp_path)
    with pytest.raises(UserError) as err:
        load_experiment(replay_experiment(tmp_path, conditions))
    assert err.value.key == key and words in err.value.message and err.value.where.endswith("replay.yaml")


def test_an_edited_inline_set_in_a_resolved_experiment(tmp_path):
    path, _ = exported(tmp_path)
    resolved = yaml.safe_load(load_experiment(replay_experiment(tmp_path, path.name)).resolved_yaml())
    resolved["runs"]["zero"]["conditions"]["conditions"][0]["seed"] += 1
    with pytest.raises(UserError) as err:
        load_experiment(write_yaml(tmp_path / "edited.yaml", resolved))
    assert err.value.key == "runs.zero.conditions.sha256"


def test_cli_export_refuses_to_overwrite_and_writes_nothing_on_error(tmp_path):
    source = source_experiment(tmp_path)
    target = tmp_path / "set.json"
    target.write_text("keep")
    done = run_evalfleet("conditions", "export", str(source), "--output", str(target))
    assert done.returncode == 2 and "--force" in done.stderr and target.read_text() == "keep"
    done = run_evalfleet("conditions", "export", str(source), "--output", str(tmp_path / "new.json"),
                         "--run", "nope")
    assert done.returncode == 2 and "--run" in done.stderr and not (tmp_path / "new.json").exists()
    done = run_evalfleet("conditions", "export", str(source), "--output", str(target), "--force")
    assert done.returncode == 0 and json.loads(target.read_text())["tasks"]["pusht"]["conditions"]


def test_a_set_of_given_seeds_replays_exactly_those_seeds_in_order(tmp_path):
    """`seeds_document`: another tool's seeds (lerobot-eval --seed=7 plays 7, 8, ...) as a set a Run replays."""
    from evalfleet.experiment.condition_export import seeds_document

    (tmp_path / "seeds.json").write_text(json.dumps(seeds_document("pusht", "pusht", range(7, 12), runs=["r"])))
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump({"name": "replay", "seed": 99, "runs": {"r": {
        "environment": {"type": "pusht"}, "policy": {"type": "random"}, "conditions": "seeds.json",
        "rollout_limit": {"num_episodes": 5}}}}))
    plan = make_plan(load_experiment(tmp_path / "exp.yaml"))
    assert [e.seed for e in plan.runs["r"].episodes()] == [7, 8, 9, 10, 11]


@pytest.mark.parametrize("where", ["a_file/set.json", "a_file/deeper/set.json"])
def test_export_to_a_place_that_cannot_be_written_is_one_line(tmp_path, where):
    """#52, polish: `conditions export` to a place that cannot be written (here below a file: permissions do not
    bind the root user the suite runs as) gave a traceback."""
    (tmp_path / "a_file").write_text("not a folder")
    done = run_evalfleet("conditions", "export", str(source_experiment(tmp_path)), "--output", str(tmp_path / where))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "cannot write it" in done.stderr and "--output" in done.stderr
    assert (tmp_path / "a_file").read_text() == "not a folder"
