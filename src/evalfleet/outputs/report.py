"""The report: `index.html` (inline CSS and JS, nothing fetched from the network) and its episode tables.

The summary, the task × policy matrix, provenance and plots are rendered here as static HTML; the per-episode
table (filters, sorting, pages of 100 rows, inline videos) is drawn by the inline script from each Run's compact
columnar table, a script beside the page (`report_episodes`: `report_episodes/<NNNN>.js`) that the page loads
when the user opens that Run (every Run at once for a small Experiment), so index.html's size depends on the
number of Runs, never on the number of episodes. Plots, videos and the tables are referenced by relative paths:
the report opens from disk next to them, or from a bucket.
"""

from __future__ import annotations

import html
import json
import re
from importlib import resources
from typing import Any, Iterable

from evalfleet.outputs.report_decisions import decisions_section, has_stopping, ranking_section, stopping_rate_note
from evalfleet.outputs.report_episodes import episode_manifest, script_safe
from evalfleet.outputs.report_failures import failures_section
from evalfleet.outputs.report_timings import metadata_line, timings_section
from evalfleet.outputs.summary import AT_RESET_NOTE, CLIPPED_NOTE, plural
from evalfleet.outputs.floors import floors_section
from evalfleet.outputs.trust import trust_section


def _asset(name: str) -> str:
    return resources.files("evalfleet.outputs").joinpath("report_assets", name).read_text(encoding="utf-8")


# --- formatting ----------------------------------------------------------------------------------------

def fmt_pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def fmt_rate(rate: float | None, ci: list[float] | None) -> str:
    if rate is None:
        return "—"
    text = fmt_pct(rate)
    if ci:
        text += f" [{100 * ci[0]:.1f}–{100 * ci[1]:.1f}]"
    return text


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _badge(status: str) -> str:
    return f'<span class="badge {_e(status)}">{_e(status)}</span>'


def _fmt_num(x: float | None, digits: int = 2) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


# --- static sections -----------------------------------------------------------------------------------

def _rate_cell(r: dict[str, Any], label_wilson: bool = False) -> str:
    rate, ci, decided = r.get("success_rate"), r.get("ci95"), r.get("decided", 0)
    planned = r.get("planned_episodes")
    if r["status"] == "failed":
        text = '<span class="na">— (failed)</span>'
        if decided:
            text += (f'<div class="note">{decided} decided episode(s) before the failure, '
                     f'{r["counts"]["success"]} success(es)</div>')
        return text
    if rate is None:
        return '<span class="na">— (no decided episodes)</span>'
    stopping = r.get("stopping") if isinstance(r.get("stopping"), dict) else None
    interval = stopping.get("interval") if stopping else ci  # a stopped Run's: its confidence sequence
    text = f'<span class="rate">{_e(fmt_rate(rate, interval if isinstance(interval, list) else None))}</span>'
    if stopping:
        text += stopping_rate_note(r)
    elif label_wilson:
        text += '<div class="note interval-method">interval: Wilson score (fixed n)</div>'
    if r["status"] == "partial":
        of = f" of {planned} planned" if planned is not None else ""
        text += f'<div class="note">partial: over {decided} decided episode(s){_e(of)}</div>'
    return text


