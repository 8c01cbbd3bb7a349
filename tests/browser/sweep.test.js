// sweep.test.js - the dashboard's analysis of a sweep, in headless chromium:
// the page of a real daemon, its API answered by stand-ins (a sweep of 48
// runs generated here with a known truth: val_bpb falls with model.depth and
// nothing else matters but a little noise; and a second scope of 4 runs).
// Checks that parameter importance ranks model.depth first with most of the
// share (the truth the data was made from), that the parallel coordinates
// draw one line per run and one axis per searched field plus val_bpb, that
// val_bpb against wall-clock time has one point per run, that ticked runs'
// loss curves are overlaid, that the scope and the selection are in the
// address and a reload (and a fresh tab given the address) restores them, and
// that at 1,400 px with long run names the leaderboard's val_bpb is in view
// and nothing scrolls sideways. Screenshots go to $NIGHTSHIFT_BROWSER_OUT.
"use strict";

const path = require("path");
const L = require("./lib");

const OUT = process.env.NIGHTSHIFT_BROWSER_OUT || "build/browser-out";

function check(cond, msg) {
  if (!cond) L.fail(msg);
  console.log("ok - " + msg);
}

function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// The stand-in sweep: experiments (list rows and full ones) and two scopes.
function makeSweep() {
  const rand = rng(42), exps = [];
  const t0 = Date.parse("2026-01-10T22:00:00Z");
  const long = "a-long-run-name-from-an-agent-that-says-everything-it-changed-".repeat(2);
  function add(dataset, n) {
    for (let k = 0; k < n; k++) {
      const id = exps.length + 1;
      const depth = 2 + Math.floor(rand() * 7);
      const n_embd = [64, 96, 128, 192, 256][Math.floor(rand() * 5)];
      const mlp = ["relu2", "gelu", "swiglu"][Math.floor(rand() * 3)];
      const matrix_lr = +(0.01 * Math.pow(32, rand())).toPrecision(4);
      const val_bpb = 2 + 0.08 * (8 - depth) + 0.004 * (rand() - 0.5);
      const name = long.slice(0, 40 + (id % 60)) + id;
      const spec = { name, dataset, seed: id, time_budget_s: 300,
                     model: { depth, n_embd, n_head: 2, mlp }, train: { matrix_lr } };
      const finished = new Date(t0 + id * 300000).toISOString();
      const metrics = [];
      for (let s = 1; s <= 20; s++) metrics.push({ step: s * 10, time_s: s * 15, loss: val_bpb * (1 + 2 / s) });
      exps.push({ id, name, status: "succeeded", dataset, budget_kind: "time", budget: 300, eval_tokens: 0,
                  time_budget_s: 300, depth, n_embd, n_head: 2, mlp, val_bpb, finished, created: finished,
                  started: finished, source: "user", spec, metrics,
                  result: { val_bpb } });
    }
  }
  add("syn", 48);
  add("syn2", 4);
  const scope = (d) => ({ dataset: d, budget_kind: "time", budget: 300, eval_tokens: 0,
                          runs: exps.filter((e) => e.dataset === d).length });
  return { exps, scopes: [scope("syn"), scope("syn2")], scope };
}

function row(e) {
  const o = Object.assign({}, e);
  delete o.spec;
  delete o.metrics;
  delete o.result;
  return o;
}

async function stub(context, sw) {
  const json = (r, body, status) => r.fulfill({ status: status || 200, contentType: "application/json",
                                                body: JSON.stringify(body) });
  await context.route("**/v1/**", (r) => {
    const u = new URL(r.request().url());
    const p = u.pathname, q = u.searchParams;
    let m;
    if (p === "/v1/experiments") {
      if (q.get("status") === "queued") return json(r, { experiments: [] });
      return json(r, { experiments: sw.exps.map(row) });
    }
    if ((m = /^\/v1\/experiments\/(\d+)$/.exec(p))) {
      const e = sw.exps[+m[1] - 1];
      if (!e) return json(r, { error: { code: "not_found", message: "no" } }, 404);
      const full = Object.assign(row(e), { spec: e.spec, result: e.result, progress: null,
                                           metrics: q.get("metrics") === "0" ? [] : e.metrics });
      return json(r, full);
    }
    if ((m = /^\/v1\/experiments\/(\d+)\/log$/.exec(p)))
      return r.fulfill({ status: 200, contentType: "text/plain", body: "log\n" });
    if (p === "/v1/leaderboard") {
      const d = q.get("dataset") || "syn";
      const rows = sw.exps.filter((e) => e.dataset === d).map(row)
        .sort((a, b) => a.val_bpb - b.val_bpb);
      return json(r, Object.assign(sw.scope(d), { runs: undefined, leaderboard: rows, scopes: sw.scopes,
                                                  from: q.get("dataset") ? "query" : "latest_result" }));
    }
    if (p === "/v1/best") return json(r, { best: null });
    if (p === "/v1/noise") return json(r, { error: { code: "not_found", message: "no noise yet" } }, 404);
    return r.continue(); // the status and the event stream: the real daemon's
  });
}

