"""The results store (#53): real runs added by `run` itself (`store:`), by `store add` and by a resumed run; the same
output added twice counted once, a resumed output replacing its rows, four processes adding at once (a local
folder and the S3 server the suite starts), and every bad store refused in one line, exit 2, nothing changed."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml
from evalfleet_testkit import evalfleet_cmd, metaworld_run, run_evalfleet

import evalfleet
from evalfleet import store as results_store

EPISODES = 4


def experiment_file(folder: Path, *, store: str | None = None) -> Path:
    doc = {"name": "store_test", "seed": 3,
           "runs": {"push": metaworld_run("push-v3", episodes=EPISODES),
                    "push_noisy": metaworld_run("push-v3", episodes=EPISODES, policy_name="noisy",
                                                variations={"robot.action_noise": {"low": 0.4, "high": 0.8}})}}
    if store is not None:
        doc["store"] = store
    path = folder / "experiment.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def by_hand(out: Path) -> dict[str, tuple[int, int]]:
    """Run → (episodes, successes) counted from the collected records themselves."""
    found = {}
    for path in sorted(out.glob("*/episode_results.jsonl")):
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        found[path.parent.name] = (len(records), sum(1 for r in records if r["status"] == "success"))
    return found


def in_store(location: str) -> dict[str, tuple[int, int]]:
    rows = results_store.open(location).query(
        "SELECT run, count(*) AS n, sum(CASE WHEN status = 'success' THEN 1 ELSE 0 END) AS s "
        "FROM episodes GROUP BY run ORDER BY run").to_pylist()
    return {r["run"]: (r["n"], r["s"]) for r in rows}


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def output(tmp_path_factory) -> tuple[Path, Path]:
    """One real run whose Experiment names a store: (output folder, store folder)."""
    root = tmp_path_factory.mktemp("store")
    store = root / "store"
    out = root / "out"
    evalfleet.run(experiment_file(root, store=str(store)), output=out, workers=1, progress=False, log=lambda _: None)
    return out, store


def copy_as_new(out: Path, dest: Path) -> Path:
    """A copy of an output as another Experiment would be (its own experiment_id, no store of its own)."""
    shutil.copytree(out, dest, ignore=shutil.ignore_patterns("lock"))
    meta = json.loads((dest / "experiment_metadata.json").read_text())
    meta["experiment_id"] = uuid.uuid4().hex
    (dest / "experiment_metadata.json").write_text(json.dumps(meta))
    doc = yaml.safe_load((dest / "experiment.yaml").read_text())
    doc.pop("store", None)  # a copy adds to the store its test names, never to the fixture's
    (dest / "experiment.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


def test_run_adds_its_output_to_the_store_it_names(output) -> None:
    out, store = output
    experiments = results_store.open(str(store)).experiments()
    assert len(experiments) == 1 and experiments[0]["episodes"] == 2 * EPISODES
    metadata = json.loads((out / "experiment_metadata.json").read_text())
    assert experiments[0]["experiment_id"] == metadata["experiment_id"]
    assert in_store(str(store)) == by_hand(out)


def test_the_same_output_added_twice_counts_once(output, tmp_path: Path) -> None:
    out, _ = output
    store = tmp_path / "s"
    for word in ("added", "replaced"):
        proc = run_evalfleet("store", "add", str(out), "--store", str(store))
        assert proc.returncode == 0, proc.stderr
        assert word in proc.stderr
    assert in_store(str(store)) == by_hand(out)
    listed = run_evalfleet("store", "ls", "--store", str(store), "--json")
    assert [e["episodes"] for e in json.loads(listed.stdout)] == [2 * EPISODES]


def test_a_resumed_output_replaces_its_earlier_rows(output, tmp_path: Path, monkeypatch) -> None:
    """An interrupted output added, then resumed: the store holds the finished one, each episode once."""
    out = copy_as_new(output[0], tmp_path / "out")
    store = tmp_path / "s"
    full = by_hand(out)
    for path in [*out.glob("push/parts/*.jsonl"), out / "push" / "episode_results.jsonl"]:
        kept = [line for line in path.read_text().splitlines() if json.loads(line)["episode"] < 2]
        path.write_text("".join(line + "\n" for line in kept))
    assert run_evalfleet("collect", str(out), "--output", str(out)).returncode == 0
    assert run_evalfleet("store", "add", str(out), "--store", str(store)).returncode == 0
    assert in_store(str(store))["push"][0] == 2
    monkeypatch.setenv("EVALFLEET_STORE", str(store))
    evalfleet.run(out / "experiment.yaml", output=out, resume=True, workers=1, progress=False, log=lambda _: None)
    assert in_store(str(store)) == full == by_hand(out)
    assert len(results_store.open(str(store)).experiments()) == 1


def add_at_once(outputs: list[Path], store: str, env: dict | None = None) -> None:
    procs = [subprocess.Popen(evalfleet_cmd("store", "add", str(o), "--store", store), env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for o in outputs]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err


def test_four_processes_adding_at_once_lose_nothing(output, tmp_path: Path) -> None:
    outs = [copy_as_new(output[0], tmp_path / f"out{i}") for i in range(4)]
    store = tmp_path / "s"
    add_at_once(outs, str(store))
    experiments = results_store.open(str(store)).experiments()
    assert sorted(e["episodes"] for e in experiments) == [2 * EPISODES] * 4
    per_run = by_hand(output[0])
    assert in_store(str(store)) == {run: (4 * n, 4 * s) for run, (n, s) in per_run.items()}


def test_four_processes_adding_at_once_to_s3(output, tmp_path: Path, s3_env) -> None:
    _endpoint, _key, _secret, bucket = s3_env
    outs = [copy_as_new(output[0], tmp_path / f"out{i}") for i in range(4)]
    store = f"s3://{bucket}/store-{uuid.uuid4().hex[:8]}"
    import os

    add_at_once(outs, store, env=dict(os.environ))
    add_at_once(outs[:1], store, env=dict(os.environ))  # again: replaced, not doubled
    experiments = results_store.open(store).experiments()
    assert sorted(e["episodes"] for e in experiments) == [2 * EPISODES] * 4
    per_run = by_hand(output[0])
    assert in_store(store) == {run: (4 * n, 4 * s) for run, (n, s) in per_run.items()}


def one_line_refusal(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in proc.stderr, proc.stderr


@pytest.fixture
def filled(output, tmp_path: Path) -> Path:
    store = tmp_path / "s"
    shutil.copytree(output[1], store)
    return store


def only_file(store: Path, table: str) -> Path:
    return next((store / table).glob("*.parquet"))


@pytest.mark.parametrize("damage", ["corrupt", "foreign-name", "foreign-parquet", "newer-file", "newer-store"])
def test_a_bad_store_is_refused_in_one_line_and_left_as_it_was(output, filled: Path, damage: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if damage == "corrupt":
        only_file(filled, "episodes").write_bytes(b"PAR1 not really")
        words = ["not a readable Parquet file", "episodes/"]
    elif damage == "foreign-name":
        pq.write_table(pa.table({"x": [1]}), filled / "runs" / "mine.parquet")
        words = ["a file the store did not write", "mine.parquet"]
    elif damage == "foreign-parquet":
        pq.write_table(pa.table({"x": [1]}), only_file(filled, "runs"))
        words = ["did not write", "runs/"]
    elif damage == "newer-file":
        path = only_file(filled, "experiments")
        table = pq.read_table(path)
        pq.write_table(table.replace_schema_metadata({**table.schema.metadata, b"evalfleet.store.version": b"99"}),
                       path)
        words = ["newer evalfleet", "store schema 99"]
    else:
        (filled / "evalfleet-store.json").write_text('{"schema": "evalfleet.store", "version": 7}')
        words = ["newer evalfleet", "evalfleet-store.json"]
    before = tree(filled)
    for args in (["ls"], ["query", "SELECT count(*) FROM episodes"], ["add", str(output[0])]):
        one_line_refusal(run_evalfleet("store", *args, "--store", str(filled)), *words)
    assert tree(filled) == before


def test_bad_arguments_are_refused_in_one_line(output, tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    one_line_refusal(run_evalfleet("store", "add", str(tmp_path), "--store", store), "not a collected output")
    one_line_refusal(run_evalfleet("store", "query", "SELECT nothing FROM episodes", "--store", str(output[1])),
                     "the query failed")
    one_line_refusal(run_evalfleet("store", "rm", "f" * 32, "--store", str(output[1])), "no Experiment")
    one_line_refusal(run_evalfleet("store", "add", str(output[0]), "--store", store, "--tag", "a b"), "--tag")
    assert not Path(store).exists()
    env = {k: v for k, v in __import__("os").environ.items() if k != "EVALFLEET_STORE"}
    one_line_refusal(run_evalfleet("store", "ls", env=env), "--store", "EVALFLEET_STORE")


def test_an_unreachable_bucket_is_one_line(output) -> None:
    import os

    env = {**os.environ, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
           "EVALFLEET_S3_ENDPOINT": "http://127.0.0.1:1", "AWS_MAX_ATTEMPTS": "1"}
    one_line_refusal(run_evalfleet("store", "add", str(output[0]), "--store", "s3://nowhere/store", env=env),
                     "storage error")


def test_removing_an_experiment_is_explicit(output, filled: Path) -> None:
    experiment_id = results_store.open(str(filled)).experiments()[0]["experiment_id"]
    proc = run_evalfleet("store", "rm", experiment_id, "--store", str(filled))
    assert proc.returncode == 0 and experiment_id in proc.stdout
    assert results_store.open(str(filled)).experiments() == []
    assert in_store(str(filled)) == {}


def test_evaluation_during_training_adds_one_experiment_per_step(tmp_path: Path, monkeypatch) -> None:
    """evaluate(step=...) with EVALFLEET_STORE set: one Experiment per step, the step kept on the Experiment and
    its Runs, and a policy revision per step (a checkpoint is a revision)."""
    import importlib.util

    from evalfleet_testkit import ROOT

    spec = importlib.util.spec_from_file_location("evaluate_during_training",
                                                  ROOT / "examples" / "evaluate_during_training.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    store = tmp_path / "s"
    monkeypatch.setenv("EVALFLEET_STORE", str(store))
    for step in (10, 20):
        evalfleet.evaluate(example.NoisyExpert(0.0), str(ROOT / "examples" / "quickstart.yaml"), runs=["push_expert"],
                           workers=1, overrides=["shared.rollout_limit.num_episodes=2"], output=tmp_path / f"s{step}",
                           step=step, policy_name="trained", log=lambda _: None)
    rows = results_store.open(str(store)).query(
        "SELECT e.step, r.step AS run_step, r.policy, r.policy_revision, count(p.episode) AS n FROM experiments e "
        "JOIN runs r USING (experiment_id) JOIN episodes p USING (experiment_id, run) GROUP BY ALL ORDER BY 1"
    ).to_pylist()
    assert [(r["step"], r["run_step"], r["policy"], r["n"]) for r in rows] == [(10, 10, "trained", 2),
                                                                               (20, 20, "trained", 2)]
    assert rows[0]["policy_revision"] != rows[1]["policy_revision"]


def test_an_output_in_a_bucket_is_the_same_experiment_as_its_local_copy(output, tmp_path: Path, s3_env) -> None:
    """An output collected into a bucket keeps its experiment_id: adding it beside the local folder replaces."""
    _endpoint, _key, _secret, bucket = s3_env
    out, _ = output
    remote = f"s3://{bucket}/out-{uuid.uuid4().hex[:8]}"
    import os

    env = dict(os.environ)
    assert run_evalfleet("collect", str(out), "--output", remote, env=env).returncode == 0
    store = tmp_path / "s"
    assert run_evalfleet("store", "add", str(out), "--store", str(store), env=env).returncode == 0
    proc = run_evalfleet("store", "add", remote, "--store", str(store), env=env)
    assert proc.returncode == 0 and "replaced" in proc.stderr, proc.stderr
    experiments = results_store.open(str(store)).experiments()
    assert len(experiments) == 1 and experiments[0]["source"] == remote
    assert in_store(str(store)) == by_hand(out)


def test_a_file_being_written_by_another_add_is_not_read(filled: Path) -> None:
    """A concurrent add's temporary file (atomic writes: .tmp-<name>-XXXX beside its target) is neither refused as
    foreign nor read."""
    (filled / "episodes" / ".tmp-0123.parquet-abcd").write_bytes(b"half written")
    proc = run_evalfleet("store", "ls", "--store", str(filled), "--json")
    assert proc.returncode == 0, proc.stderr
    assert [e["episodes"] for e in json.loads(proc.stdout)] == [2 * EPISODES]