def _summary_table(result: dict[str, Any]) -> str:
    rows = []
    label_wilson = has_stopping(result)  # beside confidence sequences, every interval says which it is
    for r in result["runs"].values():
        c = r["counts"]
        reason = f'<div class="reason">{_e(r["reason"])}</div>' if r.get("reason") else ""
        aside = r.get("set_aside") or {}
        if aside.get("total"):
            reason += (f'<div class="note set-aside">{_e(aside["total"])} record(s) set aside, not counted: '
                       f'{_e(aside.get("foreign", 0))} of another Run, {_e(aside.get("out_of_plan", 0))} outside '
                       f'the plan, {_e(aside.get("stale", 0))} stale duplicate(s), '
                       f'{_e(aside.get("malformed", 0))} without a valid status</div>')
        clipping = r.get("clipped_actions") or {}
        if clipping.get("flagged"):
            reason += (f'<div class="note clipped">{_e(CLIPPED_NOTE.format(fraction=clipping["fraction"]))} '
                       f'({_e(clipping["steps_clipped"])} of {_e(clipping["steps"])} steps)</div>')
        if r.get("success_at_reset"):
            reason += (f'<div class="note at-reset">'
                       f'{_e(AT_RESET_NOTE.format(episodes=plural(r["success_at_reset"], "episode")))}</div>')
        first = r.get("first_success_step") or {}
        when = ""  # under the rate, whose column is wide: the status column stays one badge wide
        if first.get("episodes"):
            median, q1, q3 = (f"{first[k]:g}" for k in ("median", "q1", "q3"))
            when = (f'<div class="note first-success">success first reported at step {_e(median)} (median; '
                    f'quartiles {_e(q1)}–{_e(q3)}) in {_e(first["episodes"])} episodes, '
                    f'{_e(first["succeeded"])} of them counted as successes</div>')
        t = r.get("timings") or {}
        rows.append(
            f'<tr data-run="{_e(r["run"])}" data-status="{_e(r["status"])}">'
            f'<td class="run">{_e(r["run"])}</td><td>{_e(r.get("task"))}</td><td>{_e(r.get("policy"))}</td>'
            f'<td class="status">{_badge(r["status"])}{reason}</td>'
            f'<td class="num">{_e("—" if r.get("planned_episodes") is None else r["planned_episodes"])}</td>'
            f'<td class="num">{c["success"]}</td><td class="num">{c["failure"]}</td>'
            f'<td class="num">{c["error"]}</td>'
            f'<td class="num">{_e("—" if c.get("missing") is None else c["missing"])}</td>'
            f'<td class="rate-cell">{_rate_cell(r, label_wilson)}{when}</td>'
            f'<td class="num">{_fmt_num(t.get("mean_duration_s"))}</td>'
            f'<td class="num">{_fmt_num(t.get("wall_s"), 1)}</td></tr>'
        )
    return (
        '<table id="summary" class="grid"><thead><tr><th>Run</th><th>Task</th><th>Policy</th><th>Status</th>'
        '<th>Planned</th><th>Success</th><th>Failure</th><th>Error</th><th>Missing</th>'
        '<th>Success rate [95% CI]</th><th>Mean episode s</th><th>Wall s</th></tr></thead><tbody>'
        + "".join(rows) + "</tbody></table>"
    )


def _skipped(result: dict[str, Any]) -> list[dict[str, Any]]:
    skipped = result.get("skipped_files")
    return [s for s in skipped if isinstance(s, dict)] if isinstance(skipped, list) else []


def _skipped_section(result: dict[str, Any]) -> str:
    """The files collect did not read (links leading out of a source, FIFOs, ...), said on the page."""
    skipped = _skipped(result)
    if not skipped:
        return ""
    items = "".join(f'<li><code>{_e(s.get("path"))}</code>: {_e(s.get("why"))}</li>' for s in skipped)
    return (f'<div id="skipped-files" class="note"><p>{len(skipped)} file(s) in the sources were skipped, not read '
            f'or copied:</p><ul>{items}</ul></div>')


def _progress_section(result: dict[str, Any]) -> str:
    """Each Run's progress summary (experiment_result.json's `runs.<run>.progress`, `summary.progress_summary`)."""
    rows = []
    for name, entry in (result.get("runs") or {}).items():
        summary = entry.get("progress") if isinstance(entry, dict) else None
        if not isinstance(summary, dict) or not summary.get("episodes"):
            continue
        n = summary["episodes"]
        funnel = "".join(f'<li><span class="criterion">{_e(c)}</span> {met}/{n} ({fmt_pct(met / n)})</li>'
                         for c, met in (summary.get("criteria") or {}).items())
        rows.append(f'<tr data-run="{_e(name)}"><td class="run">{_e(name)}</td><td class="num">{n}</td>'
                    f'<td class="num progress-mean">{fmt_pct(summary["mean"])}</td>'
                    f'<td class="num">{summary.get("all_complete", 0)}</td><td><ol class="funnel">{funnel}</ol></td>'
                    '</tr>')
    if not rows:
        return ""
    return ('<h2>Progress</h2><table id="progress" class="grid"><thead><tr><th>Run</th><th>Episodes</th>'
            '<th>Mean progress</th><th>All criteria met</th><th>Criteria met (funnel)</th></tr></thead><tbody>'
            + "".join(rows) + "</tbody></table>")


