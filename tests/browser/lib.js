// lib.js - shared by the browser test and the dashboard benchmark: a real
// daemon on a loopback port with a tiny dataset, its HTTP API, and Debian's
// chromium started headless with a fresh profile and no background traffic.
"use strict";

const { spawn, spawnSync } = require("child_process");
const fs = require("fs");
const os = require("os");
const path = require("path");

const BIN = process.env.NIGHTSHIFT_BIN;
const TOKEN = "browser-test-token";

function fail(msg) {
  console.error("FAIL: " + msg);
  process.exitCode = 1;
  throw new Error(msg);
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

// A state directory with the tiny dataset the Criterion tests use.
function prepState() {
  if (!BIN) fail("NIGHTSHIFT_BIN is not set");
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "nightshift-browser-"));
  const subjects = ["the cat", "a dog", "the bird", "my friend"];
  const verbs = ["sat on", "ran to", "looked at", "walked past"];
  const objects = ["the mat", "the park", "a tree", "the house"];
  let text = "";
  for (let d = 0; d < 40; d++) {
    let doc = "";
    for (let s = 0; s < 30; s++)
      doc += `${subjects[(d + s) % 4]} ${verbs[(d * 3 + s) % 4]} ${objects[(d + 2 * s) % 4]}. `;
    text += JSON.stringify({ text: doc }) + "\n";
  }
  const corpus = path.join(dir, "corpus.jsonl");
  fs.writeFileSync(corpus, text);
  const state = path.join(dir, "state");
  const r = spawnSync(BIN, ["prep", "--dir", state, "--name", "tiny", "--vocab", "300",
                            "--val-fraction", "0.1", "--quiet", corpus], { encoding: "utf8" });
  if (r.status !== 0) fail("prep failed: " + r.stderr);
  return { dir, state };
}

// Start `nightshift serve` and resolve with {proc, url, pid} once it listens.
function startDaemon(state, extra) {
  return new Promise((resolve, reject) => {
    const proc = spawn(BIN, ["serve", "--dir", state, "--listen", "127.0.0.1:0", "--token", TOKEN]
                              .concat(extra || []),
                       { stdio: ["ignore", "pipe", "pipe"] });
    let out = "", err = "";
    const timer = setTimeout(() => reject(new Error("daemon did not start: " + err)), 20000);
    proc.stderr.on("data", (d) => { err += d; if (err.length > 20000) err = err.slice(-10000); });
    proc.stdout.on("data", (d) => {
      out += d;
      const m = /listening on (http:\/\/[^\s]+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, url: m[1], pid: proc.pid, stderr: () => err });
      }
    });
    proc.on("exit", (code) => reject(new Error("daemon exited " + code + ": " + err)));
  });
}

function stopDaemon(d) {
  return new Promise((resolve) => {
    if (!d || d.proc.exitCode !== null) return resolve();
    const t = setTimeout(() => d.proc.kill("SIGKILL"), 20000);
    d.proc.once("exit", () => { clearTimeout(t); resolve(); });
    d.proc.kill("SIGTERM");
  });
}

async function api(d, method, p, body, token) {
  const headers = { "Content-Type": "application/json" };
  if (token) headers.Authorization = "Bearer " + token;
  const r = await fetch(d.url + p, { method, headers, body: body ? JSON.stringify(body) : undefined });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch (e) { /* text reply */ }
  return { status: r.status, json, text };
}

// A tiny spec the real engine trains in seconds.
function spec(name, seed, budget, model) {
  return {
    name, seed, dataset: "tiny", time_budget_s: budget,
    model: Object.assign({ depth: 1, n_embd: 32, n_head: 2, seq_len: 32 }, model || {}),
    train: { batch_size: 4, total_batch_tokens: 128 },
    resources: { threads: 1, peak_gflops: 10 },
  };
}

async function submit(d, s) {
  const r = await api(d, "POST", "/v1/experiments", s, TOKEN);
  if (r.status !== 201) fail("submit: HTTP " + r.status + " " + r.text);
  return r.json.id;
}

async function waitFor(what, fn, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) fail("timed out waiting for " + what);
    await sleep(200);
  }
}

async function experiment(d, id) {
  return (await api(d, "GET", "/v1/experiments/" + id)).json;
}

// Debian's chromium binary (the /usr/bin wrapper only adds flags we set
// ourselves), or $NIGHTSHIFT_CHROMIUM.
function chromiumPath() {
  if (process.env.NIGHTSHIFT_CHROMIUM) return process.env.NIGHTSHIFT_CHROMIUM;
  for (const p of ["/usr/lib/chromium/chromium", "/usr/bin/chromium"])
    if (fs.existsSync(p)) return p;
  return null;
}

async function launchBrowser() {
  let chromium;
  try {
    ({ chromium } = require("playwright-core"));
  } catch (e) {
    fail("playwright-core is not installed (tests/browser/run.sh installs it): " + e.message);
  }
  const exe = chromiumPath();
  if (!exe) fail("chromium is not installed (scripts/setup.sh --browser installs it)");
  try {
    return await chromium.launch({
      executablePath: exe,
      headless: true,
      // A fresh temporary profile per launch (playwright's default); nothing
      // may talk to the network but the page itself.
      args: ["--no-sandbox", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--disable-default-apps", "--disable-extensions", "--no-first-run",
             "--disable-domain-reliability", "--disable-client-side-phishing-detection",
             "--metrics-recording-only", "--no-pings", "--disable-dev-shm-usage"],
      timeout: 60000,
    });
  } catch (e) {
    fail("chromium could not start: " + e.message.split("\n").slice(0, 8).join("\n"));
  }
}

// CPU seconds (user + system) of pid so far, from /proc.
function cpuSeconds(pid) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(f[11]) + Number(f[12])) / 100; // utime, stime in clock ticks (USER_HZ = 100)
}

// The frame of a browser run: out created, a daemon on a fresh tiny dataset,
// then body(d, launch), where launch() starts the browser and resolves with
// it. Whatever body does, the browser is closed, the daemon stopped and the
// state removed afterwards.
async function withDaemon(out, body) {
  fs.mkdirSync(out, { recursive: true });
  const { dir, state } = prepState();
  let d = null, browser = null;
  try {
    d = await startDaemon(state);
    return await body(d, async () => (browser = await launchBrowser()));
  } finally {
    if (browser) await browser.close().catch(() => {});
    await stopDaemon(d);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

module.exports = { TOKEN, fail, sleep, prepState, startDaemon, stopDaemon, api, spec, submit,
                   waitFor, experiment, chromiumPath, launchBrowser, cpuSeconds, withDaemon };
