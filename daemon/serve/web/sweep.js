/* sweep.js - the dashboard's analysis of a sweep (one scope's runs): which
 * spec fields were searched, parallel coordinates over them coloured by
 * val_bpb, and each field's importance from a small random forest's
 * permutation importance, with its spread over bootstrap resamples of the
 * runs. Hand-written (no library): the page is self-contained, with no build
 * step and nothing fetched from elsewhere, and a forest of shallow trees over
 * a few hundred runs is about 150 lines.
 *
 * window.nsSweep: fields(specs), features(specs, fields), importance(X, y,
 * opts) and importanceAsync(X, y, opts, done), colour(t), parallel(node,
 * rows, fields, opts). Text is only ever set
 * with textContent. */
(function () {
  "use strict";

  var SVG = "http://www.w3.org/2000/svg";
  /* what labels a run or sets its scope, never a searched field */
  var NOT_SEARCHED = /^(name|tags|seed|priority|parent|prune|dataset|time_budget_s|token_budget|eval_tokens|resources)(\.|$)/;
  var MAX_FIELDS = 12;

  function flatten(o, prefix, out) {
    for (var k in o) {
      var p = prefix ? prefix + "." + k : k;
      if (o[k] && typeof o[k] === "object" && !Array.isArray(o[k])) flatten(o[k], p, out);
      else out[p] = Array.isArray(o[k]) ? JSON.stringify(o[k]) : o[k];
    }
    return out;
  }

  /* The searched fields: every spec path (but the labels and the scope) that
   * takes two or more values over the runs, numeric or not; at most
   * MAX_FIELDS, those with the most distinct values first, then by path. */
  function fields(specs) {
    var seen = {};
    specs.forEach(function (s) {
      var f = flatten(s || {}, "", {});
      for (var p in f) {
        if (NOT_SEARCHED.test(p)) continue;
        (seen[p] = seen[p] || {})[JSON.stringify(f[p])] = f[p];
      }
    });
    var out = [];
    Object.keys(seen).forEach(function (p) {
      var vals = Object.keys(seen[p]).map(function (k) { return seen[p][k]; });
      if (vals.length < 2) return;
      var numeric = vals.every(function (v) { return typeof v === "number"; });
      var f = { path: p, numeric: numeric, n: vals.length };
      if (numeric) {
        f.min = Math.min.apply(null, vals);
        f.max = Math.max.apply(null, vals);
        f.log = f.min > 0 && f.max >= 8 * f.min;
      } else {
        f.values = vals.map(String).sort();
      }
      out.push(f);
    });
    out.sort(function (a, b) { return b.n - a.n || a.path.localeCompare(b.path); });
    return out.slice(0, MAX_FIELDS).sort(function (a, b) { return a.path.localeCompare(b.path); });
  }

  /* A field's value in [0, 1] on its axis (log scale when f.log; a category
   * by its place), or null when the spec has none. */
  function unit(f, v) {
    if (v === undefined || v === null) return null;
    if (!f.numeric) {
      var i = f.values.indexOf(String(v));
      return i < 0 ? null : f.values.length === 1 ? 0.5 : i / (f.values.length - 1);
    }
    if (typeof v !== "number") return null;
    if (f.log) return (Math.log(v) - Math.log(f.min)) / (Math.log(f.max) - Math.log(f.min));
    return (v - f.min) / (f.max - f.min);
  }

  /* One row of features a spec: each field's unit value (-1 when absent). */
  function features(specs, fs) {
    return specs.map(function (s) {
      var flat = flatten(s || {}, "", {});
      return fs.map(function (f) { var u = unit(f, flat[f.path]); return u === null ? -1 : u; });
    });
  }

  /* ------------------------------------------------------- the forest */

  function rng(seed) { /* mulberry32: a seeded generator, so a view is reproducible */
    var a = seed >>> 0;
    return function () {
      a = (a + 0x6d2b79f5) >>> 0;
      var t = Math.imul(a ^ (a >>> 15), 1 | a);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  function mean(ix, y) { var s = 0; ix.forEach(function (i) { s += y[i]; }); return s / ix.length; }

  /* A regression tree on rows ix: splits minimising the squared error, over
   * a random third of the features at each node (at least one), at most
   * depth levels, leaves of at least minLeaf rows. */
  function grow(X, y, ix, depth, minLeaf, rand) {
    var m = mean(ix, y);
    if (depth === 0 || ix.length < 2 * minLeaf) return { v: m };
    var p = X[0].length, tries = Math.max(1, Math.ceil(p / 3)), order = [];
    for (var j = 0; j < p; j++) order.push(j);
    for (j = p - 1; j > 0; j--) { var k = Math.floor(rand() * (j + 1)), t = order[j]; order[j] = order[k]; order[k] = t; }
    var best = null;
    for (var q = 0; q < tries; q++) {
      var f = order[q];
      var s = ix.slice().sort(function (a, b) { return X[a][f] - X[b][f]; });
      var tot = 0, tot2 = 0, n = s.length;
      s.forEach(function (i) { tot += y[i]; tot2 += y[i] * y[i]; });
      var left = 0, left2 = 0;
      for (var i = 0; i < n - 1; i++) {
        left += y[s[i]]; left2 += y[s[i]] * y[s[i]];
        var a = X[s[i]][f], b = X[s[i + 1]][f];
        if (a === b || i + 1 < minLeaf || n - i - 1 < minLeaf) continue;
        var nl = i + 1, nr = n - nl, rs = tot - left, rs2 = tot2 - left2;
        var sse = (left2 - left * left / nl) + (rs2 - rs * rs / nr);
        if (!best || sse < best.sse) best = { sse: sse, f: f, thr: (a + b) / 2 };
      }
    }
    if (!best) return { v: m };
    var lo = ix.filter(function (i) { return X[i][best.f] <= best.thr; });
    var hi = ix.filter(function (i) { return X[i][best.f] > best.thr; });
    return { f: best.f, thr: best.thr, lo: grow(X, y, lo, depth - 1, minLeaf, rand),
             hi: grow(X, y, hi, depth - 1, minLeaf, rand) };
  }

  function predict(node, x) {
    while (node.lo) node = x[node.f] <= node.thr ? node.lo : node.hi;
    return node.v;
  }

  /* One tree's permutation importance: fitted to a bootstrap sample of rows
   * ix, the rise of its squared error on its out-of-bag rows when one
   * feature's column is shuffled among them; null when fewer than two rows
   * are out of bag. */
  function treeImportance(X, y, ix, rand) {
    var p = X[0].length, boot = [], inBag = {};
    ix.forEach(function () { var i = ix[Math.floor(rand() * ix.length)]; boot.push(i); inBag[i] = 1; });
    var oob = ix.filter(function (i) { return !inBag[i]; });
    if (oob.length < 2) return null;
    var tree = grow(X, y, boot, 6, 2, rand);
    var err = function (rows) {
      var s = 0;
      rows.forEach(function (x, k) { var d = predict(tree, x) - y[oob[k]]; s += d * d; });
      return s / rows.length;
    };
    var rows = oob.map(function (i) { return X[i]; });
    var base = err(rows), out = [];
    for (var j = 0; j < p; j++) {
      var col = oob.map(function (i) { return X[i][j]; });
      for (var k = col.length - 1; k > 0; k--) { var r = Math.floor(rand() * (k + 1)), c = col[k]; col[k] = col[r]; col[r] = c; }
      var shuffled = rows.map(function (x, k2) { var z = x.slice(); z[j] = col[k2]; return z; });
      out.push(err(shuffled) - base);
    }
    return out;
  }

  /* The work of importance(), a tree at a time: next() fits one tree and
   * says whether there is more; result() at the end. The random draws come
   * in one order however the work is sliced. */
  function importanceJob(X, y, opts) {
    opts = opts || {};
    var R = opts.resamples || 10, T = opts.trees || 25, rand = rng(opts.seed || 1);
    var n = X.length, p = X[0].length, shares = [], ix = null, acc = null, used = 0, t = 0;
    function next() {
      if (!ix) {
        ix = [];
        for (var i = 0; i < n; i++) ix.push(Math.floor(rand() * n));
        acc = [];
        for (var j = 0; j < p; j++) acc.push(0);
        used = 0;
        t = 0;
      }
      var imp = treeImportance(X, y, ix, rand);
      if (imp) { imp.forEach(function (v, k) { acc[k] += v; }); used++; }
      if (++t === T) {
        /* this resample's forest: each feature's share (negative rises as 0) */
        var mean = acc.map(function (v) { return Math.max(0, used ? v / used : 0); });
        var sum = mean.reduce(function (a, b) { return a + b; }, 0);
        shares.push(mean.map(function (v) { return sum > 0 ? v / sum : 0; }));
        ix = null;
      }
      return shares.length < R;
    }
    return { next: next, result: function () { return summarise(shares, p); } };
  }

  /* Each feature's share of a random forest's permutation importance (the
   * mean rise over its trees, negative ones as 0), the forest (`trees`, 25)
   * fitted again on `resamples` (10) bootstrap resamples of the rows:
   * {mean: [...], lo: [...], hi: [...]} (lo and hi: the 10th and 90th
   * percentiles over the resamples). */
  function importance(X, y, opts) {
    var job = importanceJob(X, y, opts);
    while (job.next()) continue;
    return job.result();
  }

  /* The same, in slices of about 20 ms of trees between turns of the event
   * loop (400 runs take seconds on a busy machine: the page stays
   * responsive); done(result) at the end. Returns a function that cancels it. */
  function importanceAsync(X, y, opts, done) {
    var job = importanceJob(X, y, opts), timer = null;
    function slice() {
      var t0 = Date.now();
      for (;;) {
        if (!job.next()) return done(job.result());
        if (Date.now() - t0 > 20) break;
      }
      timer = setTimeout(slice, 0);
    }
    timer = setTimeout(slice, 0);
    return function () { clearTimeout(timer); };
  }

  function summarise(shares, p) {
    var R = shares.length, out = { mean: [], lo: [], hi: [] };
    for (var j = 0; j < p; j++) {
      var col = shares.map(function (s) { return s[j]; }).sort(function (a, b) { return a - b; });
      out.mean.push(col.reduce(function (a, b) { return a + b; }, 0) / R);
      out.lo.push(col[Math.floor(0.1 * (R - 1))]);
      out.hi.push(col[Math.ceil(0.9 * (R - 1))]);
    }
    return out;
  }

  /* ------------------------------------------------ parallel coordinates */

  /* A colour for t in [0, 1] (0: the best val_bpb): a sequential scale,
   * dark blue to yellow, readable on white and dark. */
  var STOPS = [[13, 8, 135], [126, 3, 168], [204, 71, 120], [248, 149, 64], [240, 249, 33]];
  function colour(t) {
    t = Math.min(1, Math.max(0, t)) * (STOPS.length - 1);
    var i = Math.min(STOPS.length - 2, Math.floor(t)), f = t - i, a = STOPS[i], b = STOPS[i + 1];
    return "rgb(" + [0, 1, 2].map(function (k) { return Math.round(a[k] + f * (b[k] - a[k])); }).join(",") + ")";
  }

  function svg(tag, attrs) {
    var e = document.createElementNS(SVG, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  }

  function label(v) {
    if (typeof v !== "number") return String(v);
    return String(+v.toPrecision(3));
  }

  /* Parallel coordinates into node: one vertical axis per field and a last
   * one for val_bpb (best at the bottom), one polyline per row ({id, name,
   * spec, val_bpb}), coloured by val_bpb; the selected ids drawn thick on
   * top. opts.onPick(id) on a click; opts.onHover(row or null). */
  function parallel(node, rows, fs, opts) {
    node.textContent = "";
    var W = Math.max(300, node.clientWidth || 600), H = 300, top = 28, bottom = 40;
    var axes = fs.concat([{ path: "val_bpb", numeric: true }]);
    var bpbs = rows.map(function (r) { return r.val_bpb; });
    var lo = Math.min.apply(null, bpbs), hi = Math.max.apply(null, bpbs);
    axes[axes.length - 1].min = lo;
    axes[axes.length - 1].max = hi > lo ? hi : lo + 1e-9;
    var gap = (W - 80) / Math.max(1, axes.length - 1);
    var xOf = function (k) { return 40 + k * gap; };
    var yOf = function (u) { return top + (1 - u) * (H - top - bottom); };
    var root = svg("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img",
                            "aria-label": "parallel coordinates of " + rows.length + " runs over " + fs.length + " fields" });
    var sel = opts.selected || [];
    var lines = svg("g", {}), picked = svg("g", {});
    rows.forEach(function (r) {
      var flat = flatten(r.spec || {}, "", {});
      var pts = axes.map(function (a, k) {
        var u = a.path === "val_bpb" ? 1 - unit(a, r.val_bpb) : unit(a, flat[a.path]);
        return u === null ? null : xOf(k).toFixed(1) + "," + yOf(u).toFixed(1);
      }).filter(function (p) { return p; });
      var on = sel.indexOf(r.id) >= 0;
      var line = svg("polyline", { points: pts.join(" "), fill: "none", "data-id": r.id,
                                   stroke: colour(hi > lo ? (r.val_bpb - lo) / (hi - lo) : 0),
                                   "stroke-width": on ? 3.5 : 1.4, "stroke-opacity": on ? 1 : 0.75,
                                   "class": on ? "pc-line picked" : "pc-line" });
      var t = svg("title", {});
      t.textContent = "#" + r.id + " " + (r.name || "") + ": val_bpb " + r.val_bpb.toFixed(6);
      line.appendChild(t);
      line.addEventListener("click", function () { if (opts.onPick) opts.onPick(r.id); });
      (on ? picked : lines).appendChild(line);
    });
    root.appendChild(lines);
    root.appendChild(picked);
    axes.forEach(function (a, k) {
      var g = svg("g", { "class": "pc-axis", "data-path": a.path });
      g.appendChild(svg("line", { x1: xOf(k), x2: xOf(k), y1: top, y2: H - bottom, stroke: "currentColor" }));
      var ends = a.numeric ? (a.path === "val_bpb" ? [label(a.max), label(a.min)] : [label(a.min), label(a.max)])
                           : [a.values[0], a.values[a.values.length - 1]];
      [[ends[0], H - bottom + 14], [ends[1], top - 6]].forEach(function (e) {
        var t = svg("text", { x: xOf(k), y: e[1], "text-anchor": "middle", "font-size": 11, fill: "currentColor" });
        t.textContent = e[0];
        g.appendChild(t);
      });
      if (!a.numeric) a.values.slice(1, -1).forEach(function (v, i) {
        var t = svg("text", { x: xOf(k) + 3, y: yOf((i + 1) / (a.values.length - 1)) + 4, "font-size": 10, fill: "currentColor" });
        t.textContent = v;
        g.appendChild(t);
      });
      var name = svg("text", { x: xOf(k), y: H - 6, "text-anchor": "middle", "font-size": 11,
                               "font-weight": 600, fill: "currentColor" });
      name.textContent = a.path.split(".").pop() + (a.log ? " (log)" : "");
      var full = svg("title", {});
      full.textContent = a.path;
      name.appendChild(full);
      g.appendChild(name);
      root.appendChild(g);
    });
    node.appendChild(root);
    node.setAttribute("data-lines", String(rows.length));
    node.setAttribute("data-axes", String(axes.length));
  }

  window.nsSweep = { fields: fields, features: features, importance: importance,
                     importanceAsync: importanceAsync, colour: colour, parallel: parallel, flatten: flatten };
})();
