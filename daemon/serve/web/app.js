/* app.js - the nightshift dashboard: the night's progress chart, the sweep's
 * analysis (val_bpb against wall-clock time, parallel coordinates, parameter
 * importance: sweep.js; the selection's loss curves overlaid), the running
 * slots, the leaderboard, the queue, an experiment page and a compare view.
 *
 * The scope and the selection (the ticked runs) live in the page's address,
 * #/?scope=<the scope's query>&sel=<ids>, so a view can be shared and a
 * reload restores it.
 *
 * Everything comes from the daemon's own API on the same origin; live updates
 * arrive over one Server-Sent Events stream (/v1/events/stream?status=1): a
 * status snapshot every second and an event whenever an experiment ends, on
 * which the lists are fetched again (once, debounced). The leaderboard and
 * the seed noise (/v1/noise) are one scope's (dataset, budget and evaluation:
 * val_bpb compares only within one): the daemon's default scope (its latest
 * result's) until another is picked in #scope, which lists the scopes the
 * daemon says have results; a configuration run with several seeds shows
 * its mean ± sd (n), and the noise draws a band.
 *
 * The first paint needs no request: the daemon inlines the answers the page
 * would fetch first into the page (<script id="snapshot">), and they are
 * drawn before anything is fetched.
 *
 * Text from the daemon is only ever set with textContent, never as HTML. */
