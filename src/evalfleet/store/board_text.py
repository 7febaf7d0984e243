"""The board as terminal text and as CSV: the same numbers as --json and the HTML page."""

from __future__ import annotations

import csv
import io

from evalfleet.store.board import Board
from evalfleet.store.claims import Verdict
from evalfleet.textlayout import Column, table_lines


def pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def rate_text(rate: float | None, interval: tuple[float, float] | None) -> str:
    if rate is None or interval is None:
        return "—"
    return f"{pct(rate)} [{100 * interval[0]:.1f}–{100 * interval[1]:.1f}]"


ROW_COLUMNS = [Column("environment"), Column("policy"), Column("success (95% CI)", "right"),
               Column("episodes", "right"), Column("errors", "right"), Column("experiments", "right")]
RANK_COLUMNS = [Column("rank", "right"), Column("range", "right"), Column("policy"),
                Column("strength (simultaneous 95%)", "right"), Column("paired blocks", "right"),
                Column("discordant", "right")]
CLAIM_COLUMNS = [Column("claim", "right"), Column("policy"), Column("environment"), Column("claimed", "right"),
                 Column("ours (95% CI)", "right"), Column("episodes", "right"), Column("verdict"), Column("source")]


def board_lines(board: Board, width: int, verdicts: list[Verdict] | None = None) -> list[str]:
    given = ", ".join(f"{k}={','.join(v) if isinstance(v, list) else v}" for k, v in board.filters.given().items())
    lines = [f"{board.store}: {board.experiments} Experiments, {board.episodes} episodes"
             + (f" (filters: {given})" if given else "")]
    if board.rows:
        rows = [[r.environment.label, r.policy.label, rate_text(r.success_rate, r.interval), str(r.decided),
                 str(r.errors), str(r.experiments)] for r in board.rows]
        lines += [""] + table_lines(ROW_COLUMNS, rows, width, title="success per task × policy (decided episodes; "
                                                                    "Wilson intervals)", name_columns=2)
    if board.ranking:
        ranked = [[str(p.rank), rank_range(p.rank_interval), p.policy.label,
                   f"{p.strength:+.2f} [{p.interval[0]:+.2f}, {p.interval[1]:+.2f}]", str(p.paired_blocks),
                   str(p.discordant_pairs)] for p in board.ranking]
        lines += [""] + table_lines(RANK_COLUMNS, ranked, width, name_columns=3,
                                    title=f"overall rank: Bradley-Terry on {board.blocks} blocks paired across "
                                          "Experiments (same environment, seed and variations)")
    if verdicts is not None:
        lines += [""] + table_lines(CLAIM_COLUMNS, verdict_rows(verdicts), width, name_columns=3,
                                    title="reproduction verdicts (above / below: the claim lies above / below our "
                                          "interval)")
        lines += [f"  claim {v.index} ({v.environment}): {v.reason}" for v in verdicts if v.reason]
    if board.notes:
        lines += ["", "notes:"] + [f"  - {n}" for n in board.notes]
    return lines


def rank_range(bounds: tuple[int, int]) -> str:
    return str(bounds[0]) if bounds[0] == bounds[1] else f"{bounds[0]}–{bounds[1]}"


def verdict_rows(verdicts: list[Verdict]) -> list[list[str]]:
    return [[str(v.index), v.policy, v.environment, pct(v.claim.success), rate_text(v.success_rate, v.interval),
             str(v.decided), v.verdict, v.claim.source] for v in verdicts]


def board_csv(board: Board, verdicts: list[Verdict] | None = None) -> str:
    """The task × policy rows, each with its policy's overall rank; with claims, the verdicts instead."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    if verdicts is not None:
        fields = ["claim", "policy", "task", "suite", "claimed", "source", "environment", "board_policy", "verdict",
                  "decided", "successes", "success_rate"]
        writer.writerow(fields + ["ci_low", "ci_high", "reason"])
        for v in verdicts:
            d = v.to_dict()
            low, high = d["interval"] or ("", "")
            writer.writerow([d[f] for f in fields] + [low, high, d["reason"]])
        return out.getvalue()
    ranks = {p.policy.label: p for p in board.ranking}
    writer.writerow(["task", "environment", "environment_fingerprint", "suite", "policy", "policy_name",
                     "policy_revision", "episodes", "decided", "successes", "errors", "success_rate", "ci_low",
                     "ci_high", "experiments", "rank", "rank_low", "rank_high", "strength"])
    for r in board.rows:
        p = ranks.get(r.policy.label)
        low, high = r.interval or ("", "")
        writer.writerow([r.environment.task, r.environment.label, r.environment.fingerprint, r.environment.suite,
                         r.policy.label, r.policy.name, r.policy.revision, r.episodes, r.decided, r.successes,
                         r.errors, "" if r.success_rate is None else r.success_rate, low, high, r.experiments,
                         p.rank if p else "", p.rank_interval[0] if p else "", p.rank_interval[1] if p else "",
                         p.strength if p else ""])
    return out.getvalue()
