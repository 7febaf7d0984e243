"""The board as one static HTML page (`evalfleet board --html DIR`): the same numbers as the terminal and --json,
every table sortable by clicking a column's header.

Self-contained (inline style and script, no network: its Content-Security-Policy refuses any fetch) and escaped:
every name from the store (policies, tasks, claims' sources) is written as text through html.escape, and the
script only reorders the rows the page already holds, reading each cell's data-sort value; it never writes HTML.
"""

from __future__ import annotations

import html
from typing import Any

from evalfleet.store.board import Board
from evalfleet.store.board_text import rank_range
from evalfleet.store.claims import Verdict

CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'"

STYLE = """
:root { --fg: #1d2330; --muted: #667085; --line: #d9dde5; --head: #f4f6f9; --ok: #16794c; --bad: #b42318; }
body { margin: 0; padding: 1.2rem 1.6rem 3rem; font: 14px/1.45 system-ui, sans-serif; color: var(--fg); }
h1 { font-size: 1.4rem; margin: 0 0 .3rem; }
h2 { font-size: 1.1rem; margin: 1.6rem 0 .5rem; border-bottom: 1px solid var(--line); }
.note, .meta { color: var(--muted); font-size: .85rem; }
table { border-collapse: collapse; margin: .4rem 0; }
th, td { border: 1px solid var(--line); padding: .25rem .55rem; text-align: left; vertical-align: top; }
thead th { background: var(--head); cursor: pointer; white-space: nowrap; user-select: none; }
thead th[aria-sort="ascending"]::after { content: " \\25B2"; }
thead th[aria-sort="descending"]::after { content: " \\25BC"; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.reproduced { color: var(--ok); font-weight: 600; }
td.above, td.below, td.not-comparable { color: var(--bad); font-weight: 600; }
"""

