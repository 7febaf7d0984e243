"""The report's Timings section, from experiment_result.json's `timings` (evalfleet's or Arena's): one stacked
bar per Run (each phase's total time), and per phase the p50–p90 spread of one call (a bar from p50 to p90, a
tick at p99), drawn as inline SVG; and the metadata line (status, git commit and dirty flag, config hash)."""

from __future__ import annotations

import html
import math
from typing import Any

COLOURS = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac", "#86bcb6", "#d37295")
OVERLAPPING = {"first_episode"}  # spans other phases: listed in the spread, never stacked
ROW, LABEL, WIDTH = 22, 230, 640


def _e(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _ms(ms: float) -> str:
    return f"{ms:.3g} ms" if ms < 1000 else f"{ms / 1000:.3g} s"


def metadata_line(result: dict[str, Any]) -> str:
    meta = ((result.get("experiment_metadata") or {}).get("document")) or {}
    if not meta:
        return ""
    git = meta.get("git") or meta.get("revision") or {}
    commit = git.get("commit") or git.get("git_commit")
    dirty = git.get("dirty", git.get("git_dirty"))
    config = meta.get("config_sha256") or (meta.get("experiment_config") or {}).get("sha256")
    parts = [f'status <b id="metadata-status">{_e(meta.get("status"))}</b>',
             f'git <code id="metadata-commit">{_e((commit or "none")[:12])}</code>'
             + (" (dirty)" if dirty else ""),
             f'config sha256 <code>{_e((config or "?")[:12])}</code>']
    if meta.get("backend"):
        parts.append(f'backend {_e(meta["backend"])}')
    return '<span id="metadata"> · ' + " · ".join(parts) + "</span>"


def timings_section(result: dict[str, Any]) -> str:
    timings = result.get("timings")
    if not isinstance(timings, dict) or not isinstance(timings.get("runs"), dict) or not timings["runs"]:
        return ""
    runs = {name: r.get("phases") or {} for name, r in timings["runs"].items() if isinstance(r, dict)}
    names = list(dict.fromkeys(p for phases in runs.values() for p in phases))
    colour = {p: COLOURS[i % len(COLOURS)] for i, p in enumerate(names)}
    return ('<section id="timings"><h2>Timings</h2>'
            f'<p class="note">from {_e(timings.get("format") or "evalfleet")} timings; the bars stack each phase\'s '
            'total time per Run, the spread shows one call\'s p50–p90 on a log scale (tick: p99)</p>'
            + _stacked(runs, names, colour) + _spread(_spread_rows(timings, runs, names), colour) + "</section>")


def _spread_rows(timings: dict[str, Any], runs: dict[str, dict[str, Any]], names: list[str]) -> list[tuple]:
    """(label, phase, stats): the pooled phase where its percentiles could be pooled (evalfleet's samples), else
    one row per Run (summaries without samples, as Arena's, cannot be pooled)."""
    totals = timings.get("totals") or {}
    rows: list[tuple] = []
    for p in names:
        t = totals.get(p)
        if isinstance(t, dict) and t.get("p50_ms") is not None:
            rows.append((p, p, t))
            continue
        rows += [(f"{run}: {p}", p, phases[p]) for run, phases in runs.items() if isinstance(phases.get(p), dict)]
    own = timings.get("experiment") if isinstance(timings.get("experiment"), dict) else {}
    return rows + [(f"(the run) {p}", p, t) for p, t in own.items() if isinstance(t, dict)]


def _stacked(runs: dict[str, dict[str, Any]], names: list[str], colour: dict[str, str]) -> str:
    stacked = [p for p in names if p not in OVERLAPPING]
    totals = {run: sum(float(ph.get(p, {}).get("total_ms") or 0) for p in stacked) for run, ph in runs.items()}
    scale = (WIDTH - LABEL - 70) / max(max(totals.values(), default=0.0), 1e-9)
    height = ROW * len(runs) + 30
    out = [f'<svg id="timings-plot" role="img" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
           'xmlns="http://www.w3.org/2000/svg" font-size="11" font-family="sans-serif">']
    for i, (run, phases) in enumerate(runs.items()):
        y, x = 8 + i * ROW, float(LABEL)
        out.append(f'<text x="{LABEL - 6}" y="{y + 13}" text-anchor="end">{_e(run)}</text>')
        for p in stacked:
            ms = float((phases.get(p) or {}).get("total_ms") or 0)
            if ms <= 0:
                continue
            w = ms * scale
            out.append(f'<rect class="timing-segment" data-phase="{_e(p)}" x="{x:.1f}" y="{y}" '
                       f'width="{max(w, 0.5):.1f}" '
                       f'height="{ROW - 6}" fill="{colour[p]}"><title>{_e(run)}: {_e(p)} {ms / 1000:.3g} s '
                       f'({(phases.get(p) or {}).get("count")} calls)</title></rect>')
            x += w
        out.append(f'<text x="{x + 4:.1f}" y="{y + 13}">{totals[run] / 1000:.3g} s</text>')
    legend_y = height - 8
    lx = 4.0
    for p in stacked:
        out.append(f'<rect x="{lx:.0f}" y="{legend_y - 9}" width="9" height="9" fill="{colour[p]}"/>'
                   f'<text x="{lx + 12:.0f}" y="{legend_y}">{_e(p)}</text>')
        lx += 16 + 6.5 * len(p)
    out.append("</svg>")
    return "".join(out)


def _spread(rows: list[tuple], colour: dict[str, str]) -> str:
    values = [float(t[k]) for _, _, t in rows for k in ("p50_ms", "p90_ms", "p99_ms")
              if isinstance(t.get(k), (int, float)) and t[k] > 0]
    lo, hi = math.log10(min(values, default=1.0) / 2), math.log10(max(values, default=1.0) * 1.2)
    span = (WIDTH - LABEL - 120) / max(hi - lo, 1e-9)

    def at(ms: float) -> float:  # a log scale: phases of microseconds and of minutes side by side
        return LABEL + (math.log10(max(ms, 10 ** lo)) - lo) * span
    height = ROW * len(rows) + 10
    out = [f'<svg id="timings-spread" role="img" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
           'xmlns="http://www.w3.org/2000/svg" font-size="11" font-family="sans-serif">']
    for i, (label, p, t) in enumerate(rows):
        y = 6 + i * ROW
        p50, p90, p99 = (t.get(k) for k in ("p50_ms", "p90_ms", "p99_ms"))
        out.append(f'<text x="{LABEL - 6}" y="{y + 12}" text-anchor="end">{_e(label)}</text>')
        if isinstance(p50, (int, float)) and isinstance(p90, (int, float)):
            x0, x1 = at(p50), at(p90)
            out.append(f'<rect class="timing-spread" data-phase="{_e(p)}" x="{x0:.1f}" y="{y + 2}" '
                       f'width="{max(x1 - x0, 1.5):.1f}" height="{ROW - 10}" fill="{colour.get(p, "#888")}">'
                       f'<title>{_e(p)}: p50 {p50:.3g} ms, p90 {p90:.3g} ms</title></rect>')
            if isinstance(p99, (int, float)):
                out.append(f'<line x1="{at(p99):.1f}" x2="{at(p99):.1f}" y1="{y}" '
                           f'y2="{y + ROW - 6}" stroke="#333"/>')
            label = f"{_ms(p50)}–{_ms(p90)}"
        else:
            label = f'mean {_ms(float(t.get("mean_ms") or 0))}'
        out.append(f'<text x="{WIDTH - 114}" y="{y + 12}">{_e(label)}</text>')
    out.append("</svg>")
    return "".join(out)
