// dashboard.test.js - the dashboard end to end in headless chromium against a
// real daemon: three finished experiments (tiny specs, ~1.5 s budgets), one
// running and one queued. Checks that the chart has one point per finished
// experiment, the leaderboard's first row is the best val_bpb, the running
// slot's progress advances between two reads, a cancel without the token is
// refused and with it cancels, the live feed is opened again after a 503,
// that the first paint carries the state (with every API request refused,
// and in a plain `chromium --headless --screenshot`), that the night report
// page (/report) renders with its chart and the best's test figure, and that
// the page talks to nobody but the daemon. Writes screenshots and
// measurements (page bytes, first paint) to
// $NIGHTSHIFT_BROWSER_OUT. Exit 0 only when every check passed.
"use strict";

const fs = require("fs");
const path = require("path");
const L = require("./lib");

const OUT = process.env.NIGHTSHIFT_BROWSER_OUT || "build/browser-out";

function check(cond, msg) {
  if (!cond) L.fail(msg);
  console.log("ok - " + msg);
}

async function main() {
  fs.mkdirSync(OUT, { recursive: true });
  const { dir, state } = L.prepState();
  let d = null, browser = null;
  try {
    d = await L.startDaemon(state);
    const small = await L.submit(d, L.spec("small", 1, 1.5));
    const done = [
      small,
      await L.submit(d, Object.assign(L.spec("wider", 2, 1.5, { n_embd: 64 }), { parent: small })),
      await L.submit(d, Object.assign(L.spec("deeper", 3, 1.5, { depth: 2 }), { parent: small })),
      await L.submit(d, Object.assign(L.spec("hot", 6, 1.5), { parent: small,
        train: { batch_size: 4, total_batch_tokens: 128, embedding_lr: 1e6, unembedding_lr: 1e6,
                 matrix_lr: 1e6 } })),
    ];
    for (const id of done)
      await L.waitFor(`experiment ${id} to finish`, async () => {
        const e = await L.experiment(d, id);
        return e && e.status !== "queued" && e.status !== "running";
      }, 90000);
    // long enough to still run when the slot and first-paint checks come, on a loaded machine
    const running = await L.submit(d, L.spec("long", 4, 120));
    const queued = await L.submit(d, L.spec("waiting", 5, 1.5));
    await L.waitFor("the long run to start", async () =>
      (await L.experiment(d, running)).status === "running", 30000);

    browser = await L.launchBrowser();
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    const foreign = [];
    page.on("request", (r) => { if (!r.url().startsWith(d.url)) foreign.push(r.url()); });
    const consoleErrors = [];
    page.on("pageerror", (e) => consoleErrors.push(String(e)));
    // HTTP errors the page expects (401 on a cancel without the token, 404
    // from /v1/noise before the daemon measures noise) are not script errors.
    page.on("console", (m) => {
      if (m.type() === "error" && !/^Failed to load resource/.test(m.text()))
        consoleErrors.push(m.text());
    });

    await page.goto(d.url + "/", { waitUntil: "load" });

    // the chart: one point per finished experiment
    const list = (await L.api(d, "GET", "/v1/experiments?limit=1000")).json.experiments;
    const finished = list.filter((e) => !["queued", "running", "cancelled"].includes(e.status)).length;
    check(finished === done.length, `the daemon reports ${finished} finished experiments (` +
          list.filter((e) => done.includes(e.id)).map((e) => e.status).join(", ") + ")");
    await page.waitForFunction((n) => document.getElementById("chart").dataset.points === String(n)
                                      && document.querySelector("#chart .u-over"), finished,
                               { timeout: 45000 });
    check(true, `the chart has one point per finished experiment (${finished})`);

    // hover: "wider" (a child of "small") shows its name and what its spec
    // changed. The chart's x is the finish order (finished time, then id, as
    // the page sorts); with two slots "small" and "wider" run side by side and
    // either may finish first, so find its place rather than assume it.
    const order = list.filter((e) => done.includes(e.id))
                      .sort((a, b) => (a.finished || "").localeCompare(b.finished || "") || a.id - b.id)
                      .map((e) => e.id);
    const at = order.indexOf(done[1]);
    const box = await page.$eval("#chart .u-over", (o) => {
      const r = o.getBoundingClientRect();
      return { x: r.left, y: r.top, w: r.width, h: r.height };
    });
    await page.mouse.move(box.x + box.w * ((at + 0.5) / finished), box.y + box.h / 2);
    await page.waitForFunction(() => /n_embd: 32 -> 64/.test(document.getElementById("tip").textContent),
                               null, { timeout: 30000 });
    const tip = await page.textContent("#tip");
    check(/wider/.test(tip), "hovering a point shows its name and its spec's difference from its " +
          "parent: " + tip.replace(/\s+/g, " ").slice(0, 120));
    await page.screenshot({ path: path.join(OUT, "hover.png") });
    await page.mouse.move(0, 0);

    // the leaderboard: the first row is the best val_bpb
    // (every finished run here shares one dataset and budget, one seed each:
    // the best is the lowest val_bpb of the succeeded runs)
    const ok = (await L.api(d, "GET", "/v1/experiments?status=succeeded")).json.experiments;
    const best = ok.reduce((a, b) => (b.val_bpb < a.val_bpb ? b : a));
    const lb = (await L.api(d, "GET", `/v1/leaderboard?dataset=${best.dataset}` +
                                      `&budget=${best.budget_kind}:${best.budget}`)).json.leaderboard;
    await page.waitForSelector("#leaderboard tbody tr[data-id]", { timeout: 30000 });
    const firstId = await page.$eval("#leaderboard tbody tr[data-id]", (r) => r.dataset.id);
    check(Number(firstId) === best.id,
          `the leaderboard's first row is #${firstId}, the best val_bpb (${best.val_bpb})`);
    const bpbs = await page.$$eval("#leaderboard tbody tr[data-id] td[data-key=val_bpb]",
                                   (tds) => tds.map((t) => parseFloat(t.textContent)));
    check(bpbs.every((v, i) => i === 0 || v >= bpbs[i - 1]), "the leaderboard is sorted by val_bpb");

    // the sweep's views over the real runs: one time point and one line per
    // succeeded run of the scope, an axis per field the runs differ in
    const nok = ok.filter((e) => e.dataset === best.dataset && e.budget === best.budget).length;
    await page.waitForFunction((n) => document.getElementById("time-chart").dataset.points === String(n)
                                      && document.getElementById("parallel").dataset.lines === String(n), nok,
                               { timeout: 30000 });
    const pcAxes = await page.$$eval("#parallel .pc-axis", (g) => g.map((x) => x.dataset.path));
    check(pcAxes.includes("model.n_embd") && pcAxes[pcAxes.length - 1] === "val_bpb",
          `the sweep: ${nok} runs against wall-clock time and in parallel coordinates over ` + pcAxes.join(", "));

    // the running slot: its progress advances
    const sel = `#slots .slot[data-id="${running}"]`;
    await page.waitForSelector(sel, { timeout: 30000 });
    const p1 = parseFloat(await page.$eval(sel, (e) => e.dataset.percent));
    await L.sleep(2500);
    const p2 = parseFloat(await page.$eval(sel, (e) => e.dataset.percent));
    check(p2 > p1, `the running slot's progress advanced from ${p1}% to ${p2}%`);
    await page.waitForSelector(`${sel} .u-over`, { timeout: 30000 });
    check(true, "the running slot shows a live loss curve");

    // cancel: refused without the token, done with it
    const btn = `#queue button[data-cancel="${queued}"]`;
    await page.waitForSelector(btn, { timeout: 30000 });
    await page.click(btn);
    await page.waitForFunction(() => /401/.test(document.getElementById("msg").textContent),
                               null, { timeout: 30000 });
    check((await L.experiment(d, queued)).status === "queued",
          "a cancel click without the token is refused (401) and the run stays queued");
    await page.fill("#token", L.TOKEN);
    await page.click(btn);
    await L.waitFor("the queued run to be cancelled", async () =>
      (await L.experiment(d, queued)).status === "cancelled", 10000);
    check(true, "with the token the click cancels it");

    // the first paint carries the state: with every API request refused, the
    // page still shows the finished runs, the leaderboard, the running slot
    // and the queue, from what the daemon inlined into it
    const bare = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    await bare.route("**/v1/**", (r) => r.abort());
    const bp = await bare.newPage();
    await bp.goto(d.url + "/", { waitUntil: "load" });
    const first = await bp.evaluate(() => ({
      points: document.getElementById("chart").dataset.points,
      rows: document.querySelectorAll("#leaderboard tbody tr[data-id]").length,
      slots: document.querySelectorAll("#slots .slot[data-id]").length,
      summary: document.getElementById("summary").textContent,
      scope: document.getElementById("scope").selectedOptions.length
        ? document.getElementById("scope").selectedOptions[0].textContent : "" }));
    check(first.points === String(finished) && first.rows > 0 && first.slots === 1 &&
          /finished/.test(first.summary) && /best/.test(first.summary) && first.scope !== "",
          "the first paint needs no request: " + JSON.stringify(first));
    await bp.screenshot({ path: path.join(OUT, "first-paint.png") });
    await bare.close();
    // and a plain headless screenshot (no script waits for anything) shows it
    const shot = path.join(OUT, "plain-screenshot.png");
    require("child_process").execFileSync(L.chromiumPath(), [
      "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
      "--disable-background-networking", "--window-size=1280,900", "--screenshot=" + shot,
      d.url + "/"], { stdio: "ignore", timeout: 60000 });
    check(fs.statSync(shot).size > 10000, "chromium --headless --screenshot wrote " + shot);

    // measurements: the page's bytes and its first paint on loopback
    const perf = await page.evaluate(() => {
      const nav = performance.getEntriesByType("navigation")[0];
      const res = performance.getEntriesByType("resource");
      const paint = {};
      performance.getEntriesByType("paint").forEach((p) => { paint[p.name] = p.startTime; });
      const files = [{ name: location.pathname, bytes: nav.decodedBodySize }].concat(
        res.filter((r) => r.name.indexOf("/ui/") >= 0)
           .map((r) => ({ name: new URL(r.name).pathname, bytes: r.decodedBodySize })));
      return { files, paint, dom_content_loaded_ms: nav.domContentLoadedEventEnd,
               load_ms: nav.loadEventEnd };
    });
    perf.page_bytes = perf.files.reduce((a, f) => a + f.bytes, 0);
    await page.waitForTimeout(500);
    await page.screenshot({ path: path.join(OUT, "dashboard-1280.png"), fullPage: true });

    // the experiment page of the best run, and the compare view
    await page.goto(d.url + "/#/e/" + lb[0].id);
    await page.waitForSelector("#detail-chart .u-over", { timeout: 30000 });
    const title = await page.textContent("#detail-title");
    check(title.indexOf("#" + lb[0].id) === 0, `the experiment page shows #${lb[0].id}`);
    await page.screenshot({ path: path.join(OUT, "experiment.png"), fullPage: true });
    await page.goto(d.url + `/#/c/${lb[0].id}/${lb[lb.length - 1].id}`);
    await page.waitForSelector("#detail-diff li", { timeout: 30000 });
    const diff = await page.$$eval("#detail-diff li", (li) => li.map((x) => x.textContent));
    check(diff.some((x) => /^(seed|model\.)/.test(x)), "the compare view lists spec differences: " +
          diff.slice(0, 3).join("; "));
    await page.waitForSelector("#detail-chart .u-over", { timeout: 30000 });

    // the morning report page, reached from the dashboard's link: its text
    // from the daemon, the anytime curve drawn, the best's sealed test figure
    await page.goto(d.url + "/");
    await page.waitForFunction(() => /test \d\.\d{6}/.test(document.getElementById("summary").textContent),
                               null, { timeout: 30000 });
    check(true, "the summary shows the best configuration's test_bpb: " +
          (await page.textContent("#summary")).replace(/\s+/g, " "));
    const href = await page.$eval("#report-link", (a) => a.getAttribute("href"));
    check(/^\/report\?dataset=/.test(href), `the report link carries the scope: ${href}`);
    await page.click("#report-link");
    await page.waitForSelector("#anytime-chart .u-over", { timeout: 30000 });
    const rtitle = await page.textContent("main h2");
    check(/^Night report: /.test(rtitle), `the report page renders: "${rtitle}"`);
    const points = await page.$eval("#anytime-chart", (n) => Number(n.dataset.points));
    const want = (await L.api(d, "GET", "/v1/report?" + href.split("?")[1])).json.anytime.length;
    check(points === want && points >= done.length,
          `its anytime curve has one point per finished run (${points})`);
    const answer = await page.$$eval("main table", (t) => t[1].textContent);
    check(/best/.test(answer) && /\d\.\d{6} \(1 of 1 runs\)/.test(answer),
          "its answer carries the best's sealed test_bpb");
    await page.screenshot({ path: path.join(OUT, "report.png"), fullPage: true });

    // phone width
    const phone = await browser.newContext({ viewport: { width: 390, height: 844 },
                                             deviceScaleFactor: 2 });
    const pp = await phone.newPage();
    pp.on("request", (r) => { if (!r.url().startsWith(d.url)) foreign.push(r.url()); });
    await pp.goto(d.url + "/");
    await pp.waitForSelector("#chart .u-over", { timeout: 45000 });
    const overflow = await pp.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    check(overflow <= 0, `nothing overflows the page at phone width (${overflow} px)`);
    await pp.waitForTimeout(500);
    await pp.screenshot({ path: path.join(OUT, "dashboard-phone.png"), fullPage: true });

    // with noise measured and seeds repeated (stand-in answers): a noise band from
    // /v1/noise, configurations with several seeds as mean, sd and n (stand-ins here)
    const later = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    await later.route("**/v1/noise?*", (r) => r.fulfill({ contentType: "application/json",
                                                        body: JSON.stringify({ sd: 0.002 }) }));
    await later.route("**/v1/leaderboard?*", (r) => r.fulfill({
      contentType: "application/json",
      body: JSON.stringify({ leaderboard: lb.map((row) => Object.assign({}, row, {
        val_bpb_sd: 0.001, n_seeds: 3 })) }) }));
    const lp = await later.newPage();
    await lp.goto(d.url + "/");
    await lp.waitForFunction(() => /best \+ noise/.test(document.querySelector("#chart").textContent),
                             null, { timeout: 30000 });
    check(true, "a noise band is drawn when /v1/noise answers");
    await lp.waitForFunction(() => /\u00b1.*n=3/.test(document.querySelector("#leaderboard tbody").textContent),
                             null, { timeout: 30000 });
    check(true, "grouped leaderboard rows show mean \u00b1 sd (n)");
    await lp.screenshot({ path: path.join(OUT, "later-api.png") });
    await later.close();

    // the live feed refused once (503: the daemon's stream cap): EventSource
    // gives up on an error reply, the page tries again by itself
    const busy = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    let streams = 0;
    await busy.route("**/v1/events/stream*", (r) => streams++ === 0
      ? r.fulfill({ status: 503, contentType: "application/json",
                    body: '{"error":{"code":"too_many_streams","message":"at most 32"}}' })
      : r.continue());
    const retry = await busy.newPage();
    await retry.goto(d.url + "/");
    await retry.waitForFunction(() => /\blive\b/.test(document.getElementById("summary").textContent),
                             null, { timeout: 45000 });
    check(streams >= 2, `after a 503 the page opens the live feed again (${streams} attempts)`);
    await busy.close();

    check(foreign.length === 0, "no request left the machine" +
          (foreign.length ? ": " + foreign.join(", ") : ""));
    check(consoleErrors.length === 0, "no script errors" +
          (consoleErrors.length ? ": " + consoleErrors.join("; ") : ""));

    fs.writeFileSync(path.join(OUT, "measurements.json"), JSON.stringify(perf, null, 2) + "\n");
    console.log(`page: ${perf.page_bytes} bytes (${perf.files.map((f) => f.name + " " + f.bytes).join(", ")})`);
    console.log(`first paint ${perf.paint["first-paint"]} ms, first contentful paint ` +
                `${perf.paint["first-contentful-paint"]} ms, load ${perf.load_ms} ms`);
    console.log("screenshots in " + OUT);
  } finally {
    if (browser) await browser.close().catch(() => {});
    await L.stopDaemon(d);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main().then(() => {
  if (!process.exitCode) console.log("PASS: dashboard");
}).catch((e) => {
  if (!process.exitCode) console.error("FAIL: " + (e && e.stack ? e.stack : e));
  process.exitCode = 1;
});
