"""The report's sequential decisions and ranking (issue #25): the Decisions and Ranking sections of index.html
and the stopping note of a Run's rate. Static HTML from experiment_result.json's `comparisons`, `ranking` and
each Run's `stopping`; every value escaped."""

from __future__ import annotations

import html
from typing import Any

from evalfleet.errors import UserError

POWER = 0.8  # the "≈ N more episodes would likely decide it" estimate's power
VERDICTS = ("better", "worse", "no_difference", "undecided")
BAR_WIDTH, BAR_HEIGHT = 240, 18


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _num(x: Any, digits: int = 2) -> str:
    return f"{x:.{digits}f}" if isinstance(x, (int, float)) and not isinstance(x, bool) else "—"


def _points(x: Any) -> str:
    return f"{100 * x:+.1f}" if isinstance(x, (int, float)) and not isinstance(x, bool) else "—"


def _interval(iv: Any, fmt=_num) -> str:
    if isinstance(iv, (list, tuple)) and len(iv) == 2:
        return f"[{fmt(iv[0])}, {fmt(iv[1])}]"
    return "—"


# --- a Run's stopping -----------------------------------------------------------------------------------

def stopping_rate_note(run: dict[str, Any]) -> str:
    """Under a stopping Run's rate: where it stopped, why, and its interval with the interval's method (the
    confidence sequence that stays valid after stopping, not the fixed-n Wilson interval)."""
    stopping = run.get("stopping")
    if not isinstance(stopping, dict):
        return ""
    cap = (run.get("planned_episodes") if stopping.get("max_episodes") is None else stopping.get("max_episodes"))
    reason = f": {_e(stopping['reason'])}" if stopping.get("reason") else ""
    return (f'<div class="note stopping">stopped at {_e(stopping.get("stopped_at"))} / {_e(cap)}{reason}</div>'
            f'<div class="note interval-method">interval: '
            f'{_e(stopping.get("interval_method") or "confidence sequence")} (valid after stopping)</div>')


def has_stopping(result: dict[str, Any]) -> bool:
    return any(isinstance(r.get("stopping"), dict) for r in (result.get("runs") or {}).values())


# --- Decisions ------------------------------------------------------------------------------------------

def _comparisons(result: dict[str, Any]) -> list[dict[str, Any]]:
    found = result.get("comparisons")
    return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []


def more_episodes(entry: dict[str, Any], level: float) -> tuple[int | None, str]:
    """(≈ episodes per Run beyond `stopped_at` that would likely decide an undecided comparison, how): the exact
    McNemar test's N pairs (analysis.paired_power, power POWER, at `level`) for the observed discordant shares;
    None when that cannot be estimated (no pairs, no discordance, no observed difference, N already reached)."""
    from evalfleet.analysis.paired_power import paired_episodes_from_cells  # numpy: only for an undecided one

    pairs, a_only, b_only = entry.get("pairs"), entry.get("policy_only"), entry.get("baseline_only")
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (pairs, a_only, b_only)) or not pairs:
        return None, "no paired episodes to estimate from"
    if a_only == b_only:
        return None, "no observed difference (as many policy-only as baseline-only pairs)"
    try:
        size = paired_episodes_from_cells(a_only / pairs, b_only / pairs, alpha=level, power=POWER)
    except UserError as exc:
        return None, exc.message
    more = size.pairs - pairs
    how = (f"exact McNemar test at power {POWER:g}, level {level:.3g}, for the observed discordant shares "
           f"{a_only}/{pairs} and {b_only}/{pairs}: N = {size.pairs} pairs")
    if more <= 0:
        return None, f"{how}, already reached: the sequential boundary is stricter than a fixed-N test"
    return more, how


def _undecided_level(comparisons: list[dict[str, Any]], entry: dict[str, Any]) -> float:
    """Holm's level for a hypothesis still open: alpha / (comparisons not rejected)."""
    alpha = entry.get("alpha") if isinstance(entry.get("alpha"), (int, float)) else 0.05
    open_ = sum(1 for c in comparisons if c.get("verdict") not in ("better", "worse"))
    return alpha / max(open_, 1)


