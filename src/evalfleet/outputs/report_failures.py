"""The report's Failures section, from experiment_result.json's failure roll-up (`outputs.failures`): one
table per Run and one per policy, a row per failure code (episodes, their share of the Run's or policy's
recorded episodes, the code's kind and description, also on hover), the biggest failure mode first.
Nothing is shown when no episode failed or errored."""

from __future__ import annotations

import html
from typing import Any


def _e(v: Any) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def _share(n: int, of: int) -> str:
    return f"{100 * n / of:.1f}%" if of else "—"


def _row(scope: str, scope_key: str, label_cells: str, code: str, n: int, of: int,
         info: dict[str, Any]) -> tuple[int, str]:
    kind, description = info.get("kind"), info.get("description")
    return n, (f'<tr data-{scope}="{_e(scope_key)}" data-code="{_e(code)}">{label_cells}'
               f'<td class="code"><code title="{_e(description or "not declared by the protocol")}">{_e(code)}'
               f'</code></td><td class="kind">{_e(kind or "—")}</td><td class="num count">{n}</td>'
               f'<td class="num share">{_share(n, of)}</td><td class="note">{_e(description or "—")}</td></tr>')


def _table(table_id: str, first: str, rows: list[tuple[int, str]]) -> str:
    # Biggest failure mode first; a stable sort keeps the Experiment's order, then the code order, among ties.
    body = "".join(html_row for _, html_row in sorted(rows, key=lambda r: -r[0]))
    return (f'<table id="{table_id}" class="grid failures"><thead><tr>{first}<th>Failure code</th><th>Kind</th>'
            '<th>Episodes</th><th>Share</th><th>Description</th></tr></thead><tbody>' + body + "</tbody></table>")


def failures_section(result: dict[str, Any]) -> str:
    runs = [r for r in (result.get("runs") or {}).values() if isinstance(r, dict) and r.get("failures")]
    if not runs:
        return ""
    info = result.get("failure_codes") or {}
    run_rows, episodes_of = [], {}
    for r in runs:
        of = int(r.get("episodes_recorded") or 0)
        policy = str(r.get("policy"))
        episodes_of[policy] = episodes_of.get(policy, 0) + of
        cells = f'<td class="run">{_e(r["run"])}</td><td>{_e(r.get("task"))}</td><td>{_e(policy)}</td>'
        run_rows += [_row("run", r["run"], cells, code, n, of, info.get(code) or {})
                     for code, n in r["failures"].items()]
    policy_rows = [_row("policy", policy, f'<td class="policy">{_e(policy)}</td>', code, n,
                        episodes_of.get(policy, 0), info.get(code) or {})
                   for policy, counts in (result.get("failures_by_policy") or {}).items()
                   for code, n in counts.items()]
    return ('<section id="failures"><h2>Failures</h2><p class="note">failed and errored episodes by failure code '
            '(the final attempt of each episode, as the rates count them); share: of the Run\'s (the policy\'s) '
            'recorded episodes; <code>unclassified</code>: a record without a code</p>'
            '<h3>By Run</h3>' + _table("failures-by-run", "<th>Run</th><th>Task</th><th>Policy</th>", run_rows)
            + '<h3>By policy</h3>' + _table("failures-by-policy", "<th>Policy</th>", policy_rows) + "</section>")
