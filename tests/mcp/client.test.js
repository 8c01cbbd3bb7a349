// client.test.js - the MCP server against the official TypeScript SDK's
// client (@modelcontextprotocol/sdk, pinned in package-lock.json), over both
// transports: `nightshift mcp` on stdio and the daemon's /mcp (Streamable
// HTTP), each against a real daemon with a tiny dataset. Then a scripted
// short night (submit, wait, adopt or not, submit) on stdio, written as a
// transcript, and the latency of 200 tool calls on loopback per transport.
//
//   NIGHTSHIFT_BIN=build/nightshift NIGHTSHIFT_MCP_OUT=DIR node tests/mcp/client.test.js
"use strict";

const { spawn, spawnSync } = require("child_process");
const fs = require("fs");
const os = require("os");
const path = require("path");
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");
const { LATEST_PROTOCOL_VERSION } = require("@modelcontextprotocol/sdk/types.js");

const BIN = process.env.NIGHTSHIFT_BIN;
const OUT = process.env.NIGHTSHIFT_MCP_OUT || fs.mkdtempSync(path.join(os.tmpdir(), "mcp-out-"));
const TOKEN = "mcp-test-token";
const TINY = {
  dataset: "tiny", token_budget: 2000,
  model: { depth: 1, n_embd: 32, n_head: 2, seq_len: 32 },
  train: { batch_size: 4, total_batch_tokens: 128 },
};
// A run long enough to still be running while another waits in the queue.
const LONG = Object.assign({}, TINY, { token_budget: 5000000, name: "long" });
// A run that trains for 90 s: longer than a client's default 60 s timeout.
const NINETY = Object.assign({}, TINY, { token_budget: 0, time_budget_s: 90, name: "ninety" });
const TOOLS_LIST_BOUND = 24000;  // bytes of tools/list
const OUTPUT_BOUND = 40000;      // bytes of the largest tool result (Claude Code caps ~25k tokens)
const sizes = [];
const HUGE = { dataset: "tiny", model: { depth: 64, n_embd: 16384, n_head: 128 } };

let failures = 0;
function check(cond, what) {
  if (cond) {
    console.log("ok   " + what);
  } else {
    console.log("FAIL " + what);
    failures++;
  }
}

let tokenFile = null;
function prepState() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "nightshift-mcp-"));
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
  fs.writeFileSync(path.join(dir, "corpus.jsonl"), text);
  const state = path.join(dir, "state");
  const r = spawnSync(BIN, ["prep", "--dir", state, "--name", "tiny", "--vocab", "300",
                            "--val-fraction", "0.1", "--quiet", path.join(dir, "corpus.jsonl")],
                      { encoding: "utf8" });
  if (r.status !== 0) throw new Error("prep failed: " + r.stderr);
  // The token in a file, as daemon/README.md's JSON configuration reads it.
  tokenFile = path.join(dir, "token");
  fs.writeFileSync(tokenFile, TOKEN + "\n", { mode: 0o600 });
  return { dir, state };
}

function startDaemon(state) {
  return new Promise((resolve, reject) => {
    const proc = spawn(BIN, ["serve", "--dir", state, "--listen", "127.0.0.1:0", "--token", TOKEN,
                             "--slots", "1", "--threads-per-slot", "1"],
                       { stdio: ["ignore", "pipe", "pipe"] });
    let out = "", err = "";
    const timer = setTimeout(() => reject(new Error("daemon did not start: " + err)), 30000);
    proc.stderr.on("data", (d) => { err += d; if (err.length > 20000) err = err.slice(-10000); });
    proc.stdout.on("data", (d) => {
      out += d;
      const m = /listening on (http:\/\/[^\s]+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, url: m[1], log: () => err });
      }
    });
    proc.on("exit", (code) => { clearTimeout(timer); reject(new Error("daemon exited " + code + ": " + err)); });
  });
}