def _decision_row(entry: dict[str, Any], comparisons: list[dict[str, Any]], method_column: bool) -> str:
    verdict = str(entry.get("verdict"))
    badge_class = verdict if verdict in VERDICTS else "unknown"
    more = ""
    if verdict == "undecided":
        n, how = more_episodes(entry, _undecided_level(comparisons, entry))
        text = f"≈ {n} more episodes would likely decide it" if n is not None else "—"
        more = f'<div class="note more-episodes" title="{_e(how)}">{_e(text)}</div>'
    runs = entry.get("runs") if isinstance(entry.get("runs"), list) else []
    return (
        f'<tr data-task="{_e(entry.get("task"))}" data-policy="{_e(entry.get("policy"))}" '
        f'data-verdict="{_e(verdict)}">'
        f'<td>{_e(entry.get("task"))}</td>'
        f'<td class="vs"><b>{_e(entry.get("policy"))}</b> vs {_e(entry.get("baseline"))}'
        + (f'<div class="note">{_e(", ".join(str(r) for r in runs))}</div>' if runs else "") + "</td>"
        f'<td class="verdict"><span class="badge {_e(badge_class)}">{_e(verdict.replace("_", " "))}</span>{more}</td>'
        f'<td class="num stopped">{_e(entry.get("stopped_at"))} / {_e(entry.get("max_episodes"))}</td>'
        f'<td class="num discordant">{_e(entry.get("discordant"))} ({_e(entry.get("policy_only"))} / '
        f'{_e(entry.get("baseline_only"))})</td>'
        f'<td class="num difference">{_e(_points(entry.get("difference")))} points '
        f'{_e(_interval(entry.get("interval"), _points))}'
        f'<div class="note interval-method">{_e(entry.get("interval_method"))}</div></td>'
        f'<td class="num">{_e(_num(entry.get("statistic")))}</td>'
        + (f'<td class="method note">{_e(entry.get("method"))}</td>' if method_column else "") + "</tr>"
    )


def decisions_section(result: dict[str, Any]) -> str:
    """The Decisions section: one row per (task, policy, baseline) comparison; "" without comparisons."""
    comparisons = _comparisons(result)
    if not comparisons:
        return ""
    methods = list(dict.fromkeys(str(c.get("method")) for c in comparisons))
    shared = len(methods) == 1  # one method line under the table, else a column
    rows = "".join(_decision_row(c, comparisons, not shared) for c in comparisons)
    return (
        '<section id="decisions-section"><h2>Decisions</h2>'
        '<p class="note">Each policy against its baseline on the same seeds, decided in episode-index order at '
        'fixed looks; only discordant pairs (one succeeded, the other failed) carry information. The interval of '
        'each difference is the one valid for the sequential design (its method is named under it), not a '
        'fixed-N interval.</p>'
        '<table id="decisions" class="grid"><thead><tr><th>Task</th><th>Policy vs baseline</th><th>Verdict</th>'
        '<th>Stopped at / cap</th><th>Discordant pairs<br>(policy-only / baseline-only)</th>'
        '<th>Difference [interval]</th><th>Statistic</th>' + ("" if shared else "<th>Method</th>")
        + "</tr></thead><tbody>" + rows + "</tbody></table>"
        + (f'<p class="note decisions-method">Method: {_e(methods[0])}</p>' if shared else "")
        + savings_line(result.get("stopping_savings")) + "</section>"
    )


def savings_line(savings: Any) -> str:
    """What stopping saved against the fixed-N plan: episodes, runner-seconds, wall seconds (the last two
    estimated for the plan not run); "" without it."""
    if not isinstance(savings, dict) or not isinstance(savings.get("episodes"), dict):
        return ""
    parts = []
    for key, label in (("episodes", "episodes"), ("runner_seconds", "runner-seconds"), ("wall_seconds", "wall s")):
        entry = savings.get(key)
        if not isinstance(entry, dict):
            continue
        plan = entry.get("fixed_n", entry.get("fixed_n_estimate"))
        estimate = "" if "fixed_n" in entry else " (est.)"
        digits = 0 if key == "episodes" else 1
        parts.append(f"{_num(entry.get('used'), digits)} of {_num(plan, digits)}{estimate} {label} "
                     f"({_num(entry.get('ratio'))}×)")
    return (f'<p class="note stopping-savings" title="{_e(savings.get("method"))}">Against the fixed-N plan: '
            f'{_e("; ".join(parts))}</p>') if parts else ""


