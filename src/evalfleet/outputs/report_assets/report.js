/* evalfleet report: the per-episode table (filters, sorting, pages, inline videos).
   Data: the columnar JSON in #episode-data (see evalfleet.outputs.report.episode_data_json). No network. */
(function () {
  "use strict";
  var PAGE_SIZE = 100;
  var STATUS_NAMES = { s: "success", f: "failure", e: "error" };
  var D = JSON.parse(document.getElementById("episode-data").textContent);

  // ---- decode columns -------------------------------------------------------------------------------
  var n = D.st.length;
  var runIdx = new Uint16Array(n), ep = new Int32Array(n);
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
  var lenCol = numCol(D.len), durCol = numCol(D.dur);
  var videos = new Map(), errors = new Map(), attempts = new Map();
  D.video.forEach(function (p) { videos.set(p[0], p[1]); });
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
  var vars = D.vars.map(function (v) {
    if (v.kind === "num") return { key: v.key, kind: "num", col: numCol(v.data), digits: decimalsOf(v.data) };
    return { key: v.key, kind: "cat", cats: v.cats, col: Int32Array.from(v.data) };
  });

  // ---- columns of the table -----------------------------------------------------------------------------
  function fmtNum(x, digits) {
    if (isNaN(x)) return "";
    if (digits === undefined) return String(x);
    return x.toFixed(digits);
  }
  var columns = [
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
  columns.push({ name: "Error", key: "error", value: function (i) { return errors.get(i) || ""; }, text: function (i) { return errors.get(i) || ""; }, cls: "err" });

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

  // ---- state ------------------------------------------------------------------------------------------
  var state = { run: "", statuses: { s: true, f: true, e: true }, video: false, ranges: {}, cats: {},
                sortCol: -1, sortDir: 1, page: 0 };
  var visible = new Uint32Array(0), visibleCount = 0;
  var openPlayers = new Set();

  // ---- filter controls ---------------------------------------------------------------------------------
  var runSelect = document.getElementById("f-run");
  D.runs.forEach(function (name, r) {
    var o = document.createElement("option");
    o.value = String(r); o.textContent = name + " (" + D.counts[r] + ")";
    runSelect.appendChild(o);
  });
  var varBox = document.getElementById("filter-vars");
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
  runSelect.addEventListener("change", function () { state.run = runSelect.value; refilter(); });
  Array.prototype.forEach.call(document.querySelectorAll(".f-status"), function (cb) {
    cb.addEventListener("change", function () { state.statuses[cb.value] = cb.checked; refilter(); });
  });
  document.getElementById("f-video").addEventListener("change", function (e) { state.video = e.target.checked; refilter(); });
  document.getElementById("f-reset").addEventListener("click", function () {
    document.getElementById("filters").reset();
    state.run = ""; state.statuses = { s: true, f: true, e: true }; state.video = false; state.ranges = {}; state.cats = {};
    refilter();
  });

  // ---- filtering, sorting, paging -------------------------------------------------------------------------
  var varByKey = {};
  vars.forEach(function (v) { varByKey[v.key] = v; });
  function refilter() {
    var runF = state.run === "" ? -1 : Number(state.run);
    var ranges = Object.keys(state.ranges).map(function (k) { return [varByKey[k].col, state.ranges[k].min, state.ranges[k].max]; });
    var cats = Object.keys(state.cats).map(function (k) { return [varByKey[k].col, state.cats[k]]; });
    var sts = state.statuses, wantVideo = state.video;
    var out = new Uint32Array(n), m = 0;
    outer: for (var i = 0; i < n; i++) {
      if (runF >= 0 && runIdx[i] !== runF) continue;
      if (!sts[D.st[i]]) continue;
      if (wantVideo && !videos.has(i)) continue;
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
  thead.innerHTML = "<tr>" + columns.map(function (c, j) {
    return '<th data-col="' + j + '" data-key="' + esc(c.key) + '">' + esc(c.name) + "</th>"; }).join("") + "</tr>";
  thead.addEventListener("click", function (e) {
    var th = e.target.closest("th");
    if (!th) return;
    var j = Number(th.getAttribute("data-col"));
    if (state.sortCol === j) state.sortDir = -state.sortDir; else { state.sortCol = j; state.sortDir = 1; }
    Array.prototype.forEach.call(thead.querySelectorAll("th"), function (h) { h.className = ""; });
    th.className = state.sortDir > 0 ? "sorted-asc" : "sorted-desc";
    resort();
  });
  document.getElementById("prev").addEventListener("click", function () { if (state.page > 0) { state.page--; render(); } });
  document.getElementById("next").addEventListener("click", function () {
    if ((state.page + 1) * PAGE_SIZE < visibleCount) { state.page++; render(); } });
  tbody.addEventListener("click", function (e) {
    var btn = e.target.closest("button.play");
    if (!btn) return;
    var i = Number(btn.getAttribute("data-row"));
    if (openPlayers.has(i)) openPlayers.delete(i); else openPlayers.add(i);
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
      if (openPlayers.has(i) && videos.has(i)) {
        var v = videos.get(i);
        html.push('<tr class="player"><td colspan="' + columns.length + '">' + Object.keys(v).map(function (cam) {
          return '<video controls preload="metadata" src="' + esc(encodePath(v[cam])) + '" title="' + esc(cam) + '"></video>';
        }).join("") + "</td></tr>");
      }
    }
    tbody.innerHTML = html.join("");
    document.getElementById("count").textContent = visibleCount + " of " + n + " episodes";
    document.getElementById("page").textContent = "page " + (state.page + 1) + " of " + pages;
    document.getElementById("prev").disabled = state.page === 0;
    document.getElementById("next").disabled = end >= visibleCount;
    document.body.setAttribute("data-ready", "1");
  }

  refilter();
})();
