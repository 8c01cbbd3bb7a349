// bench.js - the daemon's CPU share while dashboards watch it: a real
// training run (one slot), first a minute with no page open, then a minute
// with ten chromium tabs on the dashboard (ten SSE streams with the status
// snapshot every second). CPU is the daemon process's own utime + stime from
// /proc (its workers are separate processes). Prints one line per phase and
// writes $NIGHTSHIFT_BROWSER_OUT/bench.json.
"use strict";

const fs = require("fs");
const path = require("path");
const L = require("./lib");

const OUT = process.env.NIGHTSHIFT_BROWSER_OUT || "build/browser-out";
const SECONDS = Number(process.env.BENCH_SECONDS || 60);
const TABS = 10;

async function phase(d, label, seconds) {
  const c0 = L.cpuSeconds(d.pid), t0 = Date.now();
  await L.sleep(seconds * 1000);
  const cpu = L.cpuSeconds(d.pid) - c0, wall = (Date.now() - t0) / 1000;
  const r = { phase: label, wall_s: wall, daemon_cpu_s: cpu, daemon_cpu_percent: 100 * cpu / wall };
  console.log(`${label}: daemon CPU ${cpu.toFixed(2)} s over ${wall.toFixed(1)} s = ` +
              `${r.daemon_cpu_percent.toFixed(2)}% of one core`);
  return r;
}

async function main() {
  await L.withDaemon(OUT, async (d, launch) => {
    const id = await L.submit(d, L.spec("bench", 1, 2 * SECONDS + 30, { depth: 2, n_embd: 64 }));
    await L.waitFor("the run to start", async () =>
      (await L.experiment(d, id)).status === "running", 30000);
    await L.sleep(2000);
    const results = [await phase(d, "training, no page open", SECONDS)];
    const browser = await launch();
    // One context per tab: a browser allows six HTTP/1.1 connections per host
    // and profile, and each dashboard holds one stream open (the page closes
    // it while hidden, but headless tabs are never hidden).
    for (let i = 0; i < TABS; i++) {
      const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
      const p = await ctx.newPage();
      await p.goto(d.url + "/");
      await p.waitForFunction(() => /live/.test(document.getElementById("summary").textContent));
    }
    await L.sleep(2000);
    results.push(await phase(d, `training, ${TABS} dashboard tabs open`, SECONDS));
    fs.writeFileSync(path.join(OUT, "bench.json"), JSON.stringify(results, null, 2) + "\n");
  });
}

main().catch((e) => {
  console.error("FAIL: " + (e && e.stack ? e.stack : e));
  process.exitCode = 1;
});
