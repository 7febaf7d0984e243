/* evalfleet report: the per-episode table (filters, sorting, pages, inline videos, recorded episodes' plots).
   Data: #episode-data is the manifest of the Runs' tables (evalfleet.outputs.report_episodes.episode_manifest);
   each Run's table is a script beside the page (report_episodes/NNNN.js, run_episode_json's columns), added
   when the user opens that Run (every Run at once for a small Experiment): a <script src>, which works from
   disk (file://, where fetch() is refused) and from a bucket alike. A recorded episode's plot data is one more
   such script (report_episodes/trajectories/NNNN-EEEEEE.js, report_trajectories.plot_json), added when the user
   asks for its plot, drawn as inline SVG. No network beyond the page's own folder. */
(function () {
  "use strict";
  var PAGE_SIZE = 100;
  var STATUS_NAMES = { s: "success", f: "failure", e: "error" };
  var M = JSON.parse(document.getElementById("episode-data").textContent);
  var store = window.__evalfleet_episodes = window.__evalfleet_episodes || {};
  var plotStore = window.__evalfleet_trajectories = window.__evalfleet_trajectories || {};
  var loaded = {}, loading = {};  // Run index -> its table / the callbacks waiting for it
  var plotState = {};  // a plot script's path -> "loading" | "loaded" | "failed"
  var D, n, runIdx, ep, lenCol, durCol, videos, errors, attempts, trajs, vars, varByKey, columns;

  function loadRun(r, done) {
    if (loaded[r] || !M.files[r]) { done(); return; }
    if (loading[r]) { loading[r].push(done); return; }
    loading[r] = [done];
    var s = document.createElement("script");
    s.src = M.files[r];
    s.onload = s.onerror = function () {
      var t = store[r];
      if (t && t.run === M.runs[r]) loaded[r] = t;
      else document.getElementById("load-error").textContent = "could not load the episodes of " + M.runs[r] +
        " (" + M.files[r] + "); run evalfleet report again";
      var waiting = loading[r]; delete loading[r];
      waiting.forEach(function (f) { f(); });
    };
    document.head.appendChild(s);
  }
  function loadRuns(list, done) {  // done(true) when a table arrived that the page did not have
    list = list.filter(function (r) { return !loaded[r] && M.files[r]; });
    var left = list.length;
    if (!left) { done(false); return; }
    list.forEach(function (r) { loadRun(r, function () { if (--left === 0) done(true); }); });
  }
  function allRuns() { return M.runs.map(function (_, r) { return r; }); }

  // The loaded Runs' tables as one: rows by Run (the report's order), then episode; row numbers global.
  function combine() {
    var out = { runs: M.runs, counts: [], ep: [], st: "", len: [], dur: [], vars: [], video: [], err: [], att: [],
                traj: [] };
    var byKey = {}, row = 0, parts = [];
    M.runs.forEach(function (name, r) {
      var t = loaded[r];
      out.counts.push(t ? t.count : 0);
      if (!t) return;
      parts.push(t.st);
      Array.prototype.push.apply(out.ep, t.ep);
      Array.prototype.push.apply(out.len, t.len);
      Array.prototype.push.apply(out.dur, t.dur);
      t.video.forEach(function (p) { out.video.push([p[0] + row, p[1]]); });
      t.err.forEach(function (p) { out.err.push([p[0] + row, p[1]]); });
      t.att.forEach(function (p) { out.att.push([p[0] + row, p[1]]); });
      (t.traj || []).forEach(function (p) { out.traj.push([p[0] + row, p[1]]); });
      t.vars.forEach(function (v) {
        var c = byKey[v.key];
        if (!c) { c = byKey[v.key] = { key: v.key, kind: v.kind, cats: [], catIndex: {}, parts: [] }; }
        else if (c.kind !== v.kind) c.kind = "cat";
        c.parts.push([row, t.count, v]);
      });
      row += t.count;
    });
    out.st = parts.join("");
    Object.keys(byKey).sort().forEach(function (key) {
      var c = byKey[key], data = new Array(row);
      for (var i = 0; i < row; i++) data[i] = c.kind === "cat" ? -1 : null;
      c.parts.forEach(function (p) {
        var start = p[0], count = p[1], v = p[2];
        for (var k = 0; k < count; k++) {
          var x = v.data[k];
          if (c.kind !== "cat") { data[start + k] = x; continue; }
          var s = v.kind === "cat" ? (x < 0 ? null : v.cats[x]) : (x === null ? null : String(x));
          if (s === null) continue;
          if (!(s in c.catIndex)) { c.catIndex[s] = c.cats.length; c.cats.push(s); }
          data[start + k] = c.catIndex[s];
        }
      });
      out.vars.push(c.kind === "cat" ? { key: key, kind: "cat", cats: c.cats, data: data } :
        { key: key, kind: "num", data: data });
    });
    return out;
  }

  function setup() {
  D = combine();
  // ---- decode columns -------------------------------------------------------------------------------
  n = D.st.length;
  runIdx = new Uint16Array(n); ep = new Int32Array(n);
  var row = 0;
  for (var r = 0; r < D.runs.length; r++) {
    var prev = -1;
    for (var k = 0; k < D.counts[r]; k++, row++) {
      runIdx[row] = r;
      prev += D.ep[row];
      ep[row] = prev;
    }
  }
  function numCol(arr) {
    var out = new Float64Array(n);
    for (var i = 0; i < n; i++) out[i] = arr[i] === null || arr[i] === undefined ? NaN : arr[i];
    return out;
  }
  lenCol = numCol(D.len); durCol = numCol(D.dur);
  videos = new Map(); errors = new Map(); attempts = new Map(); trajs = new Map();
  D.video.forEach(function (p) { videos.set(p[0], p[1]); });
  D.traj.forEach(function (p) { trajs.set(p[0], p[1]); });
  D.err.forEach(function (p) { errors.set(p[0], p[1]); });
  D.att.forEach(function (p) { attempts.set(p[0], p[1]); });
  // A column's values all get the decimals of its most precise value (as written, 3 significant digits),
  // so 0.5 shows as 0.500 beside 0.236.
  function decimalsOf(data) {
    var most = 0;
    data.forEach(function (x) {
      if (x === null || !isFinite(x)) return;
      var s = String(x);
      if (s.indexOf("e") >= 0) { most = Math.max(most, 6); return; }
      var dot = s.indexOf(".");
      if (dot >= 0) most = Math.max(most, s.length - dot - 1);
    });
    return Math.min(most, 6);
  }
  vars = D.vars.map(function (v) {
    if (v.kind === "num") return { key: v.key, kind: "num", col: numCol(v.data), digits: decimalsOf(v.data) };
    return { key: v.key, kind: "cat", cats: v.cats, col: Int32Array.from(v.data) };
  });

  // ---- columns of the table -----------------------------------------------------------------------------
  function fmtNum(x, digits) {
    if (isNaN(x)) return "";
    if (digits === undefined) return String(x);
    return x.toFixed(digits);
  }
  columns = [
    { name: "Run", key: "run", value: function (i) { return runIdx[i]; }, text: function (i) { return D.runs[runIdx[i]]; } },
    { name: "Episode", key: "episode", value: function (i) { return ep[i]; }, text: function (i) { return String(ep[i]); }, num: true },
    { name: "Status", key: "status", value: function (i) { return D.st.charCodeAt(i); }, html: function (i) {
        var s = STATUS_NAMES[D.st[i]]; return '<span class="badge ' + s + '">' + s + "</span>"; } },
    { name: "Length", key: "length", value: function (i) { return lenCol[i]; }, text: function (i) { return fmtNum(lenCol[i]); }, num: true },
    { name: "Duration s", key: "duration", value: function (i) { return durCol[i]; }, text: function (i) { return fmtNum(durCol[i], 2); }, num: true }
  ];
  vars.forEach(function (v) {
    if (v.kind === "num") {
      columns.push({ name: v.key, key: "var:" + v.key, value: function (i) { return v.col[i]; },
                     text: function (i) { return fmtNum(v.col[i], v.digits); }, num: true });
    } else {
      columns.push({ name: v.key, key: "var:" + v.key, value: function (i) { return v.col[i] < 0 ? "" : v.cats[v.col[i]]; },
                     text: function (i) { return v.col[i] < 0 ? "" : v.cats[v.col[i]]; } });
    }
  });
  columns.push({ name: "Attempt", key: "attempt", value: function (i) { return attempts.get(i) || 1; },
                 text: function (i) { return String(attempts.get(i) || 1); }, num: true });
  columns.push({ name: "Video", key: "video", value: function (i) { return videos.has(i) ? 1 : 0; }, html: videoCell });
  columns.push({ name: "Trajectory", key: "trajectory", value: function (i) { return trajs.has(i) ? 1 : 0; },
                 html: trajectoryCell });
  columns.push({ name: "Error", key: "error", value: function (i) { return errors.get(i) || ""; }, text: function (i) { return errors.get(i) || ""; }, cls: "err" });
  varByKey = {};
  vars.forEach(function (v) { varByKey[v.key] = v; });
  varFilters();
  header();
  }

  function esc(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }
  function videoCell(i) {
    var v = videos.get(i);
    if (!v) return "";
    return Object.keys(v).map(function (cam) {
      return '<a href="' + esc(encodePath(v[cam])) + '" target="_blank" rel="noopener">' + esc(cam) + "</a>";
    }).join(" ") + ' <button type="button" class="play" data-row="' + i + '">▶ play</button>';
  }
  function encodePath(p) { return p.split("/").map(encodeURIComponent).join("/"); }
  function trajVideos(i) { var t = trajs.get(i); return t && t.videos ? t.videos : null; }
  function trajectoryCell(i) {  // the Parquet file, its camera videos, and its plot where it has one
    var t = trajs.get(i);
    if (!t) return "";
    var parts = ['<a class="frames" href="' + esc(encodePath(t.frames)) + '" download>frames</a>'];
    var v = trajVideos(i);
    if (v) {
      Object.keys(v).forEach(function (cam) {
        parts.push('<a class="camera" href="' + esc(encodePath(v[cam])) + '" target="_blank" rel="noopener">' +
                   esc(cam) + "</a>");
      });
      parts.push('<button type="button" class="play-traj" data-row="' + i + '">▶ play</button>');
    }
    if (t.plot) parts.push('<button type="button" class="plot" data-row="' + i + '">plot</button>');
    return parts.join(" ");
  }

  // ---- state ------------------------------------------------------------------------------------------
  var state = { run: "", statuses: { s: true, f: true, e: true }, video: false, traj: false, ranges: {}, cats: {},
                sortCol: -1, sortKey: null, sortDir: 1, page: 0 };
  var visible = new Uint32Array(0), visibleCount = 0;
  var openPlayers = new Set(), openTrajPlayers = new Set(), openPlots = new Set();

  // ---- filter controls ---------------------------------------------------------------------------------
  var runSelect = document.getElementById("f-run");
  M.runs.forEach(function (name, r) {
    var o = document.createElement("option");
    o.value = String(r); o.textContent = name + " (" + M.counts[r] + ")";
    runSelect.appendChild(o);
  });
  var varBox = document.getElementById("filter-vars");
  function varFilters() {
  varBox.innerHTML = "";  // another Run's table arrived: the variation filters start afresh
  state.ranges = {}; state.cats = {};
  vars.forEach(function (v) {
    var box = document.createElement("span");
    box.className = "varfilter";
    box.setAttribute("data-key", v.key);
    var label = '<span class="k">' + esc(v.key) + "</span>";
    if (v.kind === "num") {
      var lo = Infinity, hi = -Infinity;
      for (var i = 0; i < n; i++) { var x = v.col[i]; if (!isNaN(x)) { if (x < lo) lo = x; if (x > hi) hi = x; } }
      var ph = isFinite(lo) ? [String(lo), String(hi)] : ["", ""];
      box.innerHTML = label + '<input type="number" step="any" class="f-min" placeholder="min ' + esc(ph[0]) +
        '" aria-label="' + esc(v.key) + ' min"> – <input type="number" step="any" class="f-max" placeholder="max ' +
        esc(ph[1]) + '" aria-label="' + esc(v.key) + ' max">';
      box.querySelector(".f-min").addEventListener("input", onRange);
      box.querySelector(".f-max").addEventListener("input", onRange);
    } else {
      box.innerHTML = label + '<select class="f-cat"><option value="">any</option>' + v.cats.map(function (c, j) {
        return '<option value="' + j + '">' + esc(c) + "</option>"; }).join("") + "</select>";
      box.querySelector(".f-cat").addEventListener("change", function (e) {
        if (e.target.value === "") delete state.cats[v.key]; else state.cats[v.key] = Number(e.target.value);
        refilter();
      });
    }
    varBox.appendChild(box);
    function onRange() {
      var mn = box.querySelector(".f-min").value, mx = box.querySelector(".f-max").value;
      var range = { min: mn === "" ? -Infinity : Number(mn), max: mx === "" ? Infinity : Number(mx) };
      if (range.min === -Infinity && range.max === Infinity) delete state.ranges[v.key]; else state.ranges[v.key] = range;
      refilter();
    }
  });
  }
  function openRun(value) {
    state.run = value;
    var want = value === "" ? (M.auto ? allRuns() : []) : [Number(value)];
    loadRuns(want, function (fresh) { if (fresh || !columns) setup(); refilter(); });
  }
  runSelect.addEventListener("change", function () { openRun(runSelect.value); });
  Array.prototype.forEach.call(document.querySelectorAll(".f-status"), function (cb) {
    cb.addEventListener("change", function () { state.statuses[cb.value] = cb.checked; refilter(); });
  });
  document.getElementById("f-video").addEventListener("change", function (e) { state.video = e.target.checked; refilter(); });
  document.getElementById("f-traj").addEventListener("change", function (e) { state.traj = e.target.checked; refilter(); });
  document.getElementById("f-reset").addEventListener("click", function () {
    document.getElementById("filters").reset();
    state.run = ""; state.statuses = { s: true, f: true, e: true }; state.video = false; state.traj = false;
    state.ranges = {}; state.cats = {};
    refilter();
  });

  // ---- filtering, sorting, paging -------------------------------------------------------------------------
  function refilter() {
    var runF = state.run === "" ? -1 : Number(state.run);
    var ranges = Object.keys(state.ranges).map(function (k) { return [varByKey[k].col, state.ranges[k].min, state.ranges[k].max]; });
    var cats = Object.keys(state.cats).map(function (k) { return [varByKey[k].col, state.cats[k]]; });
    var sts = state.statuses, wantVideo = state.video, wantTraj = state.traj;
    var out = new Uint32Array(n), m = 0;
    outer: for (var i = 0; i < n; i++) {
      if (runF >= 0 && runIdx[i] !== runF) continue;
      if (!sts[D.st[i]]) continue;
      if (wantVideo && !videos.has(i) && !trajVideos(i)) continue;
      if (wantTraj && !trajs.has(i)) continue;
      for (var a = 0; a < ranges.length; a++) {
        var x = ranges[a][0][i];
        if (isNaN(x) || x < ranges[a][1] || x > ranges[a][2]) continue outer;
      }
      for (var b = 0; b < cats.length; b++) if (cats[b][0][i] !== cats[b][1]) continue outer;
      out[m++] = i;
    }
    visible = out; visibleCount = m;
    resort();
  }
  function resort() {
    var view = visible.subarray(0, visibleCount);
    if (state.sortCol >= 0) {
      var col = columns[state.sortCol], dir = state.sortDir, keys = new Array(n);
      for (var j = 0; j < visibleCount; j++) keys[view[j]] = col.value(view[j]);
      var arr = Array.from(view);
      arr.sort(function (a, b) {
        var x = keys[a], y = keys[b];
        var xn = typeof x === "number" && isNaN(x), yn = typeof y === "number" && isNaN(y);
        if (xn || yn) return xn === yn ? a - b : (xn ? 1 : -1);  // blanks last either way
        if (x < y) return -dir;
        if (x > y) return dir;
        return a - b;
      });
      view.set(arr);
    }
    state.page = 0;
    render();
  }

  var thead = document.querySelector("#episodes thead"), tbody = document.querySelector("#episodes tbody");
  function header() {  // the sorted column found again by its key (new variation columns move the others)
  state.sortCol = -1;
  columns.forEach(function (c, j) { if (c.key === state.sortKey) state.sortCol = j; });
  thead.innerHTML = "<tr>" + columns.map(function (c, j) {
    var cls = j === state.sortCol ? ' class="' + (state.sortDir > 0 ? "sorted-asc" : "sorted-desc") + '"' : "";
    return '<th data-col="' + j + '" data-key="' + esc(c.key) + '"' + cls + ">" + esc(c.name) + "</th>"; }).join("") + "</tr>";
  }
  thead.addEventListener("click", function (e) {
    var th = e.target.closest("th");
    if (!th) return;
    var j = Number(th.getAttribute("data-col"));
    if (state.sortCol === j) state.sortDir = -state.sortDir; else { state.sortCol = j; state.sortDir = 1; }
    state.sortKey = columns[j].key;
    Array.prototype.forEach.call(thead.querySelectorAll("th"), function (h) { h.className = ""; });
    th.className = state.sortDir > 0 ? "sorted-asc" : "sorted-desc";
    resort();
  });
  document.getElementById("prev").addEventListener("click", function () { if (state.page > 0) { state.page--; render(); } });
  document.getElementById("next").addEventListener("click", function () {
    if ((state.page + 1) * PAGE_SIZE < visibleCount) { state.page++; render(); } });
  tbody.addEventListener("click", function (e) {
    var btn = e.target.closest("button.play, button.play-traj, button.plot");
    if (!btn) return;
    var i = Number(btn.getAttribute("data-row"));
    var open = btn.classList.contains("play") ? openPlayers : btn.classList.contains("play-traj") ? openTrajPlayers
      : openPlots;
    if (open.has(i)) open.delete(i); else open.add(i);
    if (open === openPlots && open.has(i)) loadPlot(trajs.get(i).plot);
    render();
  });

  function render() {
    var pages = Math.max(1, Math.ceil(visibleCount / PAGE_SIZE));
    var start = state.page * PAGE_SIZE, end = Math.min(visibleCount, start + PAGE_SIZE);
    var html = [];
    for (var j = start; j < end; j++) {
      var i = visible[j];
      html.push('<tr data-row="' + i + '" data-status="' + STATUS_NAMES[D.st[i]] + '">');
      for (var c = 0; c < columns.length; c++) {
        var col = columns[c];
        var cls = col.num ? ' class="num"' : col.cls ? ' class="' + col.cls + '"' : "";
        html.push("<td" + cls + ">" + (col.html ? col.html(i) : esc(col.text(i))) + "</td>");
      }
      html.push("</tr>");
      if (openPlayers.has(i) && videos.has(i)) html.push(playerRow(videos.get(i), "player"));
      if (openTrajPlayers.has(i) && trajVideos(i)) html.push(playerRow(trajVideos(i), "player traj-player"));
      if (openPlots.has(i) && trajs.has(i) && trajs.get(i).plot) {
        html.push('<tr class="plot-row"><td colspan="' + columns.length + '"><div class="trajectory-plot" data-row="' +
                  i + '"></div></td></tr>');
      }
    }
    tbody.innerHTML = html.join("");
    Array.prototype.forEach.call(tbody.querySelectorAll("div.trajectory-plot"), function (box) {
      fillPlot(box, trajs.get(Number(box.getAttribute("data-row"))).plot);
    });
    var total = M.total, shown = n;
    document.getElementById("count").textContent = visibleCount + " of " + shown + " episodes" +
      (shown < total ? " loaded (" + total + " in all: choose a Run to load its episodes)" : "");
    document.getElementById("page").textContent = "page " + (state.page + 1) + " of " + pages;
    document.getElementById("prev").disabled = state.page === 0;
    document.getElementById("next").disabled = end >= visibleCount;
    if (!document.body.hasAttribute("data-ready") && window.performance && performance.mark) {
      performance.mark("evalfleet-ready");  // the summary and first table drawn: bench/collect.py --paint reads it
    }
    document.body.setAttribute("data-ready", "1");
  }

  function playerRow(v, cls) {
    return '<tr class="' + cls + '"><td colspan="' + columns.length + '">' + Object.keys(v).map(function (cam) {
      return '<video controls preload="metadata" src="' + esc(encodePath(v[cam])) + '" title="' + esc(cam) + '"></video>';
    }).join("") + "</td></tr>";
  }

  // ---- a recorded episode's plot -------------------------------------------------------------------------
  function loadPlot(path) {
    if (plotState[path] === "loading" || plotState[path] === "loaded") return;
    plotState[path] = "loading";
    var s = document.createElement("script");
    s.src = encodePath(path);
    s.onload = s.onerror = function () {
      var d = plotStore[path];
      plotState[path] = d && typeof d === "object" && Array.isArray(d.x) ? "loaded" : "failed";
      Array.prototype.forEach.call(tbody.querySelectorAll("div.trajectory-plot"), function (box) {
        var i = Number(box.getAttribute("data-row"));
        if (trajs.get(i).plot === path) fillPlot(box, path);
      });
    };
    document.head.appendChild(s);
  }
  function fillPlot(box, path) {
    box.textContent = "";
    if (plotState[path] === "loaded") { drawPlot(box, plotStore[path]); return; }
    var p = document.createElement("p");
    p.className = "note";
    p.textContent = plotState[path] === "failed" ? "could not load the plot data (" + path +
      "); run evalfleet report again" : "loading the plot…";
    box.appendChild(p);
  }

  var SVG = "http://www.w3.org/2000/svg";
  var PALETTE = ["#2f6fde", "#e8710a", "#8e44ad", "#16a085", "#c0392b", "#b7950b", "#d63384", "#5d6d7e"];
  function svgEl(name, attrs, parent) {
    var el = document.createElementNS(SVG, name);
    Object.keys(attrs).forEach(function (k) { el.setAttribute(k, String(attrs[k])); });
    if (parent) parent.appendChild(el);
    return el;
  }
  function svgText(parent, x, y, text, attrs) {
    var t = svgEl("text", Object.assign({ x: x, y: y }, attrs || {}), parent);
    t.textContent = text;  // text, never markup
    return t;
  }
  function niceTicks(lo, hi, count, minStep) {
    var span = hi - lo || 1, step = Math.pow(10, Math.floor(Math.log10(span / count)));
    [1, 2, 5, 10].some(function (m) { if (span / (step * m) <= count) { step *= m; return true; } return false; });
    step = Math.max(step, minStep || 0);
    var out = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Math.round(v / step) * step);
    return out;
  }
  function fmtTick(v) { return Math.abs(v) >= 1000 || Number.isInteger(v) ? String(v) : v.toPrecision(2).replace(/\.?0+$/, ""); }

  // Lines for the action dimensions and the progress score, shading where success held, a mark where done held,
  // and a marker at the last step saying whether the episode ended in success.
  function drawPlot(box, d) {
    var x = d.x, count = x.length, series = [];
    (Array.isArray(d.actions) ? d.actions : []).forEach(function (ys, k) {
      series.push({ name: (d.action === "applied_action" ? "applied action " : "action ") + k, kind: "action",
                    ys: ys, color: PALETTE[k % PALETTE.length], width: 1.4 });
    });
    if (Array.isArray(d.progress)) series.push({ name: "progress", kind: "progress", ys: d.progress, color: "#111",
                                                  width: 2.4 });
    var caption = document.createElement("div");
    caption.className = "plot-caption";
    caption.textContent = d.run + " · episode " + d.episode + (d.policy != null ? " · policy " + d.policy : "") +
      (d.task != null ? " · task " + d.task : "") + " · " + d.status + " · " + d.steps + " steps" +
      (count < d.steps ? " (" + count + " sampled steps shown; the frames file holds every one)" : "") +
      (d.dims > (d.actions || []).length ? " · first " + d.actions.length + " of " + d.dims + " action dimensions" : "");
    box.appendChild(caption);

    var W = 760, H = 300, L = 52, R = 16, T = 12, legendRows = Math.ceil((series.length + 2) / 6), B = 50 + 18 * legendRows;
    var lo = Infinity, hi = -Infinity;
    series.forEach(function (s) { s.ys.forEach(function (y) { if (y !== null && isFinite(y)) { lo = Math.min(lo, y); hi = Math.max(hi, y); } }); });
    if (d.progress) { lo = Math.min(lo, 0); hi = Math.max(hi, 1); }
    if (!isFinite(lo)) { lo = 0; hi = 1; }
    if (hi - lo < 1e-9) { lo -= 0.5; hi += 0.5; }
    var pad = (hi - lo) * 0.05; lo -= pad; hi += pad;
    var xmax = Math.max(d.steps - 1, 1);
    function sx(v) { return L + (W - L - R) * v / xmax; }
    function sy(v) { return T + (H - T - B) * (hi - v) / (hi - lo); }
    var svg = svgEl("svg", { class: "trajectory", width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img",
                             "data-steps": d.steps, "data-points": count });
    svgEl("title", {}, svg).textContent = caption.textContent;
    var bottom = H - B;

    // success: shaded from the previous point to each point where it held since then
    var spans = svgEl("g", { class: "success-spans" }, svg);
    if (typeof d.success === "string") {
      for (var k = 0; k < count; k++) {
        if (d.success[k] !== "1") continue;
        var x0 = k > 0 ? sx(x[k - 1]) : sx(x[k]) - 1.5, x1 = Math.max(sx(x[k]), x0 + 3);
        svgEl("rect", { class: "success-span", x: x0, y: T, width: x1 - x0, height: bottom - T, "data-step": x[k] }, spans);
      }
    }
    if (typeof d.done === "string") {
      var dones = svgEl("g", { class: "done-marks" }, svg);
      for (var j = 0; j < count; j++) {
        if (d.done[j] === "1") svgEl("line", { class: "done-mark", x1: sx(x[j]), x2: sx(x[j]), y1: T, y2: bottom, "data-step": x[j] }, dones);
      }
    }

    // axes: step numbers below, values on the left
    var axes = svgEl("g", { class: "axes" }, svg);
    svgEl("line", { x1: L, x2: W - R, y1: bottom, y2: bottom }, axes);
    svgEl("line", { x1: L, x2: L, y1: T, y2: bottom }, axes);
    niceTicks(0, xmax, 8, 1).forEach(function (v) {
      svgEl("line", { x1: sx(v), x2: sx(v), y1: bottom, y2: bottom + 4 }, axes);
      svgText(axes, sx(v), bottom + 16, String(v), { "text-anchor": "middle", class: "tick x-tick" });
    });
    niceTicks(lo, hi, 6).forEach(function (v) {
      svgEl("line", { class: "grid", x1: L, x2: W - R, y1: sy(v), y2: sy(v) }, axes);
      svgText(axes, L - 6, sy(v) + 4, fmtTick(v), { "text-anchor": "end", class: "tick y-tick" });
    });
    svgText(axes, W - R, bottom + 30, "step", { "text-anchor": "end", class: "axis-label" });

    // one line per series, broken where a value is missing
    series.forEach(function (s) {
      var g = svgEl("g", { class: "series", "data-name": s.name, "data-kind": s.kind }, svg), pts = [], drawn = 0;
      function flush() {
        if (pts.length) svgEl("polyline", { points: pts.join(" "), fill: "none", stroke: s.color, "stroke-width": s.width }, g);
        pts = [];
      }
      for (var k = 0; k < count; k++) {
        var y = s.ys[k];
        if (y === null || y === undefined || !isFinite(y)) { flush(); continue; }
        pts.push(sx(x[k]).toFixed(1) + "," + sy(y).toFixed(1));
        drawn++;
      }
      flush();
      g.setAttribute("data-points", String(drawn));
    });

    // the last step: did the episode end in success?
    if (typeof d.final_success === "boolean") {
      var fx = sx(x[count - 1]), fy = T + 8;
      svgEl("circle", { class: "final-success " + (d.final_success ? "yes" : "no"), cx: fx, cy: fy, r: 6,
                        "data-success": d.final_success ? "1" : "0", "data-step": x[count - 1] }, svg);
      svgText(svg, fx - 10, fy + 4, d.final_success ? "success" : "no success", { "text-anchor": "end", class: "final-label" });
    }

    // legend
    var legend = svgEl("g", { class: "legend" }, svg), items = series.map(function (s) { return [s.name, s.color, "line"]; });
    if (typeof d.success === "string") items.push(["success held", "", "span"]);
    if (typeof d.done === "string") items.push(["done", "", "done"]);
    items.forEach(function (it, k) {
      var lx = L + (k % 6) * 115, ly = H - 18 * legendRows + 18 * Math.floor(k / 6) - 4;
      if (it[2] === "line") svgEl("line", { x1: lx, x2: lx + 18, y1: ly - 4, y2: ly - 4, stroke: it[1], "stroke-width": 2.5 }, legend);
      else if (it[2] === "span") svgEl("rect", { class: "success-span", x: lx, y: ly - 10, width: 18, height: 12 }, legend);
      else svgEl("line", { class: "done-mark", x1: lx + 9, x2: lx + 9, y1: ly - 11, y2: ly + 2 }, legend);
      svgText(legend, lx + 23, ly, it[0], { class: "legend-label" });
    });
    box.appendChild(svg);
  }

  openRun("");
})();
