"""The leaderboard across every Experiment in a store (issue #53): per environment × policy success with its Wilson
interval and episode count, and one Bradley-Terry ranking on episodes paired across Experiments.

Comparability. A row is one environment (its fingerprint: type, task, options, variations, simulator packages,
protocol; store/identity.py) × one policy (its name and revision). A row pools its episodes across Experiments:
each episode counts once per Experiment that recorded it, the same seed in two Experiments being two episodes. A
task whose Runs have different fingerprints gives one row per environment, never pooled, and a note names the
fields that differ; a policy name with several revisions likewise.

Pairing. A block is (environment fingerprint, seed, variation values): every policy that ran an episode there
faced the same start, whichever Experiment ran it. A policy's outcome in a block is its decided episode there, the
latest added if it ran there more than once (a note counts those blocks). Blocks with fewer than two policies pair
nothing and are left out. The ranking is analysis/ranking.rank_blocks on the blocks' distinct outcome patterns
with their counts, stratified by environment.

Scale. Everything over episodes is aggregated by DuckDB over the Parquet views; Python receives one row per
environment × policy and one per distinct block pattern, never the episodes.
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, field
from typing import Any

from evalfleet.errors import UserError
from evalfleet.store.board_queries import WORD
from evalfleet.store.identity import canonical, differences
from evalfleet.store.store import Store

METHOD = ("Bradley-Terry on discordant pairs of episodes paired across Experiments by (environment fingerprint, "
          "seed, variation values), maximum likelihood (Newton); simultaneous 95% intervals: stratified cluster "
          "bootstrap over the blocks of each environment with a max-|t| band")
LABEL_LIMIT = 100  # a label longer than this falls back to the task and the fingerprint's first digits
VALUE_LIMIT = 40  # a differing value shown in a label is cut to this many characters
# Where a Run's suite is: LIBERO's `suite` option, else the environment type (metaworld, robosuite, ...).
SUITE_SQL = "coalesce(json_extract_string(r.environment_identity, '$.options.suite'), r.environment_type, '')"


@dataclass(frozen=True)
class Filters:
    """Which Experiments and Runs the board covers; each list matches any of its values, the lists all at once."""

    tasks: tuple[str, ...] = ()
    suites: tuple[str, ...] = ()
    policies: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    experiments: tuple[str, ...] = ()
    since: str | None = None  # ISO date or time: the Experiment started then or later
    until: str | None = None

    def sql(self) -> tuple[str, list[Any]]:
        """The WHERE clause over runs `r` and experiments `x`, with its parameters."""
        clauses, params = ["TRUE"], []
        for values, column in ((self.tasks, "r.task"), (self.suites, SUITE_SQL), (self.policies, "r.policy"),
                               (self.experiments, "x.experiment_id")):
            if values:
                clauses.append(f"list_contains(?::VARCHAR[], {column})")
                params.append(list(values))
        if self.tags:
            clauses.append("list_has_any(from_json(x.tags, '[\"VARCHAR\"]'), ?::VARCHAR[])")
            params.append(list(self.tags))
        started = ("coalesce(try_cast(x.started_at AS TIMESTAMPTZ), try_cast(x.added_at AS TIMESTAMPTZ))")
        if self.since:
            clauses.append(f"{started} >= ?::TIMESTAMPTZ")
            params.append(self.since)
        if self.until:
            clauses.append(f"{started} <= ?::TIMESTAMPTZ")
            params.append(self.until)
        return " AND ".join(clauses), params

    def given(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items() if v}


def parse_time(text: str, key: str, *, end_of_day: bool = False) -> str:
    """An ISO date or time as the UTC time it names (a date alone: its start, or its end for --until)."""
    try:
        if len(text) == 10:
            day = _dt.date.fromisoformat(text)
            moment = _dt.datetime.combine(day, _dt.time.max if end_of_day else _dt.time.min)
        else:
            moment = _dt.datetime.fromisoformat(text)
    except ValueError:
        raise UserError(f"expected an ISO date or time (2025-06-30 or 2025-06-30T12:00:00+00:00), got {text[:60]!r}",
                        where="command line", key=key) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.timezone.utc)
    return moment.isoformat()


@dataclass(frozen=True)
class BoardEnvironment:
    fingerprint: str
    task: str
    type: str | None
    suite: str
    label: str  # the task, or the task with the values that set it apart from its other environments
    identity: dict[str, Any] = field(compare=False, repr=False)


@dataclass(frozen=True)
class BoardPolicy:
    name: str
    revision: str
    label: str  # the name, or name@revision when the name has several revisions on the board


@dataclass(frozen=True)
class BoardRow:
    environment: BoardEnvironment
    policy: BoardPolicy
    episodes: int  # every episode recorded, errors included
    successes: int
    failures: int
    experiments: int

    @property
    def decided(self) -> int:
        return self.successes + self.failures

    @property
    def errors(self) -> int:
        return self.episodes - self.decided

    @property
    def success_rate(self) -> float | None:
        return self.successes / self.decided if self.decided else None

    @property
    def interval(self) -> tuple[float, float] | None:
        from evalfleet.analysis.stats import wilson_interval

        return wilson_interval(self.successes, self.decided) if self.decided else None

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.environment.task, "environment": self.environment.label,
                "environment_fingerprint": self.environment.fingerprint, "suite": self.environment.suite,
                "policy": self.policy.label, "policy_name": self.policy.name, "policy_revision": self.policy.revision,
                "episodes": self.episodes, "decided": self.decided, "successes": self.successes,
                "failures": self.failures, "errors": self.errors, "success_rate": self.success_rate,
                "interval": list(self.interval) if self.interval else None, "experiments": self.experiments}


@dataclass(frozen=True)
class RankedPolicy:
    policy: BoardPolicy
    rank: int
    rank_interval: tuple[int, int]
    strength: float
    interval: tuple[float, float]
    discordant_pairs: int
    paired_blocks: int
    group: int

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.policy.label, "policy_name": self.policy.name, "policy_revision": self.policy.revision,
                "rank": self.rank, "rank_interval": list(self.rank_interval), "strength": self.strength,
                "interval": list(self.interval), "discordant_pairs": self.discordant_pairs,
                "paired_blocks": self.paired_blocks, "group": self.group}


@dataclass(frozen=True)
class PairCount:
    """Two policies over the blocks both ran: how many, and how many each won (it succeeded, the other failed)."""

    first: str
    second: str
    blocks: int
    first_won: int
    second_won: int


@dataclass
class Board:
    store: str
    filters: Filters
    experiments: int
    rows: list[BoardRow]
    ranking: list[RankedPolicy]
    pairs: list[PairCount]
    blocks: int  # paired blocks (two policies or more)
    ranking_details: dict[str, Any]
    notes: list[str]

    @property
    def episodes(self) -> int:
        return sum(r.episodes for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {"store": self.store, "filters": self.filters.given(), "experiments": self.experiments,
                "episodes": self.episodes, "rows": [r.to_dict() for r in self.rows],
                "ranking": {**self.ranking_details, "policies": [p.to_dict() for p in self.ranking],
                            "pairs": [p.__dict__ for p in self.pairs], "paired_blocks": self.blocks},
                "notes": self.notes}


# --- labels and comparability -------------------------------------------------------------------------------

def value_at(identity: Any, dotted: str) -> Any:
    """The value at a dotted key of `differences` (a key may itself hold dots: `variations.robot.action_noise`)."""
    if dotted == "" or not isinstance(identity, dict):
        return identity if dotted == "" else None
    for key in sorted(identity, key=lambda k: -len(str(k))):
        key_text = str(key)
        if dotted == key_text:
            return identity[key]
        if dotted.startswith(key_text + "."):
            return value_at(identity[key], dotted[len(key_text) + 1:])
    return None


def shown(value: Any) -> str:
    text = value if isinstance(value, str) else canonical(value)
    return text if len(text) <= VALUE_LIMIT else text[:VALUE_LIMIT - 1] + "…"


def apart(identities: dict[str, dict[str, Any]], reference: str) -> list[str]:
    """The dotted fields in which the other identities differ from the reference one."""
    fields: list[str] = []
    for key, identity in identities.items():
        if key != reference:
            fields.extend(f for f in differences(identities[reference], identity) if f not in fields)
    return fields


def distinct_labels(base: str, keys: list[str], identities: dict[str, dict[str, Any]], fields: list[str],
                    short: dict[str, str]) -> dict[str, str]:
    """base {field=value, ...} for each key; base [short] when those would collide or run too long."""
    labels = {k: f"{base} {{{', '.join(f'{f}={shown(value_at(identities[k], f))}' for f in fields)}}}"
              for k in keys}
    if len(set(labels.values())) < len(labels) or any(len(v) > LABEL_LIMIT for v in labels.values()):
        labels = {k: f"{base} [{short[k]}]" for k in keys}
    return labels


def environments_of(runs: list[dict[str, Any]], episodes: dict[int, int],
                    notes: list[str]) -> dict[int, BoardEnvironment]:
    """Each environment id on the board with its label; a note per task with several environments."""
    first: dict[int, dict[str, Any]] = {}  # an environment's Run whose task tag sorts first names it
    for run in runs:
        if run["env_id"] in episodes and (run["env_id"] not in first or run["task"] < first[run["env_id"]]["task"]):
            first[run["env_id"]] = run
    by_task: dict[str, dict[int, dict[str, Any]]] = {}
    for env_id, run in first.items():
        by_task.setdefault(run["task"], {})[env_id] = run
    out: dict[int, BoardEnvironment] = {}
    for task, envs in sorted(by_task.items()):
        identities = {str(i): json.loads(r["environment_identity"] or "{}") for i, r in envs.items()}
        labels = {str(i): task for i in envs}
        if len(envs) > 1:
            reference = str(max(envs, key=lambda i: (episodes[i], envs[i]["environment"])))
            fields = apart(identities, reference)
            # The protocol's identity is a digest that follows from the options (a step limit is part of it):
            # a label shows it only when nothing readable differs.
            shown_fields = [f for f in fields if f != "protocol"] or fields
            labels = distinct_labels(task, list(identities), identities, shown_fields,
                                     {str(i): r["environment"][:8] for i, r in envs.items()})
            notes.append(f"{task}: {len(envs)} environments differ in {', '.join(fields) or 'their fingerprint'}; "
                         "not pooled (one row each)")
        for i, r in envs.items():
            out[i] = BoardEnvironment(r["environment"], task, r["environment_type"], r["suite"], labels[str(i)],
                                      identities[str(i)])
    return out


def policies_of(runs: list[dict[str, Any]], used: set[int], notes: list[str]) -> dict[int, BoardPolicy]:
    """Each policy id on the board with its label; a note per name with several revisions."""
    by_name: dict[str, dict[int, dict[str, Any]]] = {}
    for run in runs:
        if run["policy_id"] in used:
            by_name.setdefault(run["policy"], {})[run["policy_id"]] = run
    out: dict[int, BoardPolicy] = {}
    for name, revisions in sorted(by_name.items()):
        labels = {i: name for i in revisions}
        if len(revisions) > 1:
            identities = {str(i): json.loads(r["policy_identity"] or "{}") for i, r in revisions.items()}
            fields = apart(identities, str(min(revisions)))
            labels = {i: f"{name}@{r['policy_revision'][:8]}" for i, r in revisions.items()}
            notes.append(f"policy {name}: {len(revisions)} revisions differ in {', '.join(fields) or 'their digest'}; "
                         f"not pooled ({', '.join(sorted(labels.values()))})")
        for i, r in revisions.items():
            out[i] = BoardPolicy(name, r["policy_revision"], labels[i])
    return out


# --- the board ----------------------------------------------------------------------------------------------

def check_filters(runs_all: list[dict[str, Any]], filters: Filters, store: Store) -> None:
    """A filter value the store has nowhere is a typo: refused, naming it and what the store has."""
    have = {"--task": {r["task"] for r in runs_all}, "--suite": {r["suite"] for r in runs_all},
            "--policy": {r["policy"] for r in runs_all}, "--experiment": {r["experiment_id"] for r in runs_all},
            "--tag": {t for r in runs_all for t in json.loads(r["tags"] or "[]")}}
    for key, values in (("--task", filters.tasks), ("--suite", filters.suites), ("--policy", filters.policies),
                        ("--experiment", filters.experiments), ("--tag", filters.tags)):
        unknown = [v for v in values if v not in have[key]]
        if unknown:
            listed = ", ".join(sorted(have[key])[:30]) or "none"
            raise UserError(f"no {key[2:]} {unknown[0][:80]!r} in the store {store.location.display()} (it has: "
                            f"{listed}{', ...' if len(have[key]) > 30 else ''})", where="command line", key=key)


def build_board(store: Store, filters: Filters = Filters(), *, bootstrap: int | None = None) -> Board:
    """The board of the store's Experiments that the filters keep."""
    import duckdb

    from evalfleet.outputs.storage import storage_errors
    from evalfleet.store.board_queries import fetch, one_pass, resolve_conflicts, select_runs

    where = store.location.display()
    with storage_errors(where):
        con = store.connect()
        try:
            every = fetch(con, "SELECT r.experiment_id, coalesce(r.task, '') AS task, coalesce(r.policy, '') AS "
                               f"policy, {SUITE_SQL} AS suite, x.tags FROM runs r JOIN experiments x USING "
                               "(experiment_id)")
            check_filters(every, filters, store)
            select_runs(con, *filters.sql(), SUITE_SQL)
            runs = fetch(con, "SELECT * FROM selected")
            policies = max((r["policy_id"] for r in runs), default=0)
            counts, patterns = one_pass(con, policies)
            if any(clashes(p) for p in patterns):
                patterns = [p for p in patterns if not clashes(p)] + resolve_conflicts(con, policies)
        except duckdb.Error as exc:  # e.g. an Experiment removed while the board read it
            raise UserError(f"reading the store failed ({str(exc).splitlines()[0][:300]}); run the board again",
                            where=where) from None
        finally:
            con.close()
    return assemble(where, filters, runs, counts, patterns, bootstrap=bootstrap)