function stopDaemon(d) {
  return new Promise((resolve) => {
    d.proc.removeAllListeners("exit");
    d.proc.on("exit", (code, sig) => resolve({ code, sig }));
    d.proc.kill("SIGTERM");
    setTimeout(() => d.proc.kill("SIGKILL"), 20000);
  });
}

async function connect(kind, url) {
  const client = new Client({ name: "nightshift-test", version: "1.0.0" });
  const transport = kind === "stdio"
    ? new StdioClientTransport({ command: BIN, args: ["mcp", "--url", url, "--token-file", tokenFile],
                                 stderr: "inherit" })
    : new StreamableHTTPClientTransport(new URL(url + "/mcp"), {
        requestInit: { headers: { Authorization: "Bearer " + TOKEN } } });
  await client.connect(transport);
  return client;
}

// Every tool result's size is recorded: the largest is checked against a bound.
let largest = { bytes: 0, what: "" };
async function call(client, name, args, opts) {
  const r = await client.callTool({ name, arguments: args || {} }, undefined, opts);
  const bytes = JSON.stringify(r).length;
  if (bytes > largest.bytes) largest = { bytes, what: name + " " + JSON.stringify(args || {}) };
  return r;
}

// Everything the acceptance asks of one transport.
async function exercise(kind, url) {
  const client = await connect(kind, url);
  const tag = `[${kind}] `;
  check(client.getServerVersion().name === "nightshift", tag + "initialize: server info");
  const tools = (await client.listTools()).tools;
  const names = tools.map((t) => t.name);
  for (const want of ["submit", "cost", "status", "list_experiments", "get_experiment", "cancel",
                      "leaderboard", "best", "noise", "diff", "wait", "datasets"])
    check(names.includes(want), tag + "tools/list has " + want);
  check(tools.every((t) => t.inputSchema && t.outputSchema && t.description.length > 40),
        tag + "every tool has an input and an output schema and a description");
  const submitTool = tools.find((t) => t.name === "submit");
  check(submitTool.inputSchema.$defs.spec.properties.model.properties.depth.type === "integer" &&
        submitTool.inputSchema.properties.spec.$ref === "#/$defs/spec",
        tag + "submit's spec schema comes from the spec table, once, under $defs");
  const listBytes = JSON.stringify(tools).length;
  sizes.push(`${kind}: tools/list ${listBytes} bytes`);
  check(listBytes < TOOLS_LIST_BOUND, tag + `tools/list is ${listBytes} bytes (bound ${TOOLS_LIST_BOUND})`);

  const schema = JSON.parse((await client.readResource({ uri: "nightshift://schema/spec" }))
                              .contents[0].text);
  check(schema.properties.train.properties.matrix_lr.default === 0.04 &&
        schema.additionalProperties === false, tag + "the spec schema resource");

  const cost = await call(client, "cost", { spec: TINY });
  check(!cost.isError && cost.structuredContent.fits === true, tag + "cost: a tiny spec fits");

  const sub = await call(client, "submit", { spec: Object.assign({ seed: kind === "stdio" ? 1 : 2 }, TINY) });
  check(!sub.isError && sub.structuredContent.experiments.length === 1, tag + "submit a tiny spec");
  const id = sub.structuredContent.experiments[0].id;

  const progress = [];
  const waited = await call(client, "wait", { ids: [id] },
                            { onprogress: (p) => progress.push(p) });
  const row = waited.structuredContent.experiments[0];
  check(!waited.isError && row.status === "succeeded" && typeof row.val_bpb === "number",
        tag + `wait: experiment ${id} ${row.status}, val_bpb ${row.val_bpb}`);
  check(progress.length >= 1 && progress.every((p) => p.total === 1),
        tag + `wait sent ${progress.length} progress notification(s)`);

  const board = await call(client, "leaderboard", { dataset: "tiny" });
  check(!board.isError && board.structuredContent.leaderboard.length >= 1 &&
        typeof board.structuredContent.leaderboard[0].val_bpb === "number",
        tag + "leaderboard of the scope");

  const res = JSON.parse((await client.readResource({ uri: `nightshift://experiments/${id}` }))
                           .contents[0].text);
  check(res.spec && res.result && res.result.val_bpb === row.val_bpb && res.via === "mcp" &&
        res.source === "mcp", tag + "the experiment resource: spec, result, filed as source mcp");

  // A queued run cancelled: the long one holds the only slot.
  const two = await call(client, "submit", { specs: [LONG, Object.assign({}, TINY, { seed: 99, name: kind })] });
  const [longId, queuedId] = two.structuredContent.experiments.map((e) => e.id);
  const cancelled = await call(client, "cancel", { id: queuedId });
  check(!cancelled.isError && cancelled.structuredContent.status === "cancelled",
        tag + `cancel the queued experiment ${queuedId}`);
  await call(client, "cancel", { id: longId });

  const refused = await call(client, "submit", { spec: HUGE });
  check(refused.isError === true && refused.structuredContent.error.code === "does_not_fit",
        tag + "a spec too large: an error result with does_not_fit");
  const invalid = await call(client, "submit", { spec: { model: { n_head: 7 } } });
  check(invalid.isError === true && invalid.structuredContent.error.code === "invalid_spec",
        tag + "an invalid spec: an error result with invalid_spec");

  const prompt = await client.getPrompt({ name: "research_night" });
  check(prompt.messages[0].content.text.includes("val_bpb"), tag + "the research-night prompt");
  await client.ping();
  check(true, tag + "ping");
  return client;
}

