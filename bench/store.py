"""Benchmark: the results store's `store add` and a board-like query at 100k, 1M and 10M synthetic episodes (#53).

One synthetic collected output of 100,000 episodes (20 Runs: 5 tasks x 4 policies, 5,000 episodes each, records
like a run writes them: seed, status, success, failure_code on failures, variations, progress with its criteria,
protocol, ...) is written once and cached (~/.cache/evalfleet/bench-store, or --cache). Each Experiment the
bench adds is a copy of that folder with its own experiment_metadata.json (a distinct 32-hex experiment_id and one
of CHECKPOINTS training steps in turn: a checkpoint series evaluated again and again, 5 revisions per policy and
Run); its other files are hard links, so 100 Experiments cost the disk of one. The policies of a task share their
seeds and variations, so the store holds paired blocks.

  add     `evalfleet store add` (store.add_outputs) of 1 output (100k) and 10 outputs (1M) into a fresh store,
          in a fresh process; the 10M store (100 outputs) is built once the same way and cached: its add time
          is the one build's (n=1, or null when the cached store was reused)
  query   `evalfleet board` (store/board.build_board) over the 100k, 1M and 10M stores, in a fresh process.
          `--queries standin`: the stand-in measured before the board landed (per fingerprint, policy and
          revision, episodes and successes; each block's mean outcome in a temporary table, each revision's
          outcomes against it). `--queries outcomes`: that pairing as one GROUP BY per (block, policy revision),
          what to avoid. `Store.files()` (every footer checked) is also timed on its own in the same process.

Each measurement states its wall time (in the child, after imports), CPU seconds and peak RSS (the child's
VmHWM); --repeats rounds, the order rotated. Prints JSON: median and spread, how each grows with the episodes,
the store's size on disk and the machine.

    python bench/store.py [--repeats 3] [--scales 100k,1M,10M] [--queries board,outcomes] [--cache DIR]
                          [--src /tmp/before/src]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Timer, add_repeat_arg, emit, machine, peak_rss_mb, rotated, spread

GENERATOR = 1  # the synthetic output's version: the cache is keyed by it; change it when make_output changes
METADATA = 2  # the Experiments' metadata version (their steps): the copies and the 10M store are keyed by it
CHECKPOINTS = 5  # the Experiments evaluate this many training steps in turn: each policy has 5 revisions
PER_EXPERIMENT = 100_000
TASKS = ("pick-place-v3", "drawer-open-v3", "door-open-v3", "button-press-v3", "push-v3")
POLICIES = ("pi0", "gr00t", "diffusion", "act")
SCALES = {"100k": 1, "1M": 10, "10M": 100}  # Experiments of PER_EXPERIMENT episodes
PROTOCOL = hashlib.sha256(b"bench-store protocol").hexdigest()
CODES = ("step_limit", "object_dropped", "object_off_table")
CRITERIA = ("near_object", "halfway", "success")


# --- the synthetic output ------------------------------------------------------------------------------------
def make_output(root: str, episodes: int = PER_EXPERIMENT, seed: int = 0) -> None:
    """A collected output folder of `episodes` episodes: experiment.yaml, experiment_metadata.json,
    experiment_result.json and each Run's episode_results.jsonl."""
    import yaml

    rng = random.Random(seed)
    per_run = episodes // (len(TASKS) * len(POLICIES))
    os.makedirs(root)
    runs_doc: dict[str, Any] = {}
    summaries: dict[str, Any] = {}
    t0 = 1_760_000_000.0
    for t, task in enumerate(TASKS):
        # the task's blocks: the same seed and variation values for every policy (a paired design)
        blocks = [(rng.getrandbits(32), {"object.mass": round(rng.uniform(0.05, 1.0), 6),
                                         "light.intensity": round(rng.uniform(0.2, 2.0), 6),
                                         "object.position": [round(rng.uniform(-0.2, 0.2), 6),
                                                             round(rng.uniform(-0.2, 0.2), 6), 0.02]})
                  for _ in range(per_run)]
        for p, policy in enumerate(POLICIES):
            run = f"{task.removesuffix('-v3').replace('-', '_')}_{policy}"
            runs_doc[run] = {
                "environment": {"type": "metaworld", "task": task},
                "policy": {"type": "openpi_remote", "host": "policy.internal", "port": 8000 + p,
                           "checkpoint": f"gs://checkpoints/{policy}/{task}"},
                "rollout_limit": {"num_episodes": per_run}, "environment_builder": {"num_envs": 8},
                "variations": {"object.mass": {"low": 0.05, "high": 1.0},
                               "light.intensity": {"low": 0.2, "high": 2.0},
                               "object.position": {"low": [-0.2, -0.2, 0.02], "high": [0.2, 0.2, 0.02]}},
                "policy_name": policy, "max_attempts": 3, "episode_timeout_s": 600.0}
            p_success = rng.uniform(0.2, 0.9)
            counts = {"success": 0, "failure": 0, "error": 0, "missing": 0}
            os.makedirs(os.path.join(root, run))
            with open(os.path.join(root, run, "episode_results.jsonl"), "w", encoding="utf-8") as f:
                for e, (episode_seed, variations) in enumerate(blocks):
                    roll = rng.random()
                    status = "error" if roll < 0.005 else ("success" if roll < p_success else "failure")
                    counts[status] += 1
                    length = rng.randint(40, 500)
                    reached = [status == "success" or rng.random() < 0.8 - 0.4 * i for i in range(len(CRITERIA))]
                    reached[1] = reached[1] and reached[0]
                    reached[-1] = status == "success"
                    steps = sorted(rng.randint(1, length) for _ in CRITERIA)
                    by_name = {c: {"complete": r, "step": s if r else None}
                               for c, r, s in zip(CRITERIA, reached, steps)}
                    rec: dict[str, Any] = {
                        "run": run, "task": task, "policy": policy, "episode": e, "seed": episode_seed,
                        "status": status, "success": None if status == "error" else status == "success",
                        "episode_length": length, "duration_s": round(rng.uniform(0.5, 12.0), 4),
                        "variations": variations, "attempt": 2 if status == "error" else 1,
                        "timestamp": t0 + (t * len(POLICIES) + p) * 10_000 + e * 0.5}
                    if status == "error":
                        rec["error"] = "policy server timeout"
                    rec["policy_latency_ms"] = round(rng.uniform(2, 40), 3)
                    rec["progress"] = {
                        "overall_score": round(sum(reached) / len(CRITERIA), 4), "all_complete": all(reached),
                        "criteria_by_name": by_name,
                        "events": [{"criterion": c, "step": by_name[c]["step"]}
                                   for c in CRITERIA if by_name[c]["complete"]]}
                    if status != "success":
                        rec["failure_code"] = "server_lost" if status == "error" else \
                            "never_reached" if not reached[0] else rng.choice(CODES)
                    rec.update({"protocol": PROTOCOL, "job_name": run, "env_id": e, "episode_in_env": 0})
                    f.write(json.dumps(rec, separators=(",", ":")) + "\n")
            summaries[run] = {"run": run, "task": task, "policy": policy, "status": "completed", "reason": None,
                              "planned_episodes": per_run, "episodes_recorded": per_run, "counts": counts,
                              "records_file": f"{run}/episode_results.jsonl", "protocol": PROTOCOL}
    with open(os.path.join(root, "experiment.yaml"), "w", encoding="utf-8") as f:
        yaml.safe_dump({"name": "bench_store", "seed": seed, "runs": runs_doc}, f, sort_keys=False)
    provenance = {"evalfleet_version": "0.1.0", "packages": {"mujoco": "3.3.0", "metaworld": "3.1.1",
                                                              "gymnasium": "1.4.0", "numpy": "2.4.6"},
                  "host": "bench", "sources": [root]}
    with open(os.path.join(root, "experiment_result.json"), "w", encoding="utf-8") as f:
        json.dump({"schema": "evalfleet.experiment_result/1", "provenance": provenance,
                   "summary": {"runs": len(summaries), "episodes": {"recorded": per_run * len(summaries)}},
                   "runs": summaries}, f, indent=2)
    write_metadata(root, 0)