def _matrix_table(result: dict[str, Any]) -> str:
    matrix = result.get("matrix") or {}
    tasks, policies = matrix.get("tasks", []), matrix.get("policies", [])
    cells = {(c["task"], c["policy"]): c for c in matrix.get("cells", [])}
    head = "".join(f"<th>{_e(p)}</th>" for p in policies)
    body = []
    for t in tasks:
        tds = []
        for p in policies:
            c = cells.get((t, p))
            if c is None:
                tds.append('<td class="empty">·</td>')
                continue
            if c["status"] == "failed" and not c["decided"]:
                inner = _badge("failed")
            else:
                inner = f'<span class="rate">{_e(fmt_rate(c["success_rate"], c["ci95"]))}</span>'
                inner += f'<div class="note">n={c["decided"]}</div>'
                if c["status"] != "completed":
                    inner += _badge(c["status"])
            tds.append(f'<td data-task="{_e(t)}" data-policy="{_e(p)}">{inner}</td>')
        body.append(f"<tr><th>{_e(t)}</th>{''.join(tds)}</tr>")
    return (f'<table id="matrix" class="grid"><thead><tr><th>task \\ policy</th>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def _provenance_line(prov: dict[str, Any]) -> str:
    parts = [f'evalfleet {_e(prov.get("evalfleet_version"))}']
    sha = prov.get("experiment_sha256")
    parts.append(f'experiment sha256 <code title="{_e(sha)}">{_e(sha[:12])}</code>' if sha else "no experiment.yaml")
    parts.append(f'host {_e(prov.get("host"))}')
    parts.append(f'Python {_e(prov.get("python"))}')
    pk = prov.get("packages") or {}
    if pk:
        parts.append(", ".join(f"{_e(k)} {_e(v)}" for k, v in pk.items()))
    parts.append(f'collected {_e(prov.get("created"))}')
    return " · ".join(parts)


def _plots_section(plots: Iterable[str]) -> str:
    figs = [f'<figure><img src="{_e(p)}" alt="{_e(p)}" loading="lazy"><figcaption>{_e(p)}</figcaption></figure>'
            for p in plots]
    if not figs:
        return '<p class="note">No plots yet (<code>evalfleet plot DIR</code> writes them to <code>plots/</code>).</p>'
    return '<div class="plots">' + "".join(figs) + "</div>"


# --- the page --------------------------------------------------------------------------------------------

def render_report(result: dict[str, Any], runs: list[Any], *, plots: Iterable[str] = (),
                  title: str | None = None) -> str:
    """index.html's text for a collected result and its Runs (objects with .name and .episodes, the records that
    count: collect's `run_digest.RunDigest`), whose episode tables lie beside it (`report_episodes`)."""
    prov = result.get("provenance") or {}
    summary = result.get("summary") or {}
    by_status = summary.get("runs_by_status") or {}
    eps = summary.get("episodes") or {}
    title = title or "evalfleet report"
    overview = (f'{summary.get("runs", 0)} Runs: ' + ", ".join(f"{n} {s}" for s, n in by_status.items() if n)
                + f' · {eps.get("recorded", 0)} episodes recorded ({eps.get("success", 0)} success, '
                f'{eps.get("failure", 0)} failure, {eps.get("error", 0)} error, {eps.get("missing", 0)} missing)'
                + (f' · {eps["set_aside"]} records set aside' if eps.get("set_aside") else "")
                + (f' · {len(_skipped(result))} files skipped' if _skipped(result) else ""))
    meta = {"title": title}
    page = _asset("template.html")
    replacements = {
        "__TITLE__": _e(title),
        "/*__CSS__*/": _asset("report.css"),
        "__PROVENANCE__": _provenance_line(prov) + metadata_line(result),
        "__OVERVIEW__": _e(overview),
        "__SUMMARY__": _summary_table(result) + _skipped_section(result) + _progress_section(result),
        "__MATRIX__": _matrix_table(result),
        "__DECISIONS__": trust_section(result) + floors_section(result) + failures_section(result)
        + decisions_section(result) + ranking_section(result),
        "__PLOTS__": _plots_section(plots) + timings_section(result),
        "__META__": script_safe(json.dumps(meta)),
        "__EPISODES__": script_safe(episode_manifest([(run.name, run.episodes) for run in runs])),
        "/*__JS__*/": _asset("report.js"),
    }
    # One pass, so text inserted for one placeholder is never scanned for another.
    pattern = re.compile("|".join(re.escape(k) for k in replacements))
    return pattern.sub(lambda m: replacements[m.group(0)], page)
