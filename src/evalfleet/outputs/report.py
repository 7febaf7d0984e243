"""The report: one self-contained `index.html` (inline CSS and JS, nothing fetched from the network).

The summary, the task × policy matrix, provenance and plots are rendered here as static HTML; the per-episode
table (filters, sorting, pages of 100 rows, inline videos) is drawn by the inline script from a compact columnar
JSON embedded in a `<script type="application/json">` tag, so the file stays small and fast at 100,000 episodes.
Plots and videos are referenced by relative paths: the report opens from disk next to them.
"""

from __future__ import annotations

import html
import json
import math
import re
from importlib import resources
from typing import Any, Iterable

from evalfleet.outputs.report_decisions import decisions_section, has_stopping, ranking_section, stopping_rate_note
from evalfleet.outputs.report_failures import failures_section
from evalfleet.outputs.report_timings import metadata_line, timings_section

_VECTOR_NAMES = {3: ("x", "y", "z")}
_COLOR_NAMES = ("r", "g", "b")
MAX_VECTOR_COMPONENTS = 8
MAX_ERROR_CHARS = 200
VALUE_FORMAT = ".3g"  # variation values and durations in the embedded table: 3 significant digits


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
                       f'the plan, {_e(aside.get("stale", 0))} stale duplicate(s)</div>')
        t = r.get("timings") or {}
        rows.append(
            f'<tr data-run="{_e(r["run"])}" data-status="{_e(r["status"])}">'
            f'<td class="run">{_e(r["run"])}</td><td>{_e(r.get("task"))}</td><td>{_e(r.get("policy"))}</td>'
            f'<td class="status">{_badge(r["status"])}{reason}</td>'
            f'<td class="num">{_e("—" if r.get("planned_episodes") is None else r["planned_episodes"])}</td>'
            f'<td class="num">{c["success"]}</td><td class="num">{c["failure"]}</td>'
            f'<td class="num">{c["error"]}</td>'
            f'<td class="num">{_e("—" if c.get("missing") is None else c["missing"])}</td>'
            f'<td class="rate-cell">{_rate_cell(r, label_wilson)}</td>'
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


# The progress summary lives with the rest of a Run's summary (experiment_result.json); the report shows it.
from evalfleet.outputs.summary import progress_summary  # noqa: E402 - beside its one use, after the table helpers


def _progress_section(runs: list[Any]) -> str:
    rows = []
    for run in runs:
        summary = progress_summary(run.records)
        if summary is None:
            continue
        n = summary["episodes"]
        funnel = "".join(f'<li><span class="criterion">{_e(name)}</span> {met}/{n} ({fmt_pct(met / n)})</li>'
                         for name, met in summary["criteria"].items())
        rows.append(f'<tr data-run="{_e(run.name)}"><td class="run">{_e(run.name)}</td><td class="num">{n}</td>'
                    f'<td class="num progress-mean">{fmt_pct(summary["mean"])}</td>'
                    f'<td class="num">{summary["all_complete"]}</td><td><ol class="funnel">{funnel}</ol></td></tr>')
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


# --- the compact episode data --------------------------------------------------------------------------

def _num(v: Any, spec: str = ".4g") -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return "null"
        if v == int(v) and abs(v) < 1e15:
            return str(int(v))
        return format(v, spec)
    return "null"


def _component_names(key: str, n: int) -> tuple[str, ...]:
    if n == 3:
        low = key.lower()
        if "color" in low or "colour" in low or "rgb" in low:
            return _COLOR_NAMES
        return _VECTOR_NAMES[3]
    return tuple(str(i) for i in range(n))


def _variation_columns(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Columns for every variation key present: numeric scalars, vector components, or categories."""
    keys: dict[str, str] = {}  # key -> kind: num | vec | cat
    vec_len: dict[str, int] = {}
    for rec in records:
        for k, v in (rec.get("variations") or {}).items():
            kind = keys.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                new = "num"
            elif isinstance(v, list) and v and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
                new = "vec"
                vec_len[k] = max(vec_len.get(k, 0), len(v))
            else:
                new = "cat"
            if kind is None or kind == new:
                keys[k] = new
            else:
                keys[k] = "cat"
    columns = []
    for key in sorted(keys):
        kind = keys[key]
        if kind == "num":
            data = [_num((rec.get("variations") or {}).get(key), VALUE_FORMAT) for rec in records]
            columns.append({"key": key, "kind": "num", "data": "[" + ",".join(data) + "]"})
        elif kind == "vec":
            n = min(vec_len[key], MAX_VECTOR_COMPONENTS)
            names = _component_names(key, vec_len[key])
            for i in range(n):
                data = []
                for rec in records:
                    v = (rec.get("variations") or {}).get(key)
                    data.append(_num(v[i], VALUE_FORMAT) if isinstance(v, list) and len(v) > i else "null")
                columns.append({"key": f"{key}.{names[i]}", "kind": "num", "data": "[" + ",".join(data) + "]"})
        else:
            cats: dict[str, int] = {}
            codes = []
            for rec in records:
                v = (rec.get("variations") or {}).get(key)
                if v is None:
                    codes.append("-1")
                    continue
                s = v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
                codes.append(str(cats.setdefault(s, len(cats))))
            columns.append({"key": key, "kind": "cat", "cats": list(cats), "data": "[" + ",".join(codes) + "]"})
    return columns


def episode_data_json(runs: list[Any]) -> str:
    """The episode table as compact columnar JSON (rows sorted by Run, then episode).

    Layout: runs (names), counts (rows per Run), ep (episode index deltas within each Run, so a contiguous
    Run is a list of 1s), st (one character per row: s/f/e), len, dur, vars (columns, values to 3
    significant digits), video and err (sparse [row, value] pairs), att (sparse [row, attempt] pairs where
    attempt != 1). Seeds and exact values stay in the Runs' episode_results.jsonl.
    """
    names, counts, ep, st, ln, dur = [], [], [], [], [], []
    video, err, att = [], [], []
    all_records: list[dict[str, Any]] = []
    row = 0
    code = {"success": "s", "failure": "f"}
    for run in runs:
        names.append(run.name)
        counts.append(str(len(run.records)))
        prev = -1
        for rec in run.records:
            e = int(rec.get("episode", rec.get("env_id", 0)))
            ep.append(str(e - prev))
            prev = e
            st.append(code.get(rec.get("status"), "e"))
            ln.append(_num(rec.get("episode_length")))
            d = rec.get("duration_s")
            dur.append(_num(d, VALUE_FORMAT))
            v = rec.get("video")
            if isinstance(v, dict) and v:
                video.append([row, {str(cam): f"{run.name}/{path}" for cam, path in v.items()}])
            if rec.get("error"):
                err.append([row, str(rec["error"])[:MAX_ERROR_CHARS]])
            a = rec.get("attempt")
            if isinstance(a, int) and a != 1:
                att.append([row, a])
            row += 1
        all_records.extend(run.records)
    var_cols = _variation_columns(all_records)
    var_json = ",".join(
        "{" + f'"key":{json.dumps(c["key"])},"kind":"{c["kind"]}",'
        + (f'"cats":{json.dumps(c["cats"])},' if c["kind"] == "cat" else "")
        + f'"data":{c["data"]}' + "}"
        for c in var_cols
    )
    dumps = json.dumps
    return (
        "{"
        f'"runs":{dumps(names)},"counts":[{",".join(counts)}],"ep":[{",".join(ep)}],'
        f'"st":"{"".join(st)}","len":[{",".join(ln)}],"dur":[{",".join(dur)}],'
        f'"vars":[{var_json}],"video":{dumps(video, separators=(",", ":"))},'
        f'"err":{dumps(err, separators=(",", ":"))},"att":{dumps(att, separators=(",", ":"))}'
        "}"
    )


def _script_safe(text: str) -> str:
    # Inside <script>, "<" only appears in JSON strings, where \u003c is the same character.
    return text.replace("<", "\\u003c")


# --- the page --------------------------------------------------------------------------------------------

def render_report(result: dict[str, Any], runs: list[Any], *, plots: Iterable[str] = (),
                  title: str | None = None) -> str:
    """index.html's text for a collected result and its Runs (objects with .name and .records)."""
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
        "__SUMMARY__": _summary_table(result) + _skipped_section(result) + _progress_section(runs),
        "__MATRIX__": _matrix_table(result),
        "__DECISIONS__": failures_section(result) + decisions_section(result) + ranking_section(result),
        "__PLOTS__": _plots_section(plots) + timings_section(result),
        "__META__": _script_safe(json.dumps(meta)),
        "__EPISODES__": _script_safe(episode_data_json(runs)),
        "/*__JS__*/": _asset("report.js"),
    }
    # One pass, so text inserted for one placeholder is never scanned for another.
    pattern = re.compile("|".join(re.escape(k) for k in replacements))
    return pattern.sub(lambda m: replacements[m.group(0)], page)
