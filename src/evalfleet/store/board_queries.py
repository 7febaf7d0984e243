"""The board's SQL: everything over episodes aggregated in DuckDB, so 10M episodes never reach Python.

`select_runs` makes the small temp table `selected` (the Runs the filters keep, with integer ids). `one_pass` then
reads the episodes once with two grouping sets: per environment × policy (the rows' counts) and per block
(environment, seed, variation values), where each policy is one bit of a few UBIGINT words: won, lost (present is
their OR). Blocks are then counted per distinct pattern. A block where one policy both won and lost (it ran the
block more than once, with different outcomes) is resolved by `resolve_conflicts`, which takes that policy's latest
added episode there; where its outcomes agree, the latest added one has that outcome too: no second pass needed.
"""

from __future__ import annotations

from typing import Any

WORD = 64  # policies per UBIGINT word of bits

# The episodes with their Run's integer ids: `won` 1 / 0 for a decided episode, NULL otherwise; `b` the policy's
# bit (0-based). `key` orders a policy's episodes in one block: the latest added Run's, then its last episode
# (max(key * 2 + won) % 2 is the outcome of the largest key: an arg_max at the cost of a max).
EPISODES = """
    SELECT s.env_id, s.policy_id, s.policy_id - 1 AS b, e.seed, hash(e.variations) AS v,
           CASE e.status WHEN 'success' THEN 1 WHEN 'failure' THEN 0 END AS won,
           s.recency * 4294967296 + coalesce(e.episode, 0) AS key
    FROM episodes e JOIN selected s USING (experiment_id, run)"""


def select_runs(con: Any, where: str, params: list[Any], suite_sql: str) -> None:
    """The temp table `selected`: the Runs the filters keep, each with small integer ids for its environment and
    policy and its recency (the order the store added it: a later one wins a block)."""
    con.execute(f"""
        CREATE TEMP TABLE selected AS
        SELECT r.experiment_id, r.run, coalesce(r.task, '') AS task, coalesce(r.policy, '') AS policy,
               coalesce(r.policy_revision, '') AS policy_revision, r.policy_identity,
               coalesce(r.environment_fingerprint, '') AS environment, r.environment_identity, r.environment_type,
               {suite_sql} AS suite, coalesce(r.episodes, 0) AS run_episodes,
               dense_rank() OVER (ORDER BY coalesce(r.environment_fingerprint, '')) AS env_id,
               dense_rank() OVER (ORDER BY coalesce(r.policy, ''), coalesce(r.policy_revision, '')) AS policy_id,
               row_number() OVER (ORDER BY x.added_at, r.experiment_id, r.run) AS recency
        FROM runs r JOIN experiments x USING (experiment_id)
        WHERE {where}""", params)


def words(policies: int) -> int:
    return max(1, -(-policies // WORD))


def fetch(con: Any, sql: str) -> list[dict[str, Any]]:
    cursor = con.execute(sql)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def bits(condition: str, count: int, name: str) -> str:
    """`count` UBIGINT words, each the OR of the bits of the policies whose rows meet `condition`. CASE, not
    FILTER: one expression per word is the cheaper aggregate over 10M rows."""
    if count == 1:
        return f"bit_or(CASE WHEN {condition} THEN 1::UBIGINT << b ELSE 0::UBIGINT END) AS {name}0"
    return ", ".join(f"bit_or(CASE WHEN {condition} AND b // {WORD} = {w} THEN 1::UBIGINT << (b % {WORD}) "
                     f"ELSE 0::UBIGINT END) AS {name}{w}" for w in range(count))


def one_pass(con: Any, policies: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rows: env_id, policy_id, episodes, successes, failures; patterns: env_id, present, won, lost (word
    lists), extra (some policy ran the block more than once), blocks), from one read of the episodes."""
    n = words(policies)
    word_names = [f"{k}{w}" for k in ("won", "lost") for w in range(n)]
    present = " + ".join(f"bit_count(won{w} | lost{w})::INTEGER" for w in range(n))  # TINYINT: 127 at most
    sql = f"""
        WITH grouped AS (
            SELECT grouping(policy_id) AS is_block, env_id, policy_id, seed, count(*) AS episodes,
                   count(*) FILTER (WHERE won = 1) AS successes, count(won) AS decided,
                   {bits("won = 1", n, "won")}, {bits("won = 0", n, "lost")}
            FROM ({EPISODES}) ep
            GROUP BY GROUPING SETS ((env_id, policy_id), (env_id, seed, v))
        )
        SELECT is_block, env_id, policy_id, sum(episodes) AS episodes, sum(successes) AS successes,
               sum(decided) AS decided, {", ".join(word_names)}, decided > ({present}) AS extra, count(*) AS blocks
        FROM grouped
        WHERE is_block = 0 OR (seed IS NOT NULL AND ({present}) > 1)
        GROUP BY is_block, env_id, policy_id, {", ".join(word_names)}, extra"""
    rows, patterns = [], []
    for r in fetch(con, sql):
        if r["is_block"]:
            won, lost = ([r[f"{k}{w}"] for w in range(n)] for k in ("won", "lost"))
            patterns.append({"env_id": r["env_id"], "blocks": r["blocks"], "extra": bool(r["extra"]), "won": won,
                             "lost": lost, "present": [a | b for a, b in zip(won, lost)]})
        else:
            rows.append({"env_id": r["env_id"], "policy_id": r["policy_id"], "episodes": r["episodes"],
                         "successes": r["successes"], "failures": r["decided"] - r["successes"]})
    return rows, patterns


def resolve_conflicts(con: Any, policies: int) -> list[dict[str, Any]]:
    """The patterns of the blocks where some policy both won and lost (module doc), each policy's outcome there
    its latest added episode's; `differing` the policies whose outcomes there differ."""
    n = words(policies)
    decided = "won IS NOT NULL AND seed IS NOT NULL"
    present = " + ".join(f"bit_count(won{w} | lost{w})::INTEGER" for w in range(n))  # TINYINT: 127 at most
    clash = " OR ".join(f"won{w} & lost{w} <> 0" for w in range(n))
    sql = f"""
        WITH ep AS (SELECT * FROM ({EPISODES}) WHERE {decided}),
        clashing AS (
            SELECT env_id, seed, v FROM (
                SELECT env_id, seed, v, {bits("won = 1", n, "won")}, {bits("won = 0", n, "lost")}
                FROM ep GROUP BY env_id, seed, v)
            WHERE ({present}) > 1 AND ({clash})
        ),
        picked AS (
            SELECT env_id, seed, v, b, max(key * 2 + won) % 2 AS won, min(won) <> max(won) AS differs
            FROM ep SEMI JOIN clashing USING (env_id, seed, v) GROUP BY env_id, seed, v, b
        ),
        blocks AS (
            SELECT env_id, {bits("TRUE", n, "present")}, {bits("won = 1", n, "won")},
                   {bits("differs", n, "differing")}
            FROM picked GROUP BY env_id, seed, v
        )
        SELECT env_id, {", ".join(f"{k}{w}" for k in ("present", "won", "differing") for w in range(n))},
               count(*) AS blocks
        FROM blocks GROUP BY ALL"""
    return [{"env_id": r["env_id"], "blocks": r["blocks"], "extra": True,
             **{k: [r[f"{k}{w}"] or 0 for w in range(n)] for k in ("present", "won", "differing")}}
            for r in fetch(con, sql)]