# Sorting: a header click orders its table's body rows by that column's data-sort values (numbers when the
# header says data-type="num"), ascending, then descending on the next click. Rows are moved, never rebuilt.
SCRIPT = """
(function () {
  "use strict";
  document.querySelectorAll("table.sortable").forEach(function (table) {
    var heads = Array.prototype.slice.call(table.querySelectorAll("thead th"));
    heads.forEach(function (th, col) {
      th.addEventListener("click", function () {
        var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
        heads.forEach(function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
        var num = th.dataset.type === "num", body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        function key(r) { var v = r.cells[col].dataset.sort; return num ? (v === "" ? -Infinity : +v) : v; }
        rows.sort(function (a, b) {
          var x = key(a), y = key(b);
          return (x < y ? -1 : x > y ? 1 : 0) * dir || (+a.dataset.order - +b.dataset.order);
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  document.body.dataset.ready = "1";
})();
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def interval_text(iv: Any) -> str:
    return "—" if not iv else f"[{100 * iv[0]:.1f}–{100 * iv[1]:.1f}]"


def cell(text: Any, sort: Any = None, *, num: bool = False, cls: str = "", data: str = "") -> str:
    sort = text if sort is None else sort
    classes = " ".join(c for c in ("num" if num else "", cls) if c)
    attrs = f' class="{classes}"' if classes else ""
    return f'<td{attrs} data-sort="{_e(sort)}"{data}>{_e(text)}</td>'


def table(table_id: str, headers: list[tuple[str, str]], rows: list[list[str]]) -> str:
    """A sortable table: headers are (text, "num" or "text"); each row a list of <td> cells."""
    head = "".join(f'<th data-type="{kind}">{_e(text)}</th>' for text, kind in headers)
    body = "".join(f'<tr data-order="{i}">{"".join(cells)}</tr>' for i, cells in enumerate(rows))
    return f'<table id="{table_id}" class="sortable"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def rows_table(board: Board) -> str:
    rows = []
    for r in board.rows:
        d = r.to_dict()
        ident = f' data-policy="{_e(r.policy.label)}" data-environment="{_e(r.environment.label)}"'
        rows.append([cell(r.environment.label, data=ident), cell(r.policy.label), cell(r.environment.suite),
                     cell(pct(d["success_rate"]), d["success_rate"] if d["success_rate"] is not None else "",
                          num=True),
                     cell(interval_text(d["interval"]), d["interval"][0] if d["interval"] else "", num=True),
                     cell(r.decided, num=True), cell(r.successes, num=True), cell(r.errors, num=True),
                     cell(r.experiments, num=True)])
    return table("board", [("Environment", "text"), ("Policy", "text"), ("Suite", "text"), ("Success", "num"),
                           ("95% interval", "num"), ("Episodes", "num"), ("Successes", "num"), ("Errors", "num"),
                           ("Experiments", "num")], rows)


def ranking_table(board: Board) -> str:
    if not board.ranking:
        return '<p class="note">No ranking: fewer than two policies share paired episodes.</p>'
    rows = []
    for p in board.ranking:
        lo = p.rank_interval[0]
        rows.append([cell(p.rank, num=True), cell(rank_range(p.rank_interval), lo, num=True),
                     cell(p.policy.label), cell(f"{p.strength:+.2f}", p.strength, num=True),
                     cell(f"[{p.interval[0]:+.2f}, {p.interval[1]:+.2f}]", p.interval[0], num=True),
                     cell(p.paired_blocks, num=True), cell(p.discordant_pairs, num=True)])
    return table("ranking", [("Rank", "num"), ("Rank range", "num"), ("Policy", "text"), ("Strength", "num"),
                             ("Simultaneous 95% interval", "num"), ("Paired blocks", "num"),
                             ("Discordant pairs", "num")], rows)


def claims_table(verdicts: list[Verdict]) -> str:
    rows = []
    for v in verdicts:
        rows.append([cell(v.index, num=True), cell(v.claim.policy), cell(v.environment),
                     cell(pct(v.claim.success), v.claim.success, num=True),
                     cell(pct(v.success_rate), v.success_rate if v.success_rate is not None else "", num=True),
                     cell(interval_text(v.interval), v.interval[0] if v.interval else "", num=True),
                     cell(v.decided, num=True), cell(v.verdict, cls=v.verdict.replace(" ", "-")),
                     cell(v.claim.source), cell(v.reason or "")])
    return table("claims", [("Claim", "num"), ("Policy", "text"), ("Environment", "text"), ("Claimed", "num"),
                            ("Ours", "num"), ("95% interval", "num"), ("Episodes", "num"), ("Verdict", "text"),
                            ("Source", "text"), ("Why", "text")], rows)


def render_board_page(board: Board, verdicts: list[Verdict] | None = None) -> str:
    filters = ", ".join(f"{k}={v}" for k, v in board.filters.given().items()) or "none"
    claims = ""
    if verdicts is not None:
        claims = ('<section id="claims-section"><h2>Reproduction verdicts</h2><p class="note">reproduced: the '
                  "claimed rate lies inside our 95% Wilson interval; above / below: it lies above / below it."
                  f"</p>{claims_table(verdicts)}</section>")
    notes = "".join(f"<li>{_e(n)}</li>" for n in board.notes)
    blocks = f"{board.blocks} paired blocks" if board.ranking else "no paired blocks"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="referrer" content="no-referrer">
<title>evalfleet board</title>
<style>{STYLE}</style>
</head>
<body>
<h1>evalfleet board</h1>
<p class="meta" id="summary">{_e(board.store)}: {board.experiments} Experiments, {board.episodes} episodes;
filters: {_e(filters)}</p>
<section id="board-section"><h2>Task × policy</h2>
<p class="note">Success counts decided episodes (success + failure); errors are shown apart. Intervals are 95% Wilson
score intervals. A row pools one policy revision's episodes on one environment across Experiments.</p>
{rows_table(board)}</section>
<section id="ranking-section"><h2>Overall ranking</h2>
<p class="note">{_e(board.ranking_details.get("method", ""))}; {_e(blocks)}. Rank range: the ranks each policy can
hold while every interval holds at once.</p>
{ranking_table(board)}</section>
{claims}
<section id="notes-section"><h2>Notes</h2><ul id="notes">{notes}</ul></section>
<script>{SCRIPT}</script>
</body>
</html>
"""