async function main() {
  await L.withDaemon(OUT, async (d, launch) => {
    const browser = await launch();
    const sw = makeSweep();
    const errors = [], foreign = [];
    async function open(width, url) {
      const context = await browser.newContext({ viewport: { width, height: 900 } });
      await stub(context, sw);
      const page = await context.newPage();
      page.on("pageerror", (e) => errors.push(String(e)));
      page.on("console", (m) => {
        if (m.type() === "error" && !/^Failed to load resource/.test(m.text())) errors.push(m.text());
      });
      page.on("request", (r) => { if (!r.url().startsWith(d.url)) foreign.push(r.url()); });
      await page.goto(url || d.url + "/");
      return { context, page };
    }
    const n = sw.exps.filter((e) => e.dataset === "syn").length;

    const { context, page } = await open(1400);
    // val_bpb against wall-clock time
    await page.waitForFunction((k) => document.getElementById("time-chart").dataset.points === String(k)
                                      && document.querySelector("#time-chart .u-over"), n, { timeout: 30000 });
    check(true, `val_bpb against wall-clock time: one point per run of the scope (${n})`);
    // parallel coordinates
    await page.waitForFunction((k) => document.getElementById("parallel").dataset.lines === String(k),
                               n, { timeout: 30000 });
    const axes = await page.$$eval("#parallel .pc-axis", (g) => g.map((x) => x.dataset.path));
    check(JSON.stringify(axes) === JSON.stringify(["model.depth", "model.mlp", "model.n_embd", "train.matrix_lr",
                                                   "val_bpb"]),
          "parallel coordinates: one line per run, an axis per searched field and val_bpb: " + axes.join(", "));
    const colours = await page.$$eval("#parallel .pc-line", (ls) => new Set(ls.map((l) => l.getAttribute("stroke"))).size);
    check(colours > 10, `its lines are coloured by val_bpb (${colours} colours)`);
    // parameter importance: the data's truth is that only depth matters
    await page.waitForFunction(() => Number(document.getElementById("importance").dataset.fields) > 0, null,
                               { timeout: 60000 });
    const imp = await page.$$eval("#importance tbody tr", (rs) => rs.map((r) => [r.dataset.path, +r.dataset.mean]));
    const share = Object.fromEntries(imp);
    check(imp[0][0] === "model.depth" && share["model.depth"] > 0.6 && share["model.n_embd"] < 0.15 &&
          share["train.matrix_lr"] < 0.15,
          "importance ranks model.depth first with most of the share, as the data was made: " + JSON.stringify(imp));
    const how = await page.textContent("#importance-how");
    check(/permutation importance/.test(how) && /bootstrap resamples/.test(how) && /percentile/.test(how),
          "the page says how importance is computed and its uncertainty");
    await page.screenshot({ path: path.join(OUT, "sweep-1400.png"), fullPage: true });

    // the leaderboard fits at 1,400 px with long names: val_bpb in view, no sideways scroll
    const fit = await page.evaluate(() => {
      const wrap = document.getElementById("leaderboard").parentElement;
      const th = document.querySelector("#leaderboard th[data-key=val_bpb]");
      const name = document.querySelector("#leaderboard td[data-key=name]");
      return { over: wrap.scrollWidth - wrap.clientWidth, right: th.getBoundingClientRect().right,
               view: window.innerWidth, page: document.documentElement.scrollWidth - window.innerWidth,
               nameLen: name.textContent.length, nameTitle: name.title.length };
    });
    check(fit.over <= 0 && fit.right <= fit.view && fit.page <= 0 && fit.nameLen > 60,
          "at 1,400 px with long run names the leaderboard's val_bpb is in view, nothing scrolls sideways: " +
          JSON.stringify(fit));
    for (const id of ["time-chart", "parallel", "importance", "overlay-chart"]) {
      const r = await page.$eval("#" + id, (e) => e.getBoundingClientRect().right);
      check(r <= 1400, `#${id} fits the viewport (right edge ${Math.round(r)} px)`);
    }

    // the selection: ticks and a click on a line; its loss curves overlaid
    const ids = await page.$$eval("#leaderboard tbody tr[data-id]", (rs) => rs.slice(0, 2).map((r) => +r.dataset.id));
    for (const id of ids) await page.click(`#leaderboard tr[data-id="${id}"] input[type=checkbox]`);
    const third = sw.exps.find((e) => e.dataset === "syn" && !ids.includes(e.id)).id;
    await page.$eval(`#parallel .pc-line[data-id="${third}"]`, (l) => l.dispatchEvent(new MouseEvent("click")));
    await page.waitForFunction(() => document.getElementById("overlay-chart").dataset.curves === "3"
                                     && document.querySelector("#overlay-chart .u-over"), null, { timeout: 30000 });
    const hash = await page.evaluate(() => location.hash);
    check(hash.indexOf("sel=" + ids.concat([third]).join(",")) >= 0,
          `three selected runs (two ticked, one clicked line) overlay their loss curves; the address says so: ${hash}`);
    const thick = await page.$$eval("#parallel .pc-line.picked", (ls) => ls.map((l) => +l.dataset.id).sort((a, b) => a - b));
    check(JSON.stringify(thick) === JSON.stringify(ids.concat([third]).sort((a, b) => a - b)),
          "the selected lines are drawn thick");
    await page.screenshot({ path: path.join(OUT, "sweep-selection.png"), fullPage: true });

    // a reload restores the selection
    await page.reload();
    await page.waitForFunction(() => document.getElementById("overlay-chart").dataset.curves === "3", null,
                               { timeout: 30000 });
    // the leaderboard's rows can arrive after the overlay: wait for their ticks too
    // (a timeout falls through to the check, which then says what it found)
    await page.waitForFunction(() => document.querySelectorAll("#leaderboard tbody input:checked").length === 3,
                               null, { timeout: 15000 }).catch(() => {});
    const ticked = await page.$$eval("#leaderboard tbody input:checked", (bs) => bs.length);
    check(ticked === 3, `a reload restores the selection (${ticked} ticked, 3 curves)`);

    // the scope: picked, in the address, restored by a fresh tab given the address
    const syn2 = await page.$$eval("#scope option", (os) => os.find((o) => /^syn2/.test(o.textContent)).value);
    await page.selectOption("#scope", syn2);
    await page.waitForFunction(() => /scope=[^&]*syn2/.test(location.hash), null, { timeout: 10000 });
    await page.waitForFunction(() => document.getElementById("parallel").dataset.lines === "4", null,
                               { timeout: 30000 });
    const shared = await page.evaluate(() => location.href);
    check(true, "picking a scope puts it in the address: " + shared.split("#")[1]);
    await page.click(`#leaderboard tbody tr[data-id] input[type=checkbox]`);
    const shared2 = await page.evaluate(() => location.href);
    const other = await open(1400, shared2);
    await other.page.waitForFunction(() => document.getElementById("parallel").dataset.lines === "4"
                                           && document.getElementById("overlay-chart").dataset.curves === "1",
                                     null, { timeout: 30000 });
    const st = await other.page.evaluate(() => ({
      scope: document.getElementById("scope").selectedOptions[0].textContent,
      rows: [...document.querySelectorAll("#leaderboard tbody tr[data-id]")].map((r) => +r.dataset.id) }));
    check(/^syn2/.test(st.scope) && st.rows.every((id) => id > 48) && st.rows.length === 4,
          "a fresh tab given the address shows the same scope and selection: " + JSON.stringify(st));
    // an experiment page's back link returns to the same view
    await other.page.click("#leaderboard tbody tr[data-id]");
    await other.page.waitForSelector("#detail:not([hidden])");
    await other.page.click("#back-link");
    await other.page.waitForFunction(() => /scope=[^&]*syn2/.test(location.hash) && /sel=/.test(location.hash),
                                     null, { timeout: 10000 });
    check(true, "the experiment page's back link keeps the scope and the selection");
    await other.context.close();

    // phone width: the new views do not widen the page
    const phone = await open(390);
    await phone.page.waitForFunction(() => Number(document.getElementById("importance").dataset.fields) > 0,
                                     null, { timeout: 60000 });
    const wide = await phone.page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    check(wide <= 0, `nothing overflows at phone width with the sweep's views (${wide} px)`);
    await phone.page.screenshot({ path: path.join(OUT, "sweep-phone.png"), fullPage: true });
    await phone.context.close();
    await context.close();

    check(foreign.length === 0, "no request left the machine" + (foreign.length ? ": " + foreign.join(", ") : ""));
    check(errors.length === 0, "no script errors" + (errors.length ? ": " + errors.join("; ") : ""));
  });
}

main().then(() => {
  if (!process.exitCode) console.log("PASS: sweep");
}).catch((e) => {
  if (!process.exitCode) console.error("FAIL: " + (e && e.stack ? e.stack : e));
  process.exitCode = 1;
});
