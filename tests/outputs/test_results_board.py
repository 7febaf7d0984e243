"""`evalfleet board` (#53): three real Experiments in one store, the board checked against numbers computed by hand
from their records (rows, Wilson intervals, paired blocks, wins, the Bradley-Terry ranking), the unpaired Experiment
pooled only where it is comparable, an environment that differs in one option never pooled and named; filters,
--json, --csv and the terminal table; claims' verdicts, and bad claims files refused in one line, exit 2."""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
from pathlib import Path

import pytest
import yaml
from evalfleet_testkit import metaworld_run, run_evalfleet
from test_results_store import copy_as_new

import evalfleet
from evalfleet.analysis.ranking import rank_policies

EPISODES = 12
MAX_STEPS = 64  # the expert pushes in 58-70 steps: a mix of successes and failures
Z = 1.959963984540054


def push(policy: str, *, chunk: int = 1, max_steps: int = MAX_STEPS) -> dict:
    run = metaworld_run("push-v3", episodes=EPISODES, policy_name=policy)
    run["environment"]["max_steps"] = max_steps
    if chunk > 1:  # an open-loop plan of `chunk` actions: a weaker policy
        run["policy"]["chunk_size"] = chunk
    return run


# (Experiment, its seed, its Runs). first and second share a seed: their episodes pair across the two Experiments;
# expert runs in both (the same blocks twice). third has other seeds (pooled, never paired) and a Run whose
# environment differs in one option (never pooled).
EXPERIMENTS = {
    "first": (3, {"expert": push("expert"), "clumsy": push("clumsy", chunk=3)}),
    "second": (3, {"steady": push("steady", chunk=2), "expert": push("expert")}),
    "third": (11, {"expert": push("expert"), "expert_long": push("expert", max_steps=80)}),
}
ENV = {"expert": MAX_STEPS, "clumsy": MAX_STEPS, "steady": MAX_STEPS, "expert_long": 80}
POLICY = {"expert": "expert", "clumsy": "clumsy", "steady": "steady", "expert_long": "expert"}


@pytest.fixture(scope="module")
def board_store(tmp_path_factory) -> dict:
    """The three outputs added in order to one store with `evalfleet store add`."""
    root = tmp_path_factory.mktemp("board")
    store = root / "store"
    outputs = {}
    for name, (seed, runs) in EXPERIMENTS.items():
        path = root / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"name": name, "seed": seed, "runs": runs}))
        outputs[name] = root / name
        evalfleet.run(path, output=outputs[name], workers=1, progress=False, log=lambda _: None)
        proc = run_evalfleet("store", "add", str(outputs[name]), "--store", str(store))
        assert proc.returncode == 0, proc.stderr
    ids = {name: json.loads((out / "experiment_metadata.json").read_text())["experiment_id"]
           for name, out in outputs.items()}
    return {"store": str(store), "outputs": outputs, "ids": ids, "root": root}


def records(out: Path, run: str) -> list[dict]:
    return [json.loads(line) for line in (out / run / "episode_results.jsonl").read_text().splitlines()]


def wilson(s: int, n: int) -> list[float]:
    p = s / n
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n)) / (1 + Z * Z / n)
    return [max(0.0, centre - half), min(1.0, centre + half)]