def write_metadata(root: str, index: int) -> str:
    """The Experiment's experiment_metadata.json: its own id, and one of CHECKPOINTS training steps in turn (a
    checkpoint series evaluated again and again: each step another policy revision, each re-evaluation pooled)."""
    experiment_id = hashlib.sha256(f"bench-store/{index}".encode()).hexdigest()[:32]
    started = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(1_760_000_000 + index * 86_400))
    with open(os.path.join(root, "experiment_metadata.json"), "w", encoding="utf-8") as f:
        json.dump({"schema": "evalfleet.experiment_metadata/1", "experiment_id": experiment_id,
                   "step": (index % CHECKPOINTS + 1) * 1000, "status": "finished", "started_at": started,
                   "finished_at": started, "experiment": "bench_store", "config_sha256": "0" * 64,
                   "versions": {"evalfleet": "0.1.0", "mujoco": "3.3.0", "metaworld": "3.1.1"},
                   "backend": "local", "hosts": ["bench"]}, f, indent=2)
    return experiment_id


def outputs(cache: str, count: int) -> list[str]:
    """`count` Experiments (copies of the cached 100k output, hard-linked, each its own metadata), made once."""
    base = os.path.join(cache, f"output-gen{GENERATOR}")
    if not os.path.exists(os.path.join(base, "experiment_metadata.json")):
        shutil.rmtree(base, ignore_errors=True)
        make_output(base + ".partial")
        os.rename(base + ".partial", base)
    made = []
    for i in range(count):
        folder = os.path.join(cache, f"experiments-gen{GENERATOR}.{METADATA}", f"exp-{i:03d}")
        if not os.path.exists(os.path.join(folder, "experiment_metadata.json")):
            shutil.rmtree(folder, ignore_errors=True)
            shutil.copytree(base, folder, ignore=shutil.ignore_patterns("experiment_metadata.json"),
                            copy_function=os.link)
            write_metadata(folder, i)  # written last: the copy is complete once it is there
        made.append(folder)
    return made