// A 90 s run waited for with the SDK's default request timeout (60 s): each
// call returns within it, saying what is pending, and calling again
// continues until the run ends.
async function longWait(url) {
  const client = await connect("http", url);
  const sub = await call(client, "submit", { spec: NINETY });
  const id = sub.structuredContent.experiments[0].id;
  const t0 = Date.now();
  let calls = 0, longest = 0, last = null;
  for (let pending = [id]; pending.length && Date.now() - t0 < 240000; ) {
    const c0 = Date.now();
    const r = await client.callTool({ name: "wait", arguments: { ids: pending } });  // SDK defaults
    longest = Math.max(longest, Date.now() - c0);
    calls++;
    last = r.structuredContent;
    pending = last.pending;
    if (pending.length)
      check(last.timed_out === true && /call wait again/.test(last.message),
            `long wait: call ${calls} returned after ${((Date.now() - c0) / 1000).toFixed(1)} s, pending ${pending}`);
  }
  const secs = (Date.now() - t0) / 1000;
  check(last.experiments[0].status === "succeeded" && calls >= 2 && longest < 60000,
        `long wait: the 90 s run ${last.experiments[0].status} after ${secs.toFixed(0)} s in ${calls} wait calls, ` +
        `the longest ${(longest / 1000).toFixed(1)} s, with the SDK's default timeout`);
  sizes.push(`90 s run: ${calls} wait calls over ${secs.toFixed(0)} s, the longest ${(longest / 1000).toFixed(1)} s`);
  await client.close();
}