def by_hand(board_store: dict, added: list[tuple[str, Path]] | None = None) -> dict:
    """Rows (max_steps, policy) → (episodes, successes), and the blocks of max_steps 64 with each policy's outcome
    from the latest added Experiment that ran it there, all from the records themselves. `added`: (Experiment,
    output) in the order they were added (default: the three, in order)."""
    added = added or [(name, board_store["outputs"][name]) for name in EXPERIMENTS]
    rows: dict[tuple[int, str], list[int]] = {}
    blocks: dict[tuple[int, str], dict[str, bool]] = {}
    ran_twice: set[tuple[tuple[int, str], str]] = set()
    for name, out in added:  # in the order they were added: a later one replaces
        for run in EXPERIMENTS[name][1]:
            key = (ENV[run], POLICY[run])
            for rec in records(out, run):
                counts = rows.setdefault(key, [0, 0])
                counts[0] += 1
                counts[1] += rec["status"] == "success"
                if ENV[run] == MAX_STEPS and rec["status"] in ("success", "failure"):
                    block = (rec["seed"], json.dumps(rec["variations"], sort_keys=True))
                    if POLICY[run] in blocks.setdefault(block, {}):
                        ran_twice.add((block, POLICY[run]))
                    blocks[block][POLICY[run]] = rec["status"] == "success"
    paired = {b: o for b, o in blocks.items() if len(o) > 1}
    return {"rows": rows, "paired": paired, "ran_twice": {p for b, p in ran_twice if b in paired},
            "twice_blocks": sum(1 for b, p in ran_twice if b in paired)}


def expected_ranking(paired: dict) -> dict:
    """The within-Experiment ranking (analysis.ranking.rank_policies) of the paired blocks' outcomes."""
    outcomes = {}
    for index, (_, outcome) in enumerate(sorted(paired.items())):
        for policy, won in outcome.items():
            outcomes.setdefault(("push", policy), {})[index] = won
    return {p["policy"]: p for p in rank_policies(outcomes)["policies"]}


def same_ranking(got_policies: list[dict], expected: dict, paired: int) -> None:
    got = {p["policy"]: p for p in got_policies}
    assert set(got) == set(expected) == {"expert", "clumsy", "steady"}
    for policy, e in expected.items():
        g = got[policy]
        assert (g["rank"], g["rank_interval"], g["discordant_pairs"]) == (e["rank"], e["rank_interval"],
                                                                          e["discordant_pairs"]), policy
        assert g["strength"] == pytest.approx(e["strength"], abs=1e-9)
        assert g["interval"] == pytest.approx(e["interval"], abs=1e-9)
        assert g["paired_blocks"] == paired