# --- what is measured ----------------------------------------------------------------------------------------
EPISODES = "FROM episodes e JOIN runs r USING (experiment_id, run)"
LEADERBOARD = f"""
SELECT r.environment_fingerprint, r.policy, r.policy_revision, count(*) AS episodes,
       count(*) FILTER (WHERE e.success) AS successes
{EPISODES} GROUP BY ALL ORDER BY ALL"""

# Each (fingerprint, seed, variations) block's mean outcome, in a table: a CTE joined back to the episodes makes
# DuckDB build the join's hash table on the 10M episodes side (its estimate of a GROUP BY is its input), ~3 GB.
BLOCKS = f"""
CREATE TEMP TABLE block AS
SELECT r.environment_fingerprint AS env, e.seed, e.variations, avg(e.success::INT) AS mean, count(*) AS decided
{EPISODES} WHERE e.success IS NOT NULL GROUP BY ALL"""

# Each policy revision's outcome in each block, against the block's mean: per revision, its blocks, those shared
# with another revision, and its mean advantage over the blocks' means (a paired comparison).
PAIRING = f"""
SELECT r.environment_fingerprint, r.policy, r.policy_revision, count(*) AS decided,
       count(*) FILTER (WHERE b.decided > 1) AS paired, avg(e.success::INT - b.mean) AS advantage_over_block_mean
{EPISODES} JOIN block b ON b.env = r.environment_fingerprint AND b.seed = e.seed AND b.variations = e.variations
WHERE e.success IS NOT NULL GROUP BY ALL ORDER BY ALL"""