function quantile(sorted, q) {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

// 200 calls of one tool: median and p95 in ms.
async function latency(client, kind, out) {
  const times = [];
  for (let i = 0; i < 200; i++) {
    const t0 = process.hrtime.bigint();
    await call(client, "get_experiment", { id: 1, log_tail_bytes: 0 });
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  times.sort((a, b) => a - b);
  const line = `${kind}: get_experiment x200: median ${quantile(times, 0.5).toFixed(2)} ms, ` +
    `p95 ${quantile(times, 0.95).toFixed(2)} ms`;
  console.log(line);
  out.push(line);
}

// The short night on stdio, every exchange written to the transcript.
async function night(url, transcript) {
  const client = await connect("stdio", url);
  const say = (who, what) => transcript.push(`${who}: ${what}`);
  async function tool(name, args, opts) {
    say("client", `tools/call ${name} ${JSON.stringify(args)}`);
    const r = await call(client, name, args, opts);
    say("server", (r.isError ? "isError " : "") + JSON.stringify(r.structuredContent));
    return r.structuredContent;
  }
  const base = Object.assign({ name: "baseline" }, TINY, { token_budget: 3000 });
  const a = await tool("submit", { spec: base, repeats: 2 });
  await tool("wait", { ids: a.experiments.map((e) => e.id), timeout_s: 120 },
             { onprogress: (p) => say("server", `notifications/progress ${p.progress}/${p.total} ${p.message}`) });
  const noise = await tool("noise", { dataset: "tiny" });
  const best = await tool("best", { dataset: "tiny" });
  const variant = Object.assign({}, base, { name: "wider", parent: a.experiments[0].id,
                                            model: Object.assign({}, base.model, { n_embd: 64 }) });
  const b = await tool("submit", { spec: variant });
  const w = await tool("wait", { ids: [b.experiments[0].id], timeout_s: 120 });
  const d = await tool("diff", { a: a.experiments[0].id, b: b.experiments[0].id });
  const sd = noise && typeof noise.sd === "number" ? noise.sd : 0;
  const adopt = d.val_bpb_delta !== null && d.val_bpb_delta < -sd;
  say("client", `decision: ${adopt ? "adopt wider" : "keep baseline"} (delta ${d.val_bpb_delta}, noise sd ${sd})`);
  const next = Object.assign({}, adopt ? variant : base, { name: "next", parent: (adopt ? b : a).experiments[0].id });
  next.train = Object.assign({}, next.train, { matrix_lr: 0.03 });
  const c = await tool("submit", { spec: next });
  await tool("wait", { ids: [c.experiments[0].id], timeout_s: 120 });
  check(w.experiments[0].status === "succeeded" && best, "the scripted night ran (transcript written)");
  await client.close();
}

async function main() {
  if (!BIN) throw new Error("NIGHTSHIFT_BIN is not set");
  fs.mkdirSync(OUT, { recursive: true });
  console.log("SDK protocol revision: " + LATEST_PROTOCOL_VERSION);
  const { dir, state } = prepState();
  const d = await startDaemon(state);
  const numbers = [];
  try {
    const viaStdio = await exercise("stdio", d.url);
    const viaHttp = await exercise("http", d.url);
    const get = await call(viaHttp, "get_experiment", { id: 1 });
    check(get.structuredContent.experiment.metrics.length <= 50, "get_experiment: metrics downsampled");
    const page = await call(viaHttp, "list_experiments", { limit: 2 });
    const next = await call(viaHttp, "list_experiments", { limit: 2, cursor: page.structuredContent.next_cursor });
    check(typeof page.structuredContent.next_cursor === "string" &&
          next.structuredContent.experiments[0].id < page.structuredContent.experiments[1].id,
          "list_experiments: the cursor gives the next page");
    await longWait(d.url);
    await latency(viaStdio, "stdio", numbers);
    await latency(viaHttp, "http", numbers);
    await viaStdio.close();
    await viaHttp.close();
    const transcript = [];
    await night(d.url, transcript);
    fs.writeFileSync(path.join(OUT, "transcript.txt"), transcript.join("\n") + "\n");
    fs.writeFileSync(path.join(OUT, "latency.txt"), numbers.join("\n") + "\n");
    sizes.push(`largest tool result: ${largest.bytes} bytes (${largest.what})`);
    check(largest.bytes < OUTPUT_BOUND, `the largest tool result is ${largest.bytes} bytes (bound ${OUTPUT_BOUND})`);
    console.log(sizes.join("\n"));
    fs.writeFileSync(path.join(OUT, "sizes.txt"), sizes.join("\n") + "\n");
  } finally {
    const st = await stopDaemon(d);
    check(st.code === 0, "the daemon stopped cleanly");
    if (failures) console.log(d.log().slice(-3000));
    fs.rmSync(dir, { recursive: true, force: true });
  }
  console.log(failures ? `${failures} check(s) failed` : "all checks passed");
  process.exitCode = failures ? 1 : 0;
}

main().catch((e) => {
  console.error("FAIL: " + (e && e.stack ? e.stack : e));
  process.exitCode = 1;
});