@pytest.fixture(scope="module")
def board(board_store) -> dict:
    proc = run_evalfleet("board", "--store", board_store["store"], "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_rows_pool_comparable_episodes_across_experiments(board_store, board) -> None:
    hand = by_hand(board_store)
    label = {MAX_STEPS: "push-v3 {options.max_steps=64}", 80: "push-v3 {options.max_steps=80}"}
    got = {(r["environment"], r["policy"]): r for r in board["rows"]}
    assert set(got) == {(label[steps], policy) for steps, policy in hand["rows"]}
    for (steps, policy), (n, s) in hand["rows"].items():
        row = got[(label[steps], policy)]
        assert (row["episodes"], row["decided"], row["successes"]) == (n, n, s), (steps, policy)
        assert row["success_rate"] == pytest.approx(s / n)
        assert row["interval"] == pytest.approx(wilson(s, n), abs=1e-12)
    # expert on the short push: its episodes of all three Experiments (third's other seeds too), 3 × 12.
    assert got[(label[MAX_STEPS], "expert")]["episodes"] == 3 * EPISODES
    assert got[(label[MAX_STEPS], "expert")]["experiments"] == 3
    # The longer push differs in one option: its own row of third's 12 episodes, never pooled, and said why.
    assert got[(label[80], "expert")]["episodes"] == EPISODES
    assert got[(label[80], "expert")]["environment_fingerprint"] != got[(label[MAX_STEPS], "expert")][
        "environment_fingerprint"]
    # (the task protocol's identity includes the step limit: it differs too, and is named)
    assert "push-v3: 2 environments differ in options.max_steps, protocol; not pooled (one row each)" in board["notes"]
    assert board["experiments"] == 3 and board["episodes"] == 6 * EPISODES


def test_the_ranking_pairs_episodes_across_experiments(board_store, board) -> None:
    hand = by_hand(board_store)
    paired = hand["paired"]
    # first and second share their seeds: each of their 12 seeds is one block of all three policies; third's
    # seeds pair with nothing (only expert ran them), nor does the longer push.
    assert len(paired) == EPISODES and all(set(o) == {"expert", "clumsy", "steady"} for o in paired.values())
    ranking = board["ranking"]
    assert ranking["paired_blocks"] == len(paired) == ranking["bootstrap"]["blocks"]
    pairs = {(p["first"], p["second"]): p for p in ranking["pairs"]}
    for (a, b), p in pairs.items():
        assert p["blocks"] == sum(1 for o in paired.values() if a in o and b in o)
        assert p["first_won"] == sum(1 for o in paired.values() if o[a] and not o[b])
        assert p["second_won"] == sum(1 for o in paired.values() if o[b] and not o[a])
    assert set(pairs) == {("clumsy", "expert"), ("clumsy", "steady"), ("expert", "steady")}
    # expert ran first's seeds twice (first and second): the latest added episode pairs, and the board says so.
    assert hand["ran_twice"] == {"expert"}
    assert (f"{hand['twice_blocks']} paired blocks hold a policy's episode more than once (the same environment, "
            "seed and variations in several Runs: expert): the latest added episode there is the one paired"
            ) in board["notes"]
    # The ranking is Bradley-Terry on exactly these blocks: the within-Experiment ranking of the same outcomes.
    same_ranking(ranking["policies"], expected_ranking(paired), len(paired))
    got = {p["policy"]: p for p in ranking["policies"]}
    assert got["clumsy"]["rank"] == 3  # an open-loop plan of 3 actions: the weakest


FLIPPED = (0, 1, 2, 3)  # the episodes of expert whose outcome the fourth Experiment turns around


def flipped_copy(out: Path, dest: Path) -> Path:
    """second's output as another Experiment whose expert had other outcomes on the same seeds (a policy that is
    not deterministic, evaluated again), collected again so its result agrees with its records."""
    copy_as_new(out, dest)
    for path in [*dest.glob("expert/parts/*.jsonl"), dest / "expert" / "episode_results.jsonl"]:
        lines = []
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec["episode"] in FLIPPED:
                rec["status"] = "failure" if rec["status"] == "success" else "success"
                rec["success"] = rec["status"] == "success"
            lines.append(json.dumps(rec) + "\n")
        path.write_text("".join(lines))
    proc = run_evalfleet("collect", str(dest), "--output", str(dest))
    assert proc.returncode == 0, proc.stderr
    return dest


def test_a_policy_with_other_outcomes_on_the_same_blocks_pairs_its_latest(board_store, tmp_path: Path,
                                                                          monkeypatch) -> None:
    store = tmp_path / "store"
    shutil.copytree(board_store["store"], store)
    fourth = flipped_copy(board_store["outputs"]["second"], tmp_path / "fourth")
    assert run_evalfleet("store", "add", str(fourth), "--store", str(store)).returncode == 0
    EXPERIMENTS["fourth"] = EXPERIMENTS["second"]
    try:
        hand = by_hand(board_store, [*((n, board_store["outputs"][n]) for n in ("first", "second", "third")),
                                     ("fourth", fourth)])
    finally:
        del EXPERIMENTS["fourth"]
    proc = run_evalfleet("board", "--store", str(store), "--json")
    assert proc.returncode == 0, proc.stderr
    board = json.loads(proc.stdout)
    expert = next(r for r in board["rows"] if r["policy"] == "expert" and r["environment"].endswith("=64}"))
    assert (expert["episodes"], expert["successes"]) == tuple(hand["rows"][(MAX_STEPS, "expert")]) and \
        expert["episodes"] == 4 * EPISODES
    # The blocks pair fourth's expert (added last), whose outcomes differ from first's and second's on FLIPPED.
    seeds = {r["episode"]: r["seed"] for r in records(fourth, "expert")}
    for episode in FLIPPED:
        outcome = next(o for (seed, _), o in hand["paired"].items() if seed == seeds[episode])
        assert outcome["expert"] == (next(r for r in records(fourth, "expert") if r["episode"] == episode)
                                     ["status"] == "success")
    pairs = {(p["first"], p["second"]): p for p in board["ranking"]["pairs"]}
    assert pairs[("expert", "steady")]["first_won"] == sum(1 for o in hand["paired"].values()
                                                           if o["expert"] and not o["steady"])
    same_ranking(board["ranking"]["policies"], expected_ranking(hand["paired"]), len(hand["paired"]))
    note = next(n for n in board["notes"] if "more than once" in n)
    assert f"; {len(FLIPPED)} of them with differing outcomes (expert)" in note
    # The same with two bits a word (the SQL of 65 policies and more).
    from evalfleet import store as results_store
    from evalfleet.store import board as board_module
    from evalfleet.store import board_queries

    monkeypatch.setattr(board_queries, "WORD", 2)
    monkeypatch.setattr(board_module, "WORD", 2)
    small = board_module.build_board(results_store.open(str(store))).to_dict()
    assert small["rows"] == board["rows"] and small["ranking"] == board["ranking"] and small["notes"] == board["notes"]


def test_policies_past_one_word_of_bits_give_the_same_board(board_store, board, monkeypatch) -> None:
    """The SQL keeps each policy as a bit of 64-bit words; with 2 bits a word the three policies need two words
    (as 65 policies would with 64): the board must not change."""
    from evalfleet import store as results_store
    from evalfleet.store import board as board_module
    from evalfleet.store import board_queries

    monkeypatch.setattr(board_queries, "WORD", 2)
    monkeypatch.setattr(board_module, "WORD", 2)
    small = board_module.build_board(results_store.open(board_store["store"])).to_dict()
    assert small["rows"] == board["rows"] and small["ranking"] == board["ranking"] and small["notes"] == board["notes"]


def test_a_policy_name_with_another_revision_is_never_pooled(board_store, board, tmp_path: Path) -> None:
    """A fifth Experiment runs a policy named expert with another configuration (an open-loop plan of 2): its own
    rows and its own place in the ranking, the note naming the option that differs."""
    store = tmp_path / "store"
    shutil.copytree(board_store["store"], store)
    path = tmp_path / "fifth.yaml"
    path.write_text(yaml.safe_dump({"name": "fifth", "seed": 3, "runs": {"expert": push("expert", chunk=2)}}))
    evalfleet.run(path, output=tmp_path / "fifth", workers=1, progress=False, log=lambda _: None)
    assert run_evalfleet("store", "add", str(tmp_path / "fifth"), "--store", str(store)).returncode == 0
    proc = run_evalfleet("board", "--store", str(store), "--json", "--policy", "expert")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    revisions = {r["policy_revision"]: r for r in got["rows"] if r["environment"].endswith("=64}")}
    assert len(revisions) == 2
    fifth = [r for r in revisions.values() if r["episodes"] == EPISODES]
    assert len(fifth) == 1 and fifth[0]["successes"] == sum(rec["status"] == "success"
                                                            for rec in records(tmp_path / "fifth", "expert"))
    before = next(r for r in board["rows"] if r["policy"] == "expert" and r["environment"].endswith("=64}"))
    pooled = next(r for r in revisions.values() if r is not fifth[0])
    assert (pooled["episodes"], pooled["successes"]) == (before["episodes"], before["successes"])
    labels = sorted(f"expert@{rev[:8]}" for rev in revisions)
    assert sorted(r["policy"] for r in revisions.values()) == labels
    assert f"policy expert: 2 revisions differ in config.chunk_size; not pooled ({', '.join(labels)})" in got["notes"]
    # Paired with each other on the shared seeds (fifth's seed is first's and second's): two ranked policies.
    assert sorted(p["policy"] for p in got["ranking"]["policies"]) == labels
    assert got["ranking"]["pairs"][0]["blocks"] == EPISODES


def test_terminal_table_and_csv_say_the_same(board_store, board) -> None:
    proc = run_evalfleet("board", "--store", board_store["store"], env={**__import__("os").environ,
                                                                        "COLUMNS": "160"})
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    for row in board["rows"]:
        lo, hi = row["interval"]
        cells = [row["environment"], row["policy"],
                 f"{100 * row['success_rate']:.1f}% [{100 * lo:.1f}–{100 * hi:.1f}]", str(row["decided"])]
        assert any(all(c in line for c in cells) for line in text.splitlines()), cells
    for p in board["ranking"]["policies"]:
        low, high = p["rank_interval"]
        rng = str(low) if low == high else f"{low}–{high}"
        assert any(line.split()[:3] == [str(p["rank"]), rng, p["policy"]] for line in text.splitlines()), p
    assert "not pooled" in text and "options.max_steps" in text
    proc = run_evalfleet("board", "--store", board_store["store"], "--csv")
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert [(r["environment"], r["policy"], int(r["decided"]), int(r["successes"])) for r in rows] == \
        [(r["environment"], r["policy"], r["decided"], r["successes"]) for r in board["rows"]]
    ranks = {p["policy"]: p["rank"] for p in board["ranking"]["policies"]}
    assert all(int(r["rank"]) == ranks[r["policy"]] for r in rows)


def test_filters(board_store) -> None:
    def rows(*args: str) -> list[tuple[str, str, int]]:
        proc = run_evalfleet("board", "--store", board_store["store"], "--json", *args)
        assert proc.returncode == 0, proc.stderr
        return sorted((r["environment"], r["policy"], r["episodes"]) for r in json.loads(proc.stdout)["rows"])

    assert rows("--policy", "steady") == [("push-v3", "steady", EPISODES)]
    # third alone: expert's two environments, still apart; its other seeds pair with nothing.
    third = json.loads(run_evalfleet("board", "--store", board_store["store"], "--json", "--experiment",
                                     board_store["ids"]["third"]).stdout)
    assert sorted((r["environment"], r["episodes"]) for r in third["rows"]) == [
        ("push-v3 {options.max_steps=64}", EPISODES), ("push-v3 {options.max_steps=80}", EPISODES)]
    assert third["ranking"]["policies"] == []
    assert rows("--experiment", board_store["ids"]["first"], "--experiment", board_store["ids"]["second"],
                "--policy", "expert") == [("push-v3", "expert", 2 * EPISODES)]
    assert rows("--suite", "metaworld", "--task", "push-v3") == rows()
    assert rows("--until", "2000-01-01") == []
    assert rows("--since", "2000-01-01") == rows()
    proc = run_evalfleet("board", "--store", board_store["store"], "--until", "2000-01-01")
    assert proc.returncode == 0 and "no episodes match the filters given" in proc.stdout


def test_a_board_over_a_bucket_is_the_same(board_store, board, s3_env) -> None:
    """The same three outputs added to an S3 store (the suite's SeaweedFS): the same board."""
    import os
    import uuid

    _endpoint, _key, _secret, bucket = s3_env
    store = f"s3://{bucket}/board-{uuid.uuid4().hex[:8]}"
    for name in EXPERIMENTS:
        proc = run_evalfleet("store", "add", str(board_store["outputs"][name]), "--store", store,
                             env=dict(os.environ))
        assert proc.returncode == 0, proc.stderr
    proc = run_evalfleet("board", "--store", store, "--json", env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    remote = json.loads(proc.stdout)
    assert remote["rows"] == board["rows"] and remote["ranking"] == board["ranking"]
    assert remote["notes"] == board["notes"]


def one_line_refusal(proc, *words: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    for word in words:
        assert word in proc.stderr, proc.stderr


def test_bad_filters_are_one_line(board_store) -> None:
    store = board_store["store"]
    one_line_refusal(run_evalfleet("board", "--store", store, "--policy", "nobody"),
                     "--policy", "no policy 'nobody'", "clumsy, expert, steady")
    one_line_refusal(run_evalfleet("board", "--store", store, "--task", "pick-v3"), "--task", "push-v3")
    one_line_refusal(run_evalfleet("board", "--store", store, "--since", "last week"), "--since", "ISO date")


def claims_file(root: Path, claims) -> Path:
    path = root / "claims.yaml"
    path.write_text(yaml.safe_dump(claims))
    return path


def test_claims_get_verdicts_against_our_intervals(board_store, board, tmp_path: Path) -> None:
    got = {(r["environment"], r["policy"]): r for r in board["rows"]}
    short, long_ = "push-v3 {options.max_steps=64}", "push-v3 {options.max_steps=80}"
    expert = got[(short, "expert")]
    inside = round(sum(expert["interval"]) / 2, 4)
    clumsy_hi = got[(short, "clumsy")]["interval"][1]
    steady_lo = got[(short, "steady")]["interval"][0]
    assert clumsy_hi < 0.99 and steady_lo > 0.01
    claims = [{"policy": "expert", "task": "push-v3", "success": inside, "source": "paper A, table 1"},
              {"policy": "clumsy", "task": "push-v3", "success": 0.99, "source": "<b>blog</b>"},
              {"policy": "steady", "suite": "metaworld", "success": 0.01, "source": "model card"},
              {"policy": "expert", "suite": "metaworld", "success": 0.5, "source": "paper B"}]
    proc = run_evalfleet("board", "--store", board_store["store"], "--json", "--claims",
                         str(claims_file(tmp_path, claims)))
    assert proc.returncode == 0, proc.stderr
    verdicts = json.loads(proc.stdout)["claims"]
    by = [(v["claim"], v["environment"], v["verdict"]) for v in verdicts]
    long_row = got[(long_, "expert")]
    long_verdict = ("reproduced" if long_row["interval"][0] <= inside <= long_row["interval"][1]
                    else "above" if inside > long_row["interval"][1] else "below")
    assert by == [(0, short, "reproduced"), (0, long_, long_verdict), (1, short, "above"),
                  (2, "metaworld (1 task: push-v3)", "below"), (3, "metaworld (1 task: push-v3)", "not comparable")]
    assert verdicts[0]["interval"] == expert["interval"] and verdicts[0]["decided"] == expert["decided"]
    assert verdicts[2]["interval"] == got[(short, "clumsy")]["interval"]
    assert verdicts[3]["interval"] == got[(short, "steady")]["interval"]
    assert "options.max_steps" in verdicts[4]["reason"]
    assert verdicts[4]["success_rate"] is None and verdicts[4]["interval"] is None  # no rate over both
    assert verdicts[4]["successes"] is None
    proc = run_evalfleet("board", "--store", board_store["store"], "--csv", "--claims", str(tmp_path / "claims.yaml"))
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert [(int(r["claim"]), r["environment"], r["verdict"]) for r in rows] == by
    assert [float(r["ci_low"]) for r in rows[:4]] == [v["interval"][0] for v in verdicts[:4]]
    text = run_evalfleet("board", "--store", board_store["store"], "--claims", str(tmp_path / "claims.yaml"),
                         env={**__import__("os").environ, "COLUMNS": "200"}).stdout
    assert "reproduction verdicts" in text and "not comparable" in text and "paper A, table 1" in text


@pytest.mark.parametrize("claims, words", [
    ([{"policy": "ghost", "task": "push-v3", "success": 0.5, "source": "s"}],
     ["claims.yaml: [0].policy", "no policy 'ghost'", "clumsy, expert, steady"]),
    ([{"policy": "expert", "task": "push-v3", "success": 0.5, "source": "s"},
      {"policy": "expert", "task": "pick-v3", "success": 0.5, "source": "s"}],
     ["claims.yaml: [1].task", "no task 'pick-v3'", "(it has: push-v3)"]),
    ([{"policy": "expert", "task": "push-v3", "success": 1.5, "source": "s"}],
     ["claims.yaml: [0].success", "must lie in [0, 1]", "got 1.5"]),
    ([{"policy": "expert", "task": "push-v3", "success": 85, "source": "s"}],
     ["[0].success", "0.85, not a percentage"]),
    ([{"policy": "expert", "task": "push-v3", "success": -0.1, "source": "s"}], ["[0].success", "got -0.1"]),
    ([{"policy": "expert", "task": "push-v3", "success": "0.5", "source": "s"}], ["[0].success", "got \"0.5\""]),
    ([{"policy": "expert", "success": 0.5, "source": "s"}], ["[0]", "give `task` or `suite`"]),
    ([{"policy": "expert", "task": "push-v3", "success": 0.5}], ["[0].source", "required key is missing"]),
    ([{"policy": "expert", "task": "push-v3", "success": 0.5, "source": "s", "rate": 1}], ["[0].rate", "unknown key"]),
    ({"policy": "expert"}, ["claims.yaml", "expected a list of claims"]),
])
def test_bad_claims_are_refused_in_one_line_with_no_output(board_store, tmp_path: Path, claims, words) -> None:
    path = claims_file(tmp_path, claims)
    page = tmp_path / "page"
    proc = run_evalfleet("board", "--store", board_store["store"], "--claims", str(path), "--html", str(page))
    one_line_refusal(proc, *words)
    assert not page.exists()


def test_several_bad_claims_are_named_together(board_store, tmp_path: Path) -> None:
    claims = [{"policy": "ghost", "task": "push-v3", "success": 0.5, "source": "s"},
              {"policy": "expert", "task": "push-v3", "success": 0.5, "source": "s"},
              {"policy": "phantom", "task": "push-v3", "success": 0.5, "source": "s"}]
    proc = run_evalfleet("board", "--store", board_store["store"], "--claims", str(claims_file(tmp_path, claims)))
    one_line_refusal(proc, "[0].policy: no policy 'ghost'", "[2].policy: no policy 'phantom'")


def test_a_block_of_more_than_127_policies_is_counted(tmp_path: Path) -> None:
    """bit_count gives a TINYINT: summed over the words of 200 policies present in one block it overflowed at 127
    ("Overflow in addition of INT8", seen on bench/store.py's 10M store of 400 revisions)."""
    import duckdb

    from evalfleet.store.board_queries import one_pass

    con = duckdb.connect()
    con.execute("""CREATE TABLE episodes AS SELECT 'x' AS experiment_id, 'r' || i AS run, 7::BIGINT AS seed,
                   '{}' AS variations, CASE WHEN i % 2 = 0 THEN 'success' ELSE 'failure' END AS status,
                   0::BIGINT AS episode FROM range(200) t(i)""")
    con.execute("""CREATE TABLE selected AS SELECT 'x' AS experiment_id, 'r' || i AS run, 1 AS env_id,
                   i + 1 AS policy_id, i + 1 AS recency FROM range(200) t(i)""")
    rows, patterns = one_pass(con, 200)
    assert len(rows) == 200 and len(patterns) == 1 and patterns[0]["blocks"] == 1
    assert sum(bin(word).count("1") for word in patterns[0]["present"]) == 200
    assert sum(bin(word).count("1") for word in patterns[0]["won"]) == 100


def test_a_board_of_more_policies_than_it_ranks_says_so_and_shows_its_rows(board_store, board, monkeypatch) -> None:
    """The ranking's bootstrap grows with the square of the policies (bench/store.py's 10M store of 2,000 revisions
    asked numpy for 30 GiB): past MAX_RANKED the rows are shown, the ranking is skipped and the note says how to
    narrow the board."""
    from evalfleet import store as results_store
    from evalfleet.store import board as board_module
    from evalfleet.store.board_page import render_board_page
    from evalfleet.store.board_text import board_csv, board_lines

    monkeypatch.setattr(board_module, "MAX_RANKED", 2)
    big = board_module.build_board(results_store.open(board_store["store"]))
    assert big.to_dict()["rows"] == board["rows"] and big.ranking == []
    assert any("ranking: not computed: 3 policy revisions" in n and "--policy" in n for n in big.notes)
    assert board_lines(big, 100) and board_csv(big) and "<table" in render_board_page(big)