# The same, literally: GROUP BY (block, policy revision), then reduced per revision (10M groups at 10M episodes).
OUTCOMES = f"""
WITH outcome AS (
    SELECT r.environment_fingerprint AS env, e.seed, e.variations, r.policy, r.policy_revision,
           count(*) AS decided, count(*) FILTER (WHERE e.success) AS successes
    {EPISODES} WHERE e.success IS NOT NULL GROUP BY ALL),
block AS (SELECT env, seed, variations, count(*) AS revisions, avg(successes / decided) AS mean
           FROM outcome GROUP BY ALL)
SELECT o.env AS environment_fingerprint, o.policy, o.policy_revision, count(*) AS blocks,
       count(*) FILTER (WHERE b.revisions > 1) AS paired,
       avg(o.successes / o.decided - b.mean) AS advantage_over_block_mean
FROM outcome o JOIN block b USING (env, seed, variations) GROUP BY ALL ORDER BY ALL"""


def board(store: Any) -> Any:
    """`evalfleet board` itself (store/board.py: build_board): the leaderboard rows, the pairing and the ranking."""
    from evalfleet.store.board import build_board

    return build_board(store)


def standin(store: Any) -> dict[str, Any]:
    """The board's stand-in measured before `evalfleet board` landed: its tables as Arrow tables."""
    con = store.connect()
    try:
        leaderboard = con.sql(LEADERBOARD).to_arrow_table()
        con.execute(BLOCKS)
        return {"leaderboard": leaderboard, "pairing": con.sql(PAIRING).to_arrow_table()}
    finally:
        con.close()


def outcomes(store: Any) -> dict[str, Any]:
    """The leaderboard, and the pairing as one GROUP BY per (block, policy revision): what to avoid, measured."""
    con = store.connect()
    try:
        return {"leaderboard": con.sql(LEADERBOARD).to_arrow_table(), "pairing": con.sql(OUTCOMES).to_arrow_table()}
    finally:
        con.close()


QUERIES = {"board": board, "standin": standin, "outcomes": outcomes}


def child(what: str, store_dir: str, folders: list[str]) -> int:
    from evalfleet.store import add_outputs, open_store

    store = open_store(store_dir)
    out: dict[str, Any] = {}
    if what == "add":
        with Timer() as t:
            added = add_outputs(store, folders, log=lambda _: None)
        out["episodes"] = sum(a.episodes for a in added)
    else:
        with Timer() as files:
            store.files()
        with Timer() as t:
            tables = QUERIES[what](store)
        out["files_s"] = files.seconds
        if isinstance(tables, dict):  # the stand-in's Arrow tables
            out["rows"] = {name: table.num_rows for name, table in tables.items()}
            out["episodes"] = int(sum(tables["leaderboard"].column("episodes").to_pylist()))
        else:  # the Board
            out["rows"] = {"leaderboard": len(tables.rows), "ranking": len(tables.ranking),
                           "paired_blocks": tables.blocks}
            out["episodes"] = tables.episodes
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"seconds": t.seconds, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mb": peak_rss_mb(),
                      **out}))
    return 0


SRC: str | None = None  # --src: the children import evalfleet from this src/ folder


def run_child(what: str, store_dir: str, folders: list[str] = ()) -> dict[str, Any]:
    """One measurement in a fresh process; its wall time from start to exit beside the child's own figures."""
    env = dict(os.environ)
    if SRC:
        env["PYTHONPATH"] = os.path.abspath(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    with Timer() as t:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", what, store_dir, *folders],
                              capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed:\n{proc.stderr[-4000:]}")
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "process_s": t.seconds}


def size_mb(folder: str) -> float:
    return round(sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(folder) for n in names) / 2**20, 1)


def summary(measures: list[dict[str, Any]]) -> dict[str, Any]:
    out = {k: spread([m[k] for m in measures], 1 if k == "peak_rss_mb" else 3)
           for k in ("seconds", "process_s", "cpu_s", "peak_rss_mb", "files_s") if k in measures[0]}
    out["episodes"] = measures[0]["episodes"]
    return out


