"""The live report's figures and page: what `FolderFollower` knows, as the JSON the page's script shows.

Per Run: its state, episodes done of planned, successes / failures / errors, the success rate so far with its
95% Wilson interval (`summary.success_rate` and `report.fmt_rate`, as in index.html), the time to the end at
the pace of the records so far, the records set aside, the newest videos, and the sequential stopping
decisions where the Experiment has stopping rules (`stopping_result.add_stopping`, as collect computes them).
"""

from __future__ import annotations

import html
import json
import time
from typing import Any
from urllib.parse import quote

from evalfleet.outputs.live_follow import FolderFollower, LiveRun
from evalfleet.outputs.report import fmt_rate
from evalfleet.outputs.stopping_result import add_stopping
from evalfleet.outputs.summary import success_rate


def format_eta(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    return f"{h}:{rem // 60:02d}:{rem % 60:02d}" if h else f"{rem // 60}:{rem % 60:02d}"


def run_state(run: LiveRun | None) -> str:
    if run is None:
        return "waiting"
    state = (run.status or {}).get("state")
    if isinstance(state, str) and state:
        return state
    return "running" if run.done else "waiting"


def eta_seconds(run: LiveRun | None) -> float | None:
    """Seconds left at the pace of this Run's records so far; None before two records or without a plan."""
    if run is None or run.planned is None or run.done < 2 or run.first_start is None or run.last_end is None:
        return None
    left = run.planned - run.done
    if left <= 0:
        return 0.0
    span = run.last_end - run.first_start
    return span / run.done * left if span > 0 else None


def run_view(name: str, run: LiveRun | None, planned: int | None) -> dict[str, Any]:
    counts = dict(run.counts) if run else {"success": 0, "failure": 0, "error": 0}
    decided = counts["success"] + counts["failure"]
    rate, ci = success_rate(counts["success"], decided)
    planned = run.planned if run and run.planned is not None else planned
    eta = eta_seconds(run)
    status = (run.status if run else None) or {}
    return {"run": name, "state": run_state(run), "reason": status.get("reason"),
            "done": run.done if run else 0, "planned": planned, "counts": counts, "decided": decided,
            "success_rate": rate, "ci95": ci, "rate_text": fmt_rate(rate, ci),
            "eta_s": eta, "eta_text": format_eta(eta),
            "set_aside": run.records.set_aside.total if run else 0,
            "videos": [{"episode": ep, "url": quote(f"{name}/{path}")}
                       for _ts, ep, video in sorted(run.videos if run else (), reverse=True)
                       for path in list(video.values())[:1] if isinstance(path, str)]}


def live_view(follower: FolderFollower) -> dict[str, Any]:
    """The page's JSON: every Run's figures, totals, the stopping decisions and whether the run is finished."""
    names = follower.run_names()
    runs = [run_view(name, follower.runs.get(name), follower.plan.get(name)) for name in names]
    done = sum(r["done"] for r in runs)
    planned = [r["planned"] for r in runs]
    total = sum(planned) if planned and all(p is not None for p in planned) else None
    etas = [r["eta_s"] for r in runs if r["eta_s"] is not None]
    decisions = stopping_decisions(follower, names)
    for r in runs:
        r["stopping"] = decisions.get("runs", {}).get(r["run"])
    return {"version": follower.version, "finished": follower.finished,
            "status": (follower.metadata or {}).get("status", "waiting"),
            "updated": time.strftime("%H:%M:%S"), "done": done, "planned": total,
            "eta_text": format_eta(max(etas) if etas else None), "runs": runs,
            "comparisons": decisions.get("comparisons", [])}


def stopping_decisions(follower: FolderFollower, names: list[str]) -> dict[str, Any]:
    """{"runs": {run: its stopping entry}, "comparisons": [...]} when the Experiment stops sequentially."""
    if not any(isinstance(r, dict) and r.get("stopping") for r in follower.named.values()):
        return {}
    result = add_stopping({"runs": {n: {} for n in names}}, follower.named, follower.records_of())
    return {"runs": {n: r.get("stopping") for n, r in result.get("runs", {}).items() if r.get("stopping")},
            "comparisons": result.get("comparisons", [])}


def live_page(title: str, view: dict[str, Any]) -> str:
    """The live page: the first view inline, then updates from /events (server-sent events), drawn in place."""
    return (PAGE.replace("__TITLE__", html.escape(title))
            .replace("__VIEW__", script_json(view)))


def script_json(value: Any) -> str:
    """JSON to place inside a <script> element: every `<` written as \\u003c, so no value (`</script>`, `<!--`,
    which would switch the HTML parser's script states and blank the page) can end or bend the element."""
    return json.dumps(value).replace("<", "\\u003c")


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__ (live)</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;margin:12px 0}th,td{border:1px solid #ccc;padding:4px 8px;text-align:left}
th{background:#f3f3f3}.failed{color:#b00}.completed{color:#070}video{width:200px;margin:4px}
#stale{color:#b60}
</style></head><body>
<h1>__TITLE__ <small>(live)</small></h1>
<p id="overall"></p><p id="stale"></p>
<table id="live"><thead><tr><th>Run</th><th>Status</th><th>Episodes</th><th>Success</th><th>Failure</th>
<th>Error</th><th>Success rate [95% CI]</th><th>ETA</th><th>Set aside</th><th>Stopping</th></tr></thead>
<tbody></tbody></table>
<div id="comparisons"></div><h2>Newest videos</h2><div id="videos"></div>
<script>
const token = new URLSearchParams(location.search).get("token");
const withToken = u => token ? u + (u.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(token) : u;
function cell(tr, text, cls) { const td = document.createElement("td"); td.textContent = text;
  if (cls) td.className = cls; tr.appendChild(td); return td; }
function draw(v) {
  document.getElementById("overall").textContent = "status " + v.status + " · " + v.done + " of "
    + (v.planned === null ? "?" : v.planned) + " episodes · ETA " + v.eta_text + " · updated " + v.updated;
  const body = document.querySelector("#live tbody"); body.textContent = "";
  const vids = document.getElementById("videos"); vids.textContent = "";
  for (const r of v.runs) {
    const tr = document.createElement("tr"); tr.dataset.run = r.run; tr.dataset.state = r.state;
    cell(tr, r.run); cell(tr, r.state + (r.reason ? ": " + r.reason : ""), r.state);
    cell(tr, r.done + " / " + (r.planned === null ? "?" : r.planned)).className = "episodes";
    cell(tr, r.counts.success).className = "success"; cell(tr, r.counts.failure); cell(tr, r.counts.error);
    cell(tr, r.rate_text).className = "rate"; cell(tr, r.eta_text); cell(tr, r.set_aside);
    const s = r.stopping; cell(tr, s ? (s.decided ? "stopped" : "continuing") + (s.verdict ? ": " + s.verdict : "")
      + (s.episodes !== undefined ? " at " + s.episodes : "") : "—");
    body.appendChild(tr);
    for (const vid of r.videos) { const el = document.createElement("video"); el.controls = true;
      el.src = withToken(vid.url); el.title = r.run + " episode " + vid.episode; vids.appendChild(el); }
  }
  const comp = document.getElementById("comparisons"); comp.textContent = "";
  for (const c of v.comparisons) { const p = document.createElement("p");
    p.textContent = "comparison " + JSON.stringify(c); comp.appendChild(p); }
  document.body.dataset.version = v.version;
  if (v.finished) location.reload();  // the run is collected: the served page is now its index.html
}
draw(__VIEW__);
const events = new EventSource(withToken("/events"));
events.onmessage = e => { document.getElementById("stale").textContent = ""; draw(JSON.parse(e.data)); };
events.onerror = () => { document.getElementById("stale").textContent = "connection lost; retrying"; };
</script></body></html>
"""