(function () {
  "use strict";

  var TERMINAL_SKIP = { queued: 1, running: 1, cancelled: 1 };
  var EVENT_TYPES = ["experiment.finished", "queue.empty", "experiment.rejected"]; /* events.h */
  var state = {
    experiments: [],    /* every experiment, GET /v1/experiments */
    leaderboard: [],
    board: null,        /* the last /v1/leaderboard answer: its scope and every scope's */
    status: null,       /* the last status snapshot */
    noise: null,        /* /v1/noise's answer, when it has one */
    scope: null,        /* the picked scope's query, or null: the daemon's default */
    bestTest: null,     /* /v1/best's test figure of the best configuration */
    cache: {},          /* id -> full experiment (spec, metrics) */
    live: {},           /* running id -> {x: [], y: []} loss points */
    liveCharts: {},     /* running id -> uPlot */
    sort: { key: "val_bpb", dir: 1 },
    compare: [],        /* the selection: ticked ids (leaderboard or parallel coordinates) */
    specs: {},          /* id -> spec of a finished run (for the sweep) */
    sweepSig: null,     /* what the sweep's views were last drawn from */
    timeChart: null,
    overlayChart: null,
    overlaySig: null,
    chart: null,
    chartSig: null,     /* what the chart was last drawn from */
    detailChart: null,
    running: "",        /* running ids, to notice changes */
    queueDepth: -1,
    connected: null     /* null until the event stream opens or fails */
  };

  /* ------------------------------------------------------------- helpers */

  function $(id) { return document.getElementById(id); }

  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    if (attrs) {
      for (var k in attrs) {
        if (k === "text") e.textContent = attrs[k];
        else if (k === "cls") e.className = attrs[k];
        else e.setAttribute(k, attrs[k]);
      }
    }
    (children || []).forEach(function (c) { if (c) e.appendChild(c); });
    return e;
  }

  function token() { return sessionStorage.getItem("nightshift-token") || ""; }

  /* A POST is JSON (the daemon refuses any other type for what changes
   * state) and carries the token when the tab has one. */
  function api(path, opts) {
    opts = opts || {};
    var headers = {}, post = opts.method === "POST";
    if (post) headers["Content-Type"] = "application/json";
    if (post && token()) headers.Authorization = "Bearer " + token();
    return fetch(path, { method: opts.method || "GET", headers: headers, cache: "no-store",
                         body: post ? (opts.body || "") : undefined })
      .then(function (r) {
        var ct = r.headers.get("Content-Type") || "";
        var body = ct.indexOf("json") >= 0 ? r.json() : r.text();
        return body.then(function (b) { return { status: r.status, ok: r.ok, body: b }; });
      });
  }

  function fmt(v, digits) {
    if (v === null || v === undefined || v === "") return "";
    if (typeof v === "number") {
      if (digits !== undefined) return v.toFixed(digits);
      if (Number.isInteger(v)) return v.toLocaleString("en-US");
      return String(+v.toPrecision(6));
    }
    if (typeof v === "object") return JSON.stringify(v);
    return String(v);
  }

  function duration(s) {
    if (!isFinite(s) || s < 0) return "";
    s = Math.round(s);
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
    return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
  }

  function say(text, isError) {
    var m = $("msg");
    m.textContent = text;
    m.className = isError ? "error" : "";
    m.hidden = !text;
  }

  function errorText(r) {
    var e = r.body && r.body.error;
    return "HTTP " + r.status + (e ? " " + e.code + ": " + e.message : "");
  }

  /* Flatten a spec into {"model.depth": 4, ...}. */
  function flatten(o, prefix, out) {
    out = out || {};
    for (var k in o) {
      var p = prefix ? prefix + "." + k : k;
      if (o[k] && typeof o[k] === "object" && !Array.isArray(o[k])) flatten(o[k], p, out);
      else out[p] = o[k];
    }
    return out;
  }

  /* ["model.depth: 4 -> 6", ...]: what b changes relative to a. */
  function specDiff(a, b) {
    var fa = flatten(a || {}), fb = flatten(b || {}), out = [];
    var keys = Object.keys(fa).concat(Object.keys(fb).filter(function (k) { return !(k in fa); }));
    keys.forEach(function (k) {
      if (k === "name" || k === "parent" || k === "tags") return;
      var va = JSON.stringify(fa[k]), vb = JSON.stringify(fb[k]);
      if (va !== vb) out.push(k + ": " + (va === undefined ? "-" : va) + " -> " + (vb === undefined ? "-" : vb));
    });
    return out;
  }

  function experiment(id) {
    if (state.cache[id]) return Promise.resolve(state.cache[id]);
    return api("/v1/experiments/" + id).then(function (r) {
      if (!r.ok) throw new Error(errorText(r));
      if (r.body.status !== "running" && r.body.status !== "queued") state.cache[id] = r.body;
      return r.body;
    });
  }

  function width(node) { return Math.max(280, node.clientWidth || 600); }

  /* ----------------------------------------------------------- the chart */

  /* The chart, like the leaderboard, is the shown scope's: a best-so-far
   * line across datasets or evaluations would compare what does not. */
  function inShownScope(e) {
    var b = state.board;
    if (!b || typeof b.dataset !== "string") return true;
    return e.dataset === b.dataset && e.budget_kind === b.budget_kind && e.budget === b.budget &&
      e.eval_tokens === b.eval_tokens;
  }

  function finishedRuns() {
    return state.experiments
      .filter(function (e) { return !TERMINAL_SKIP[e.status] && inShownScope(e); })
      .sort(function (a, b) {
        return (a.finished || "").localeCompare(b.finished || "") || a.id - b.id;
      });
  }

  /* /v1/noise's pooled sd (null until two seeds of one configuration finished) */
  function noiseSd() {
    return state.noise && typeof state.noise.sd === "number" ? state.noise.sd : null;
  }

  function renderChart() {
    var runs = finishedRuns(), node = $("chart");
    node.setAttribute("data-points", String(runs.length));
    var xs = [], ok = [], best = [], bad = [], lo = [], hi = [];
    var b = null, top = null, sd = noiseSd();
    runs.forEach(function (e) { if (typeof e.val_bpb === "number") top = top === null ? e.val_bpb : Math.max(top, e.val_bpb); });
    runs.forEach(function (e, i) {
      var v = typeof e.val_bpb === "number" && e.status === "succeeded" ? e.val_bpb : null;
      if (v !== null && (b === null || v < b)) b = v;
      xs.push(i + 1);
      ok.push(v);
      best.push(b);
      bad.push(v === null ? (top === null ? 1 : top) : null);
      lo.push(sd !== null && b !== null ? b - sd : null);
      hi.push(sd !== null && b !== null ? b + sd : null);
    });
    var series = [
      { label: "run" },
      { label: "val_bpb", stroke: "#1b1b1b", fill: "#1b1b1b", paths: function () { return null; },
        points: { show: true, size: 7, width: 1, fill: "#1b1b1b" } },
      { label: "best so far", stroke: "#1f5fa8", width: 2, spanGaps: true,
        paths: uPlot.paths.stepped({ align: 1 }), points: { show: false } },
      { label: "failed / pruned", stroke: "#9b1c1c", paths: function () { return null; },
        points: { show: true, size: 9, width: 2, fill: "#ffffff",
                  space: 0 } }
    ];
    var data = [xs, ok, best, bad];
    var bands;
    if (sd !== null) {
      series.push({ label: "best + noise", stroke: "#888", dash: [4, 4], width: 1, spanGaps: true,
                    paths: uPlot.paths.stepped({ align: 1 }), points: { show: false } });
      series.push({ label: "best - noise", stroke: "#888", dash: [4, 4], width: 1, spanGaps: true,
                    paths: uPlot.paths.stepped({ align: 1 }), points: { show: false } });
      data.push(hi, lo);
      bands = [{ series: [4, 5], fill: "rgba(120,120,120,0.18)" }];
    }
    /* Polls and events call this often; rebuilding an unchanged chart would
     * drop the reader's hover and its tooltip, so only a change redraws. */
    var sig = JSON.stringify([runs.map(function (e) { return e.id; }), data, width(node)]);
    if (state.chart && state.chartSig === sig) return;
    state.chartSig = sig;
    if (state.chart) { state.chart.destroy(); state.chart = null; }
    node.textContent = "";
    if (!runs.length) {
      node.appendChild(el("p", { cls: "idle", text: "No run has finished yet." }));
      return;
    }
    var opts = {
      width: width(node), height: 280,
      series: series, bands: bands,
      scales: { x: { time: false, range: function (u, lo, hi) { return [0.5, hi + 0.5]; } } },
      axes: [{ label: "run (in the order they finished)", incrs: INT_INCRS,
               values: function (u, vals) { return vals.map(function (v) { return Number.isInteger(v) ? v : ""; }); } },
             { label: "val_bpb (lower is better)", size: 60 }],
      cursor: { points: { size: 10 } },
      hooks: { setCursor: [function (u) { showTip(u, runs); }] }
    };
    state.chart = new uPlot(opts, data, node);
  }

  var INT_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000];

  var tipFor = null;
  function showTip(u, runs) {
    var tip = $("tip"), i = u.cursor.idx;
    if (i === null || i === undefined || !runs[i]) { tip.hidden = true; tipFor = null; return; }
    var e = runs[i], rect = u.over.getBoundingClientRect();
    tip.style.left = Math.min(window.innerWidth - 380, rect.left + window.scrollX + u.cursor.left + 14) + "px";
    tip.style.top = (rect.top + window.scrollY + u.cursor.top + 14) + "px";
    tip.hidden = false;
    if (tipFor === e.id) return;
    tipFor = e.id;
    tip.textContent = "";
    tip.appendChild(el("b", { text: "#" + e.id + " " + (e.name || "(unnamed)") }));
    tip.appendChild(el("span", { text: e.status + (typeof e.val_bpb === "number" ? ", val_bpb " + e.val_bpb.toFixed(6) : "") +
                                 (e.reason ? " (" + e.reason + ")" : "") }));
    if (!e.parent) { tip.appendChild(el("div", { text: "no parent" })); return; }
    var list = el("ul");
    tip.appendChild(el("div", { text: "vs parent #" + e.parent + ":" }));
    tip.appendChild(list);
    Promise.all([experiment(e.id), experiment(e.parent)]).then(function (pair) {
      if (tipFor !== e.id) return;
      var d = specDiff(pair[1].spec, pair[0].spec);
      if (!d.length) d = ["(same spec)"];
      d.slice(0, 12).forEach(function (line) { list.appendChild(el("li", { text: line })); });
    }).catch(function () {});
  }

  /* ------------------------------------------------------- running slots */

  function renderSlots() {
    var box = $("slots"), st = state.status;
    if (!st) return;
    var slots = st.slots || [];
    var seen = {};
    box.textContent = "";
    slots.forEach(function (s) {
      var x = s.experiment, p = s.progress || {};
      var card = el("div", { cls: "slot", "data-slot": String(s.slot) });
      if (!x) {
        card.appendChild(el("span", { cls: "idle", text: "slot " + s.slot + ": idle" }));
        box.appendChild(card);
        return;
      }
      seen[x.id] = 1;
      var pct = typeof p.percent === "number" ? Math.max(0, Math.min(100, p.percent)) : 0;
      card.setAttribute("data-id", String(x.id));
      card.setAttribute("data-percent", pct.toFixed(2));
      var link = el("a", { href: "#/e/" + x.id, cls: "name", text: "#" + x.id + " " + (x.name || "(unnamed)") });
      var cancel = el("button", { type: "button", "data-cancel": String(x.id), text: "cancel" });
      cancel.addEventListener("click", function () { cancelRun(x.id); });
      card.appendChild(el("div", { cls: "slot-head" }, [
        el("span", { text: "slot " + s.slot }), link,
        el("span", { text: "step " + fmt(p.step) }),
        el("span", { text: "loss " + (typeof p.loss === "number" ? p.loss.toFixed(4) : "-") }),
        el("span", { cls: "hide-narrow", text: fmt(Math.round(p.tok_s || 0)) + " tok/s" }),
        el("span", { text: "ETA " + (duration(p.eta_s) || "-") }), cancel
      ]));
      var bar = el("div", { cls: "bar", role: "progressbar", "aria-valuemin": "0", "aria-valuemax": "100",
                            "aria-valuenow": pct.toFixed(0), "aria-label": "budget used" }, [
        el("span", { style: "width:" + pct.toFixed(1) + "%" }),
        el("em", { text: pct.toFixed(1) + "% of " + fmt(p.time_budget_s) + " s" })
      ]);
      card.appendChild(bar);
      var chart = el("div", { cls: "chart live" });
      card.appendChild(chart);
      box.appendChild(card);
      liveLoss(x.id, p, chart);
    });
    Object.keys(state.live).forEach(function (id) {
      if (!seen[id]) { delete state.live[id]; if (state.liveCharts[id]) state.liveCharts[id].destroy(); delete state.liveCharts[id]; }
    });
  }

  function liveLoss(id, p, node) {
    var pts = state.live[id];
    if (!pts) {
      pts = state.live[id] = { x: [], y: [], loading: true };
      api("/v1/experiments/" + id).then(function (r) {
        var m = (r.ok && r.body.metrics) || [];
        var x = [], y = [];
        m.forEach(function (row) { if (typeof row.loss === "number") { x.push(row.time_s); y.push(row.loss); } });
        /* live points that arrived meanwhile come after the stored ones */
        var last = x.length ? x[x.length - 1] : -1;
        pts.x.forEach(function (t, i) { if (t > last) { x.push(t); y.push(pts.y[i]); } });
        pts.x = x; pts.y = y; pts.loading = false;
        if (!$("home").hidden && state.status) renderSlots();
      });
    }
    if (typeof p.training_seconds === "number" && typeof p.loss === "number" &&
        (!pts.x.length || p.training_seconds > pts.x[pts.x.length - 1])) {
      pts.x.push(p.training_seconds);
      pts.y.push(p.loss);
    }
    if (state.liveCharts[id]) state.liveCharts[id].destroy();
    if (pts.x.length < 2) return;
    state.liveCharts[id] = new uPlot({
      width: width(node), height: 160, legend: { show: false },
      scales: { x: { time: false }, y: { distr: 3 } },
      axes: [{ label: "training s" }, { label: "loss (log)", size: 60 }],
      series: [{}, { label: "loss", stroke: "#1b1b1b", width: 1.5, points: { show: false } }]
    }, [pts.x.slice(), pts.y.slice()], node);
  }

  /* --------------------------------------------------------- leaderboard */

  var LB_COLS = [
    { key: "rank", label: "#", num: true, sort: false },
    { key: "id", label: "id", num: true },
    { key: "name", label: "name" },
    { key: "val_bpb", label: "val_bpb", num: true },
    { key: "params_total", label: "params", num: true },
    { key: "mfu_percent", label: "MFU %", num: true },
    { key: "tokens_per_second", label: "tok/s", num: true },
    { key: "slowdown", label: "slowdown", num: true, narrow: true },
    { key: "depth", label: "depth", num: true },
    { key: "n_embd", label: "width", num: true },
    { key: "n_head", label: "heads", num: true, narrow: true },
    { key: "n_kv_head", label: "kv", num: true, narrow: true },
    { key: "mlp", label: "mlp", narrow: true },
    { key: "window_pattern", label: "windows", narrow: true },
    { key: "ve_layers", label: "ve layers", narrow: true },
    { key: "seq_len", label: "seq", num: true, narrow: true },
    { key: "n_seeds", label: "seeds", num: true, narrow: true }
  ]; /* no dataset or budget column: every row is of the scope picked above it */

  /* A configuration run with several seeds shows its mean ± sd (n seeds). */
  function bpbText(r) {
    if (typeof r.val_bpb !== "number") return fmt(r.val_bpb);
    if (typeof r.n_seeds === "number" && r.n_seeds > 1)
      return r.val_bpb.toFixed(6) + " \u00b1 " +
        (typeof r.val_bpb_sd === "number" ? r.val_bpb_sd.toFixed(6) : "?") + " (n=" + r.n_seeds + ")";
    return r.val_bpb.toFixed(6);
  }

  function sortValue(r, key) {
    return r[key];
  }

  function renderLeaderboard() {
    var t = $("leaderboard"), head = t.tHead, body = t.tBodies[0];
    head.textContent = "";
    body.textContent = "";
    var tr = el("tr");
    tr.appendChild(el("th", { text: "cmp", title: "tick two to compare" }));
    LB_COLS.forEach(function (c) {
      var th = el("th", { text: c.label, cls: (c.num ? "num " : "") + (c.sort === false ? "" : "sortable") + (c.narrow ? " hide-narrow" : "") });
      if (c.sort !== false) {
        th.setAttribute("data-key", c.key);
        th.tabIndex = 0;
        if (state.sort.key === c.key) th.setAttribute("aria-sort", state.sort.dir > 0 ? "ascending" : "descending");
        var go = function () {
          state.sort = { key: c.key, dir: state.sort.key === c.key ? -state.sort.dir : 1 };
          renderLeaderboard();
        };
        th.addEventListener("click", go);
        th.addEventListener("keydown", function (ev) { if (ev.key === "Enter") go(); });
      }
      tr.appendChild(th);
    });
    head.appendChild(tr);
    var rows = state.leaderboard.slice();
    var byBpb = rows.slice().sort(function (a, b) { return sortValue(a, "val_bpb") - sortValue(b, "val_bpb"); });
    var rank = {};
    byBpb.forEach(function (r, i) { rank[r.id] = i + 1; });
    var k = state.sort.key, dir = state.sort.dir;
    rows.sort(function (a, b) {
      var va = sortValue(a, k), vb = sortValue(b, k);
      if (va === vb) return rank[a.id] - rank[b.id];
      if (va === null || va === undefined) return 1;
      if (vb === null || vb === undefined) return -1;
      if (typeof va === "number" && typeof vb === "number") return (va - vb) * dir;
      return String(va).localeCompare(String(vb)) * dir;
    });
    if (!rows.length) {
      body.appendChild(el("tr", {}, [el("td", { colspan: String(LB_COLS.length + 1), cls: "idle", text: "Nothing has succeeded yet." })]));
    }
    rows.forEach(function (r) {
      var row = el("tr", { cls: "link" + (rank[r.id] === 1 ? " best" : ""), "data-id": String(r.id), tabIndex: "0" });
      var box = el("input", { type: "checkbox", "aria-label": "compare #" + r.id });
      box.checked = state.compare.indexOf(r.id) >= 0;
      box.addEventListener("click", function (ev) { ev.stopPropagation(); toggleCompare(r.id, box.checked); });
      row.appendChild(el("td", {}, [box]));
      LB_COLS.forEach(function (c) {
        var v = c.key === "rank" ? rank[r.id] : c.key === "val_bpb" ? bpbText(r) : fmt(r[c.key], c.key === "mfu_percent" || c.key === "slowdown" ? 2 : undefined);
        if (c.key === "tokens_per_second" && typeof r[c.key] === "number") v = fmt(Math.round(r[c.key]));
        var td = el("td", { cls: (c.num ? "num" : "") + (c.narrow ? " hide-narrow" : ""), "data-key": c.key, text: v === undefined ? "" : String(v) });
        if (c.key === "name" || c.key === "ve_layers") td.title = td.textContent;
        row.appendChild(td);
      });
      row.addEventListener("click", function () { location.hash = "#/e/" + r.id; });
      row.addEventListener("keydown", function (ev) { if (ev.key === "Enter") location.hash = "#/e/" + r.id; });
      body.appendChild(row);
    });
  }

  var MAX_SELECTED = 8; /* as many as CURVE_STYLES tells apart */

  /* Tick or untick a run: the selection keeps the last MAX_SELECTED. */
  function toggleCompare(id, on) {
    state.compare = state.compare.filter(function (x) { return x !== id; });
    if (on) state.compare.push(id);
    if (state.compare.length > MAX_SELECTED) state.compare.shift();
    writeUrl();
    selectionChanged();
  }

  function selectionChanged() {
    var a = $("compare-link");
    a.hidden = state.compare.length !== 2;
    if (state.compare.length === 2) a.href = "#/c/" + state.compare[0] + "/" + state.compare[1];
    renderLeaderboard();
    renderParallel();
    renderOverlay();
  }

  /* ------------------------------------------------------ the address */

  /* The home view's address: #/?scope=...&sel=1,2 (either may be absent). */
  function homeHash() {
    var q = [];
    if (state.scope) q.push("scope=" + encodeURIComponent(state.scope));
    if (state.compare.length) q.push("sel=" + state.compare.join(","));
    return "#/" + (q.length ? "?" + q.join("&") : "");
  }

  function writeUrl() {
    if ($("home").hidden) return;
    if (location.hash !== homeHash()) history.replaceState(null, "", homeHash());
    $("back-link").href = homeHash();
  }

  /* The scope and the selection from the address; true when the scope changed. */
  function readUrl() {
    var m = /^#\/?\?(.*)$/.exec(location.hash), scope = null, sel = null;
    if (m) m[1].split("&").forEach(function (kv) {
      var i = kv.indexOf("="), k = kv.slice(0, i), v = kv.slice(i + 1);
      if (k === "scope") scope = decodeURIComponent(v);
      if (k === "sel") sel = v.split(",").map(Number).filter(function (x) { return x > 0; }).slice(-MAX_SELECTED);
    });
    if (!m) return false; /* a bare #/ keeps what is shown */
    var changed = (scope || null) !== (state.scope || null);
    state.scope = scope || null;
    state.compare = sel || [];
    return changed;
  }

  /* --------------------------------------------------------------- queue */

  function renderQueue(items) {
    var body = $("queue").tBodies[0];
    body.textContent = "";
    if (!items.length) {
      body.appendChild(el("tr", {}, [el("td", { colspan: "6", cls: "idle", text: "The queue is empty." })]));
      return;
    }
    items.forEach(function (e) {
      var b = el("button", { type: "button", "data-cancel": String(e.id), text: "cancel" });
      b.addEventListener("click", function () { cancelRun(e.id); });
      body.appendChild(el("tr", { "data-id": String(e.id) }, [
        el("td", { cls: "num" }, [el("a", { href: "#/e/" + e.id, text: String(e.id) })]),
        el("td", { text: e.name || "(unnamed)" }),
        el("td", { cls: "num", text: fmt(e.priority) }),
        el("td", { text: (e.source || "") + (e.via ? " (" + e.via + ")" : "") }),
        el("td", { text: (e.created || "").replace("T", " ").replace(/\.\d+Z$/, "Z") }),
        el("td", {}, [b])
      ]));
    });
  }

  function cancelRun(id) {
    api("/v1/experiments/" + id + "/cancel", { method: "POST" }).then(function (r) {
      if (!r.ok) {
        say("cancel #" + id + " refused: " + errorText(r) +
            (r.status === 401 ? " (enter the daemon's token above)" : ""), true);
        return;
      }
      say("#" + id + " " + r.body.status, false);
      refresh();
    }).catch(function (e) { say("cancel #" + id + ": " + e, true); });
  }

  /* -------------------------------------------------------- loading data */

  function loadExperiments() {
    var all = [];
    function page(after, n) {
      return api("/v1/experiments?order=id&limit=1000" + (after ? "&after=" + after : "")).then(function (r) {
        if (!r.ok) throw new Error(errorText(r));
        all = all.concat(r.body.experiments || []);
        if (r.body.next_after && n < 20) return page(r.body.next_after, n + 1);
        return all;
      });
    }
    return page(0, 0);
  }

  /* ------------------------------------------------------------ the sweep */

  var SWEEP_MAX = 400;     /* the newest runs of the scope the sweep's views use */
  var MIN_FOR_FOREST = 8;  /* succeeded runs before importance is estimated */

  /* The scope's succeeded runs with a val_bpb, the newest SWEEP_MAX, oldest first. */
  function sweepRuns() {
    return finishedRuns().filter(function (e) {
      return e.status === "succeeded" && typeof e.val_bpb === "number" && isFinite(e.val_bpb);
    }).slice(-SWEEP_MAX);
  }

  /* The specs of runs not yet read (GET /v1/experiments/ID?metrics=0, four at
   * a time; a finished run's spec never changes, so each is read once). */
  var specsLoading = false;
  function loadSpecs(runs) {
    var want = runs.filter(function (e) { return !state.specs[e.id]; }).map(function (e) { return e.id; });
    if (!want.length || specsLoading) return;
    specsLoading = true;
    function next() {
      var id = want.shift();
      if (id === undefined) return Promise.resolve();
      return api("/v1/experiments/" + id + "?metrics=0").then(function (r) {
        if (r.ok && r.body && r.body.spec) state.specs[id] = r.body.spec;
      }).catch(function () {}).then(next);
    }
    Promise.all([next(), next(), next(), next()]).then(function () {
      specsLoading = false;
      renderSweep();
    });
  }

  function renderSweep() {
    if ($("home").hidden) return;
    var runs = sweepRuns();
    renderTimeChart(runs);
    loadSpecs(runs); /* before the check below: a load in flight may have been another scope's */
    var sig = JSON.stringify([runs.map(function (e) { return e.id; }),
                              runs.filter(function (e) { return state.specs[e.id]; }).length, width($("parallel"))]);
    if (sig === state.sweepSig) return;
    state.sweepSig = sig;
    var rows = runs.filter(function (e) { return state.specs[e.id]; }).map(function (e) {
      return { id: e.id, name: e.name, val_bpb: e.val_bpb, spec: state.specs[e.id] };
    });
    $("sweep-note").textContent = runs.length
      ? "The " + runs.length + " succeeded run" + (runs.length === 1 ? "" : "s") + " of the leaderboard's scope" +
        (runs.length === SWEEP_MAX ? " (the newest " + SWEEP_MAX + ")" : "") +
        (rows.length < runs.length ? "; reading their specs: " + rows.length + " of " + runs.length : "") + "."
      : "No run of this scope has succeeded yet.";
    var fs = nsSweep.fields(rows.map(function (r) { return r.spec; }));
    state.sweep = { rows: rows, fields: fs };
    renderParallel();
    renderImportance(rows, fs, rows.length === runs.length);
  }

  function renderParallel() {
    var node = $("parallel"), sw = state.sweep;
    if (!sw || !sw.rows.length || !sw.fields.length) {
      node.textContent = "";
      node.setAttribute("data-lines", "0");
      node.appendChild(el("p", { cls: "idle", text: sw && sw.rows.length
        ? "Every run has the same spec but for its labels: nothing was searched."
        : "No succeeded run yet." }));
      return;
    }
    nsSweep.parallel(node, sw.rows, sw.fields, {
      selected: state.compare,
      onPick: function (id) { toggleCompare(id, state.compare.indexOf(id) < 0); }
    });
  }

  /* The importance table: computed once the specs of every run are read,
   * one resample at a time off the first paint (importanceAsync). */
  var importanceCancel = null;
  function renderImportance(rows, fs, complete) {
    var node = $("importance");
    if (importanceCancel) { importanceCancel(); importanceCancel = null; }
    node.setAttribute("data-fields", "0");
    if (rows.length < MIN_FOR_FOREST || !fs.length || !complete) {
      node.textContent = "";
      node.appendChild(el("p", { cls: "idle", text: !complete ? "Reading the runs' specs..."
        : !fs.length ? "Nothing was searched."
        : "Needs " + MIN_FOR_FOREST + " succeeded runs with a searched field (" + rows.length + " so far)." }));
      return;
    }
    var X = nsSweep.features(rows.map(function (r) { return r.spec; }), fs);
    importanceCancel = nsSweep.importanceAsync(X, rows.map(function (r) { return r.val_bpb; }), { seed: 1 }, function (imp) {
      importanceCancel = null;
      var order = fs.map(function (f, j) { return j; }).sort(function (a, b) { return imp.mean[b] - imp.mean[a]; });
      var t = el("table", { cls: "importance" }), body = el("tbody");
      t.appendChild(el("thead", {}, [el("tr", {}, [el("th", { text: "field" }), el("th", { text: "share of the importance" }),
        el("th", { cls: "num", text: "mean" }), el("th", { cls: "num", text: "10th-90th percentile" })])]));
      order.forEach(function (j) {
        var pct = function (v) { return (100 * v).toFixed(0) + "%"; };
        var bar = el("div", { cls: "imp-bar" }, [
          el("span", { cls: "imp-mean", style: "width:" + (100 * imp.mean[j]).toFixed(1) + "%" }),
          el("span", { cls: "imp-range", style: "left:" + (100 * imp.lo[j]).toFixed(1) + "%;width:" +
                       (100 * (imp.hi[j] - imp.lo[j])).toFixed(1) + "%" })]);
        body.appendChild(el("tr", { "data-path": fs[j].path, "data-mean": imp.mean[j].toFixed(4) }, [
          el("td", { text: fs[j].path }), el("td", { cls: "imp-cell" }, [bar]),
          el("td", { cls: "num", text: pct(imp.mean[j]) }),
          el("td", { cls: "num", text: pct(imp.lo[j]) + " - " + pct(imp.hi[j]) })]));
      });
      t.appendChild(body);
      node.textContent = "";
      node.appendChild(el("div", { cls: "scroll" }, [t]));
      node.setAttribute("data-fields", String(fs.length));
    });
  }

  /* val_bpb of each succeeded run against the time it finished. */
  function renderTimeChart(runs) {
    var node = $("time-chart");
    var pts = runs.map(function (e) { return { t: Date.parse(e.finished) / 1000, v: e.val_bpb, e: e }; })
      .filter(function (p) { return isFinite(p.t); })
      .sort(function (a, b) { return a.t - b.t; });
    var sig = JSON.stringify([pts.map(function (p) { return p.e.id; }), width(node)]);
    if (sig === node.getAttribute("data-sig")) return;
    node.setAttribute("data-sig", sig);
    node.setAttribute("data-points", String(pts.length));
    if (state.timeChart) { state.timeChart.destroy(); state.timeChart = null; }
    node.textContent = "";
    if (!pts.length) { node.appendChild(el("p", { cls: "idle", text: "No succeeded run yet." })); return; }
    var best = Infinity;
    var data = [pts.map(function (p) { return p.t; }), pts.map(function (p) { return p.v; }),
                pts.map(function (p) { best = Math.min(best, p.v); return best; })];
    state.timeChart = new uPlot({
      width: width(node), height: 240,
      series: [{ label: "finished" },
               { label: "val_bpb", stroke: "#1b1b1b", paths: function () { return null; },
                 points: { show: true, size: 7, fill: "#1b1b1b", space: 0 } },
               { label: "best so far", stroke: "#1f5fa8", width: 2, paths: uPlot.paths.stepped({ align: 1 }),
                 points: { show: false } }],
      axes: [{ label: "wall-clock time (local)" }, { label: "val_bpb", size: 60 }]
    }, data, node);
  }

  /* The selection's loss curves overlaid (the full experiments, read once each). */
  function renderOverlay() {
    var node = $("overlay-chart"), ids = state.compare.slice();
    var sig = JSON.stringify([ids, width(node)]);
    if (sig === state.overlaySig) return;
    state.overlaySig = sig;
    $("selection-note").textContent = ids.length
      ? "Selected: " + ids.map(function (id) { return "#" + id; }).join(", ") + " (at most " + MAX_SELECTED + ")."
      : "Nothing selected: tick runs in the leaderboard or click lines above.";
    if (!ids.length) {
      if (state.overlayChart) { state.overlayChart.destroy(); state.overlayChart = null; }
      node.textContent = "";
      node.setAttribute("data-curves", "0");
      return;
    }
    Promise.all(ids.map(function (id) { return experiment(id).catch(function () { return null; }); })).then(function (exps) {
      if (JSON.stringify([state.compare, width(node)]) !== state.overlaySig) return;
      var curves = exps.filter(function (e) { return e; }).map(function (e) {
        return { label: "#" + e.id + " " + (e.name || "").slice(0, 40), s: lossSeries(e) };
      });
      lossChart(node, curves, "overlayChart");
    });
  }

  /* ------------------------------------------------------------- scopes */

  /* val_bpb compares only within one scope (dataset, budget, evaluation):
   * the leaderboard and the noise are asked for the one picked in #scope,
   * else for the daemon's default, and every answer names its scope. */
  function scopeQueryOf(sc) {
    return "dataset=" + encodeURIComponent(sc.dataset) + "&budget=" +
      encodeURIComponent(sc.budget_kind + ":" + sc.budget) + "&eval_tokens=" + sc.eval_tokens;
  }

  function scopeLabel(sc) {
    return sc.dataset + ", " + (sc.budget_kind === "tokens" ? fmt(sc.budget) + " tokens" : sc.budget + " s") +
      ", eval " + (sc.eval_tokens ? fmt(sc.eval_tokens) + " tokens" : "the whole split") +
      (typeof sc.runs === "number" ? " (" + sc.runs + " run" + (sc.runs === 1 ? ")" : "s)") : "");
  }

  /* The scope of the shown leaderboard, as a query, or "" before the first. */
  function shownScope() {
    var b = state.board;
    return b && typeof b.dataset === "string" ? scopeQueryOf(b) : "";
  }

  function renderScopes() {
    var sel = $("scope"), b = state.board, cur = shownScope();
    sel.textContent = "";
    var list = (b && b.scopes) || [];
    if (cur && !list.some(function (sc) { return scopeQueryOf(sc) === cur; })) list = [b].concat(list);
    list.forEach(function (sc) {
      var o = el("option", { text: scopeLabel(sc) });
      o.value = scopeQueryOf(sc);
      if (o.value === cur) o.selected = true;
      sel.appendChild(o);
    });
  }

  /* Draw the answers: every experiment, the leaderboard's (with its scope),
   * the queue's. Any may be null (not answered). */
  function show(exps, board, queue) {
    if (exps) state.experiments = exps;
    if (board) { state.board = board; state.leaderboard = board.leaderboard || []; }
    renderScopes();
    renderChart();
    renderSweep();
    renderLeaderboard();
    renderQueue(queue ? queue.experiments || [] : []);
    renderSummary();
  }

  var refreshing = null, again = false;
  function refresh() {
    if (refreshing) { again = true; return refreshing; }
    refreshing = loadExperiments().then(function (exps) {
      return Promise.all([
        exps,
        api("/v1/leaderboard?limit=200" + (state.scope ? "&" + state.scope : "")),
        api("/v1/experiments?status=queued&order=queue&limit=200"),
        api("/v1/best" + (state.scope ? "?" + state.scope : ""))
      ]);
    }).then(function (res) {
      state.bestTest = res[3].ok && res[3].body.best ? res[3].body.best.test : null;
      show(res[0], res[1].ok ? res[1].body : null, res[2].ok ? res[2].body : null);
      $("report-link").href = "/report?" + shownScope();
    }).catch(function (e) { say("loading: " + e.message, true); })
      .then(function () {
        refreshing = null;
        if (again) { again = false; refresh(); }
      });
    return refreshing;
  }

  var refreshTimer = null;
  function refreshSoon() {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(refresh, 250);
  }

  function renderSummary() {
    var st = state.status, best = null;
    var done = state.experiments.filter(function (e) { return !TERMINAL_SKIP[e.status]; }).length;
    state.leaderboard.forEach(function (r) {
      var v = sortValue(r, "val_bpb");
      if (typeof v === "number" && (best === null || v < best.v)) best = { v: v, id: r.id };
    });
    var parts = [];
    if (st) parts.push(st.running + " running", st.queue_depth + " queued");
    parts.push(done + " finished");
    if (best) parts.push("best " + best.v.toFixed(6) + " (#" + best.id + ")");
    /* the best configuration's sealed test split figure (GET /v1/best) */
    if (best && state.bestTest && typeof state.bestTest.test_bpb === "number")
      parts.push("test " + state.bestTest.test_bpb.toFixed(6));
    parts.push(state.connected === null ? "connecting..." : state.connected ? "live" : "reconnecting...");
    $("summary").textContent = parts.join(" \u00b7 ");
  }

  function loadNoise() {
    api("/v1/noise?" + (shownScope() || state.scope || "")).then(function (r) {
      if (r.ok && r.body && typeof r.body === "object") { state.noise = r.body; renderChart(); }
    }).catch(function () {});
  }

  /* ------------------------------------------------------------- the feed */

  /* One stream per visible tab: a hidden tab closes its stream (browsers
   * allow six connections per host, and a stream holds one), and on becoming
   * visible again reconnects and reloads the lists. EventSource retries a
   * dropped stream by itself but gives up for good on an error reply (a 503
   * when the daemon has too many streams): then the page tries again itself,
   * after 2 s, doubling to 30 s, until a stream opens. */
  var es = null, retryTimer = null, retryMs = 2000;
  function visibility() {
    if (document.hidden && es) {
      es.close();
      es = null;
      state.connected = false;
    } else if (!document.hidden && !es && !retryTimer) {
      connect();
      refresh();
    }
  }

  function retryLater() {
    if (es) es.close();
    es = null;
    if (retryTimer) return;
    retryTimer = setTimeout(function () {
      retryTimer = null;
      if (document.hidden) return;
      connect();
      refresh();
    }, retryMs);
    retryMs = Math.min(2 * retryMs, 30000);
  }

  function connect() {
    es = new EventSource("/v1/events/stream?status=1");
    es.onopen = function () { state.connected = true; retryMs = 2000; renderSummary(); };
    es.onerror = function () {
      state.connected = false;
      renderSummary();
      if (es && es.readyState === EventSource.CLOSED) retryLater();
    };
    es.addEventListener("status", function (m) {
      var st;
      try { st = JSON.parse(m.data); } catch (e) { return; }
      state.status = st;
      var ids = (st.slots || []).map(function (s) { return s.experiment ? s.experiment.id : 0; }).join(",");
      if (ids !== state.running || st.queue_depth !== state.queueDepth) {
        state.running = ids;
        state.queueDepth = st.queue_depth;
        refreshSoon();
      }
      if (!$("home").hidden) renderSlots();
      renderSummary();
    });
    EVENT_TYPES.forEach(function (t) {
      es.addEventListener(t, function () { refreshSoon(); if (t !== "queue.empty") loadNoise(); });
    });
  }

  /* ---------------------------------------------- experiment and compare */

  function lossSeries(e) {
    var x = [], y = [];
    (e.metrics || []).forEach(function (m) { if (typeof m.loss === "number") { x.push(m.time_s); y.push(m.loss); } });
    return { x: x, y: y };
  }

  /* Up to eight curves, told apart by dash as well as colour. */
  var CURVE_STYLES = [{ stroke: "#1b1b1b", width: 2 }, { stroke: "#1f5fa8", width: 1.5, dash: [6, 4] },
                      { stroke: "#b5179e", width: 1.5, dash: [2, 3] }, { stroke: "#2a7d4f", width: 1.5, dash: [10, 3, 2, 3] },
                      { stroke: "#c8553d", width: 2.5, dash: [1, 5] }, { stroke: "#6a4c93", width: 1 },
                      { stroke: "#8a6d00", width: 1.5, dash: [14, 4] }, { stroke: "#0b7a8a", width: 2, dash: [4, 2, 1, 2] }];

  /* One chart of several loss curves over training seconds (x merged), held
   * in state[key] ("detailChart" unless said). */
  function lossChart(node, curves, key) {
    key = key || "detailChart";
    if (state[key]) { state[key].destroy(); state[key] = null; }
    node.textContent = "";
    var xs = {};
    curves.forEach(function (c) { c.s.x.forEach(function (t) { xs[t] = 1; }); });
    var X = Object.keys(xs).map(Number).sort(function (a, b) { return a - b; });
    if (X.length < 2) { node.appendChild(el("p", { cls: "idle", text: "No loss curve recorded." })); return; }
    var data = [X];
    var styles = CURVE_STYLES;
    var series = [{ label: "training s" }];
    curves.forEach(function (c, i) {
      var at = {};
      c.s.x.forEach(function (t, j) { at[t] = c.s.y[j]; });
      data.push(X.map(function (t) { return t in at ? at[t] : null; }));
      series.push({ label: c.label, stroke: styles[i].stroke, width: styles[i].width, dash: styles[i].dash,
                    spanGaps: true, points: { show: false } });
    });
    node.setAttribute("data-curves", String(curves.length));
    state[key] = new uPlot({
      width: width(node), height: 300, series: series, scales: { x: { time: false }, y: { distr: 3 } },
      axes: [{ label: "training seconds" }, { label: "loss (log scale)", size: 60 }]
    }, data, node);
  }

  function facts(pairs) {
    var dl = $("detail-facts");
    dl.textContent = "";
    pairs.forEach(function (p) {
      if (p[1] === null || p[1] === undefined || p[1] === "") return;
      dl.appendChild(el("dt", { text: p[0] }));
      var dd = el("dd");
      if (p[2]) dd.appendChild(el("a", { href: p[2], text: String(p[1]) }));
      else dd.textContent = String(p[1]);
      if (p[0] === "status") dd.className = "status-" + p[1];
      dl.appendChild(dd);
    });
  }

  function diffList(lines) {
    var ul = $("detail-diff");
    ul.textContent = "";
    (lines.length ? lines : ["(no difference)"]).forEach(function (l) { ul.appendChild(el("li", { text: l })); });
  }

  var RESULT_KEYS = ["val_bpb", "params_total", "flops_per_token", "mfu_percent", "precision", "tokens_per_second",
                     "num_steps", "training_seconds", "total_seconds", "peak_rss_mb", "cpu_share",
                     "others_cpu_share", "steal_share", "quiet_tokens_per_second", "quiet_source", "slowdown",
                     "slowdown_cost_bpb"];

  function resultTable(exps) {
    var t = $("detail-result");
    t.textContent = "";
    var any = exps.some(function (e) { return e.result; });
    $("detail-result-wrap").hidden = !any;
    if (!any) return;
    t.appendChild(el("thead", {}, [el("tr", {}, [el("th")].concat(exps.map(function (e) {
      return el("th", { cls: "num", text: "#" + e.id });
    })))]));
    var body = el("tbody");
    var keys = RESULT_KEYS.slice();
    exps.forEach(function (e) {
      Object.keys(e.result || {}).forEach(function (k) { if (keys.indexOf(k) < 0) keys.push(k); });
    });
    keys.forEach(function (k) {
      body.appendChild(el("tr", {}, [el("td", { text: k })].concat(exps.map(function (e) {
        var v = e.result ? e.result[k] : null;
        return el("td", { cls: "num", text: fmt(v, k === "val_bpb" ? 6 : undefined) });
      }))));
    });
    t.appendChild(body);
  }

  function showExperiment(id) {
    $("detail-title").textContent = "experiment #" + id;
    experiment(id).then(function (e) {
      $("detail-title").textContent = "#" + e.id + " " + (e.name || "(unnamed)");
      facts([["status", e.status], ["reason", e.reason], ["parent", e.parent ? "#" + e.parent : null, e.parent ? "#/e/" + e.parent : null],
             ["seed", e.seed], ["source", (e.source || "") + (e.via ? " (" + e.via + ")" : "")], ["created", e.created], ["started", e.started], ["finished", e.finished],
             ["compare with parent", e.parent ? "#" + e.parent + " vs #" + e.id : null, e.parent ? "#/c/" + e.parent + "/" + e.id : null]]);
      resultTable([e]);
      var parent = e.parent ? experiment(e.parent) : Promise.resolve(null);
      parent.then(function (p) {
        $("detail-diff-title").textContent = p ? "Spec difference from parent #" + p.id : "Spec (no parent)";
        diffList(p ? specDiff(p.spec, e.spec) : Object.keys(flatten(e.spec)).map(function (k) {
          return k + ": " + JSON.stringify(flatten(e.spec)[k]);
        }));
        var curves = [{ label: "#" + e.id, s: lossSeries(e) }];
        if (p) curves.push({ label: "parent #" + p.id, s: lossSeries(p) });
        lossChart($("detail-chart"), curves);
      }).catch(function (err) { diffList(["parent: " + err.message]); lossChart($("detail-chart"), [{ label: "#" + e.id, s: lossSeries(e) }]); });
    }).catch(function (err) { say(err.message, true); });
    $("detail-log-wrap").hidden = false;
    api("/v1/experiments/" + id + "/log?tail=6000").then(function (r) {
      $("detail-log").textContent = r.ok ? r.body : "(no log)";
    });
  }

  function showCompare(a, b) {
    $("detail-title").textContent = "#" + a + " vs #" + b;
    $("detail-log-wrap").hidden = true;
    Promise.all([experiment(a), experiment(b)]).then(function (pair) {
      var x = pair[0], y = pair[1];
      facts([["#" + x.id, (x.name || "(unnamed)") + ", " + x.status, "#/e/" + x.id],
             ["#" + y.id, (y.name || "(unnamed)") + ", " + y.status, "#/e/" + y.id]]);
      $("detail-diff-title").textContent = "Spec difference, #" + x.id + " -> #" + y.id;
      diffList(specDiff(x.spec, y.spec));
      resultTable([x, y]);
      lossChart($("detail-chart"), [{ label: "#" + x.id, s: lossSeries(x) }, { label: "#" + y.id, s: lossSeries(y) }]);
    }).catch(function (err) { say(err.message, true); });
  }

  /* -------------------------------------------------------------- routing */

  function route() {
    var h = location.hash, m;
    say("");
    if ((m = /^#\/e\/(\d+)$/.exec(h))) {
      $("home").hidden = true; $("detail").hidden = false; showExperiment(+m[1]);
    } else if ((m = /^#\/c\/(\d+)\/(\d+)$/.exec(h))) {
      $("home").hidden = true; $("detail").hidden = false; showCompare(+m[1], +m[2]);
    } else {
      $("detail").hidden = true; $("home").hidden = false;
      if (state.detailChart) { state.detailChart.destroy(); state.detailChart = null; }
      var scopeChanged = readUrl();
      writeUrl();
      renderChart();
      renderSlots();
      if (scopeChanged) refresh().then(loadNoise);
      state.sweepSig = null;
      state.overlaySig = null;
      renderSweep();
      selectionChanged();
    }
  }

  /* The answers the daemon inlined into the page (get_page in api.c), or null. */
  function snapshot() {
    var node = $("snapshot");
    if (!node) return null;
    try { return JSON.parse(node.textContent); } catch (e) { return null; }
  }

  function init() {
    var t = $("token");
    t.value = token();
    t.addEventListener("input", function () {
      if (t.value) sessionStorage.setItem("nightshift-token", t.value);
      else sessionStorage.removeItem("nightshift-token");
    });
    window.addEventListener("hashchange", route);
    var resizeTimer = null;
    window.addEventListener("resize", function () {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(function () {
        if ($("home").hidden) return;
        renderChart();
        state.sweepSig = null;
        state.overlaySig = null;
        renderSweep();
        renderOverlay();
      }, 150);
    });
    document.addEventListener("visibilitychange", visibility);
    $("scope").addEventListener("change", function () {
      state.scope = $("scope").value;
      state.compare = [];
      writeUrl();
      selectionChanged();
      refresh().then(loadNoise);
    });
    readUrl();
    var snap = snapshot();
    if (snap) {
      if (snap.status) state.status = snap.status;
      if (snap.noise) state.noise = snap.noise;
      show(snap.experiments && snap.experiments.experiments, snap.leaderboard, snap.queue);
    }
    route();
    refresh().then(loadNoise);
    if (!document.hidden) connect();
  }

  init();
})();