def growth(figures: dict[str, Any], scales: list[str], key: str) -> dict[str, Any]:
    """Each scale's median over the previous scale's (x10 episodes each step)."""
    out = {}
    for small, large in zip(scales, scales[1:]):
        if small in figures and large in figures:
            a, b = figures[small][key]["median"], figures[large][key]["median"]
            out[f"{large}_over_{small}"] = round(b / a, 2) if a else None
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scales", default=",".join(SCALES), help="comma-separated: " + ", ".join(SCALES))
    parser.add_argument("--cache", default=os.path.expanduser("~/.cache/evalfleet/bench-store"),
                        help="where the synthetic outputs and the 10M store are kept between runs")
    parser.add_argument("--queries", default="board", help="comma-separated: " + ", ".join(QUERIES)
                        + " (outcomes: the pairing as one GROUP BY per block and policy revision)")
    parser.add_argument("--src", help="run the measurements with this checkout's src/ folder (figures before a change)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    add_repeat_arg(parser)
    args = parser.parse_args()
    if args.child:
        return child(args.child[0], args.child[1], args.child[2:])
    global SRC
    SRC = args.src
    scales = [s for s in args.scales.split(",") if s]
    if any(s not in SCALES for s in scales):
        parser.error(f"--scales: choose from {', '.join(SCALES)}")
    if any(q not in QUERIES for q in args.queries.split(",")):
        parser.error(f"--queries: choose from {', '.join(QUERIES)}")
    start = machine()
    os.makedirs(args.cache, exist_ok=True)
    with Timer() as made:
        folders = outputs(args.cache, max(SCALES[s] for s in scales))
    work = tempfile.mkdtemp(prefix="evalfleet-bench-store-")
    try:
        stores: dict[str, str] = {}
        built_10m = None
        if "10M" in scales:  # built once (100 adds) and kept: its add is measured once, when it is built
            stores["10M"] = os.path.join(args.cache, f"store-10M-gen{GENERATOR}.{METADATA}")
            if not os.path.exists(os.path.join(stores["10M"], "built.json")):
                shutil.rmtree(stores["10M"], ignore_errors=True)
                built_10m = run_child("add", stores["10M"], folders[:SCALES["10M"]])
                with open(os.path.join(stores["10M"], "built.json"), "w", encoding="utf-8") as f:
                    json.dump(built_10m, f)

        def add(scale: str) -> dict[str, Any]:
            stores[scale] = os.path.join(work, f"store-{scale}")
            shutil.rmtree(stores[scale], ignore_errors=True)
            return run_child("add", stores[scale], folders[:SCALES[scale]])

        adds = {s: (lambda s=s: add(s)) for s in scales if s != "10M"}
        added = rotated(adds, args.repeats) if adds else {}
        queried = {f"{q} {s}": m for q in args.queries.split(",") for s, m in rotated(
            {s: (lambda s=s, q=q: run_child(q, stores[s])) for s in scales}, args.repeats).items()}
        figures: dict[str, Any] = {
            "src": args.src or "this checkout", "episodes_per_experiment": PER_EXPERIMENT,
            "runs_per_experiment": len(TASKS) * len(POLICIES),
            "synthetic": f"one 100k-episode output, copied per Experiment (hard links, own experiment_metadata.json); "
                         f"made in {made.seconds:.1f} s (0 when cached) under {args.cache}",
            "add": {s: summary(m) for s, m in added.items()},
            "query": {s: summary(m) for s, m in queried.items()},
            "query_rows": {s: m[0]["rows"] for s, m in queried.items()},
            "store_mb": {s: size_mb(stores[s]) for s in scales},
        }
        if "10M" in scales:
            figures["add_10M_once"] = {k: round(v, 3) for k, v in built_10m.items() if k != "episodes"} \
                if built_10m else "cached store reused (built by an earlier run)"
        figures["growth"] = {"add_seconds": growth(figures["add"], scales, "seconds"),
                             "add_peak_rss": growth(figures["add"], scales, "peak_rss_mb")}
        for q in args.queries.split(","):
            by_scale = {s: figures["query"][f"{q} {s}"] for s in scales}
            figures["growth"][f"{q}_seconds"] = growth(by_scale, scales, "seconds")
            figures["growth"][f"{q}_peak_rss"] = growth(by_scale, scales, "peak_rss_mb")
        emit(figures, machine_before=start)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