def clashes(pattern: dict[str, Any]) -> bool:
    """Whether some policy both won and lost in the pattern's blocks (it ran them more than once)."""
    return any(w & lost for w, lost in zip(pattern["won"], pattern.get("lost", ())))


def assemble(where: str, filters: Filters, runs: list[dict[str, Any]], counts: list[dict[str, Any]],
             patterns: list[dict[str, Any]], *, bootstrap: int | None) -> Board:
    notes: list[str] = []
    if not counts:
        notes.append("no episodes match" + (" the filters given" if filters.given() else ": the store is empty"))
        return Board(where, filters, 0, [], [], [], 0, {"method": METHOD}, notes)
    episodes_of_env: dict[int, int] = {}
    for c in counts:
        episodes_of_env[c["env_id"]] = episodes_of_env.get(c["env_id"], 0) + c["episodes"]
    environments = environments_of(runs, episodes_of_env, notes)
    policies = policies_of(runs, {c["policy_id"] for c in counts}, notes)
    experiments: dict[tuple[int, int], set[str]] = {}
    several: dict[tuple[int, int], int] = {}  # Runs per environment × policy
    for run in runs:
        if run["run_episodes"]:
            experiments.setdefault((run["env_id"], run["policy_id"]), set()).add(run["experiment_id"])
            several[(run["env_id"], run["policy_id"])] = several.get((run["env_id"], run["policy_id"]), 0) + 1
    rows = [BoardRow(environments[c["env_id"]], policies[c["policy_id"]], c["episodes"], c["successes"],
                     c["failures"], len(experiments.get((c["env_id"], c["policy_id"]), ())))
            for c in counts]
    rows.sort(key=lambda r: (r.environment.label, -(r.success_rate or 0.0), r.policy.label))
    repeated_note(patterns, policies, {k for k, n in several.items() if n > 1}, notes)
    ranking, pairs, blocks, details = rank(rows, environments, policies, patterns, notes, bootstrap=bootstrap)
    return Board(where, filters, len({r["experiment_id"] for r in runs if r["run_episodes"]}), rows, ranking, pairs,
                 blocks, details, notes)


