/* report.js - the chart of the night report page (/report): the report's
 * anytime curve, the lowest val_bpb of any run so far against the time
 * since the first run started, with every run's val_bpb as a point and
 * failed or pruned runs marked along the top. The page's text and tables
 * come from the daemon (daemon/serve/report_doc.c) and read the same without
 * this script; it only draws, from the report's JSON embedded in the page. */
(function () {
  "use strict";

  var node = document.getElementById("anytime-chart");
  var data = document.getElementById("report-data");
  if (!node || !data || typeof uPlot === "undefined") return;
  var report;
  try { report = JSON.parse(data.textContent); } catch (e) { return; }
  var pts = report.anytime || [];
  node.setAttribute("data-points", String(pts.length));
  if (!pts.length) return;

  var xs = [], ok = [], best = [], bad = [], top = null;
  pts.forEach(function (p) { if (typeof p.val_bpb === "number") top = top === null ? p.val_bpb : Math.max(top, p.val_bpb); });
  pts.forEach(function (p) {
    xs.push(Math.round(p.elapsed_h * 3600 * 1000) / 1000); /* seconds: uPlot's ticks round well */
    ok.push(typeof p.val_bpb === "number" ? p.val_bpb : null);
    best.push(typeof p.best === "number" ? p.best : null);
    bad.push(p.status !== "succeeded" && top !== null ? top : null);
  });
  /* seconds as h:mm:ss, as the tables beside the chart write them */
  function clock(sec) {
    var t = Math.round(sec), m = Math.floor(t / 60) % 60, s = t % 60;
    return Math.floor(t / 3600) + ":" + (m < 10 ? "0" : "") + m + ":" + (s < 10 ? "0" : "") + s;
  }

  var width = Math.max(280, node.clientWidth || 600);
  new uPlot({
    width: width, height: 280,
    series: [
      { label: "time", value: function (u, v) { return v === null ? "--" : clock(v); } },
      { label: "val_bpb", stroke: "#1b1b1b", paths: function () { return null; },
        points: { show: true, size: 7, width: 1, fill: "#1b1b1b" } },
      { label: "best so far", stroke: "#1f5fa8", width: 2, spanGaps: true,
        paths: uPlot.paths.stepped({ align: 1 }), points: { show: false } },
      { label: "failed / pruned", stroke: "#9b1c1c", paths: function () { return null; },
        points: { show: true, size: 9, width: 2, fill: "#ffffff" } }
    ],
    scales: { x: { time: false } },
    axes: [{ label: "time since the first run started (h:mm:ss)",
             incrs: [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800,
                     21600, 43200],
             values: function (u, vals) { return vals.map(clock); } },
           { label: "val_bpb (lower is better)", size: 60 }]
  }, [xs, ok, best, bad], node);
})();