# --- Ranking --------------------------------------------------------------------------------------------

def _bar(strength: float, lo: float, hi: float, axis: tuple[float, float]) -> str:
    """An inline SVG: the simultaneous interval as a bar, the strength as a dot, 0 as a dashed line."""
    left, right = axis
    pad = 6

    def x(v: float) -> float:
        return pad + (v - left) / (right - left) * (BAR_WIDTH - 2 * pad)

    mid = BAR_HEIGHT / 2
    return (f'<svg class="strength-bar" width="{BAR_WIDTH}" height="{BAR_HEIGHT}" role="img" '
            f'aria-label="{_e(f"{strength:.2f} in [{lo:.2f}, {hi:.2f}]")}">'
            f'<line x1="{x(0):.1f}" x2="{x(0):.1f}" y1="0" y2="{BAR_HEIGHT}" class="zero"/>'
            f'<line x1="{x(lo):.1f}" x2="{x(hi):.1f}" y1="{mid}" y2="{mid}" class="interval"/>'
            f'<circle cx="{x(strength):.1f}" cy="{mid}" r="4" class="estimate"/></svg>')


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and abs(x) < float("inf")


def ranking_section(result: dict[str, Any]) -> str:
    """The Ranking section: rank, policy, strength with its simultaneous interval (an inline bar), mean success;
    "" without a ranking."""
    ranking = result.get("ranking")
    if not isinstance(ranking, dict) or not isinstance(ranking.get("policies"), list) or not ranking["policies"]:
        return ""
    entries = [p for p in ranking["policies"] if isinstance(p, dict)]
    bounds = [v for p in entries for v in (p.get("interval") or []) if _finite(v)] + [0.0]
    span = max(max(bounds) - min(bounds), 1e-9)
    axis = (min(bounds) - 0.05 * span, max(bounds) + 0.05 * span)
    rows = []
    for p in entries:
        iv = p.get("interval") if isinstance(p.get("interval"), list) and len(p["interval"]) == 2 else None
        ok = iv is not None and _finite(p.get("strength")) and all(_finite(v) for v in iv)
        bar = _bar(p["strength"], iv[0], iv[1], axis) if ok else ""
        ranks = p.get("rank_interval")
        rank_range = (f'<div class="note">ranks {_e(ranks[0])}–{_e(ranks[1])}</div>'
                      if isinstance(ranks, list) and len(ranks) == 2 and ranks[0] != ranks[1] else "")
        mean = p.get("mean_success")
        rows.append(
            f'<tr data-policy="{_e(p.get("policy"))}"><td class="num rank">{_e(p.get("rank"))}{rank_range}</td>'
            f'<td class="policy">{_e(p.get("policy"))}</td>'
            f'<td class="num strength">{_e(_num(p.get("strength")))} {_e(_interval(iv))}</td>'
            f'<td class="bar">{bar}</td>'
            f'<td class="num mean-success">{_e(f"{100 * mean:.1f}%" if _finite(mean) else "—")}</td></tr>')
    tasks = ranking.get("tasks") if isinstance(ranking.get("tasks"), list) else []
    return (
        '<section id="ranking-section"><h2>Ranking</h2>'
        f'<p class="note ranking-method">{_e(ranking.get("method"))}; over tasks: '
        f'{_e(", ".join(str(t) for t in tasks))}; scale: {_e(ranking.get("reference"))}.</p>'
        '<table id="ranking" class="grid"><thead><tr><th>Rank</th><th>Policy</th>'
        '<th>Strength [simultaneous 95% interval]</th><th></th><th>Mean success over tasks</th></tr></thead>'
        '<tbody>' + "".join(rows) + "</tbody></table>"
        f'<p class="note ranking-note">{_e(ranking.get("note"))}</p></section>'
    )