MAX_RANKED = 200  # policy revisions ranked at once: past it the bootstrap (1,000 fits) takes too long


def rank(rows: list[BoardRow], environments: dict[int, BoardEnvironment], policies: dict[int, BoardPolicy],
         patterns: list[dict[str, Any]], notes: list[str], *, bootstrap: int | None
         ) -> tuple[list[RankedPolicy], list[PairCount], int, dict[str, Any]]:
    """The Bradley-Terry ranking of the board's policies on the paired blocks (module doc)."""
    import numpy as np

    from evalfleet.analysis.ranking import BOOTSTRAP, rank_blocks

    labels = sorted({p.label for p in policies.values()})
    if len(labels) > MAX_RANKED:  # the bootstrap's memory and time grow with the square of the policies
        notes.append(f"ranking: not computed: {len(labels)} policy revisions on the board, more than {MAX_RANKED}; "
                     "narrow it (--policy, --task, --since, --experiment) to rank them")
        return [], [], int(sum(p["blocks"] for p in patterns)), {"method": METHOD, "skipped": len(labels)}
    column = {pid: labels.index(p.label) for pid, p in policies.items()}
    fingerprints = sorted({environments[p["env_id"]].fingerprint for p in patterns})
    y = np.full((len(patterns), len(labels)), np.nan)
    strata = np.zeros(len(patterns), dtype=int)
    counts = np.zeros(len(patterns), dtype=np.int64)
    for n, p in enumerate(patterns):
        for pid in policy_ids(p["present"]):
            y[n, column[pid]] = float(bool(p["won"][(pid - 1) // WORD] >> ((pid - 1) % WORD) & 1))
        strata[n] = fingerprints.index(environments[p["env_id"]].fingerprint)
        counts[n] = p["blocks"]
    pairs, played = pair_counts(y, counts, labels)
    rates: dict[str, list[float]] = {}
    for r in rows:
        if r.success_rate is not None:
            rates.setdefault(r.policy.label, []).append(r.success_rate)
    result = rank_blocks(y, strata, counts, labels, fingerprints, bootstrap=bootstrap or BOOTSTRAP,
                         mean_success={k: sum(v) / len(v) for k, v in rates.items()})
    by_label = {p.label: p for p in policies.values()}
    ranked = [RankedPolicy(by_label[p["policy"]], p["rank"], tuple(p["rank_interval"]), p["strength"],
                           tuple(p["interval"]), p["discordant_pairs"], played[p["policy"]], p["group"])
              for p in result["policies"]]
    names = {e.fingerprint: e.label for e in environments.values()}
    details = {"method": METHOD, "level": result["level"], "environments": [names[f] for f in fingerprints],
               "reference": result["reference"], "bootstrap": result.get("bootstrap"), "prior": result.get("prior"),
               "note": "; ".join(result["notes"])}
    notes.extend(f"ranking: {n}" for n in result["notes"])
    return ranked, pairs, int(counts.sum()), details


def policy_ids(words: list[int]) -> list[int]:
    """The policy ids (1-based) whose bits are set in the words."""
    return [w * WORD + b + 1 for w, word in enumerate(words) for b in range(WORD) if word >> b & 1]


def repeated_note(patterns: list[dict[str, Any]], policies: dict[int, BoardPolicy], several: set[tuple[int, int]],
                  notes: list[str]) -> None:
    """How many paired blocks held a policy's episode more than once, with the policies that can have done so
    (those with several Runs on that environment) and those whose outcomes there differed."""
    blocks = sum(p["blocks"] for p in patterns if p["extra"])
    if not blocks:
        return
    candidates = sorted({policies[pid].label for p in patterns if p["extra"] for pid in policy_ids(p["present"])
                         if (p["env_id"], pid) in several})
    clashed = sum(p["blocks"] for p in patterns if "differing" in p)
    named = sorted({policies[pid].label for p in patterns for pid in policy_ids(p.get("differing", []))})
    notes.append(f"{blocks} paired blocks hold a policy's episode more than once (the same environment, seed and "
                 f"variations in several Runs{': ' + ', '.join(candidates) if candidates else ''}): the latest "
                 "added episode there is the one paired"
                 + (f"; {clashed} of them with differing outcomes ({', '.join(named)})" if clashed else ""))


def pair_counts(y: Any, counts: Any, labels: list[str]) -> tuple[list[PairCount], dict[str, int]]:
    import numpy as np

    present = ~np.isnan(y)
    won = np.nan_to_num(y, nan=0.0) * present
    lost = np.nan_to_num(1.0 - y, nan=0.0) * present
    shared = np.einsum("n,ni,nj->ij", counts, present.astype(float), present.astype(float))
    wins = np.einsum("n,ni,nj->ij", counts, won, lost)
    pairs = [PairCount(labels[i], labels[j], int(shared[i, j]), int(wins[i, j]), int(wins[j, i]))
             for i in range(len(labels)) for j in range(i + 1, len(labels)) if shared[i, j] > 0]
    return pairs, {label: int(shared[i, i]) for i, label in enumerate(labels)}
