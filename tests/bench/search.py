#!/usr/bin/python3
"""search.py - `make bench-search`: search strategies side by side on one daemon.

    /usr/bin/python3 tests/bench/search.py --bin build/nightshift [--quick]
        [--k K] [--strategies a,b,...] [--runs R] [--tokens B] [--eval-tokens E]
        [--remeasure N] [--slots S] [--out DIR] [--corpus DIR] [--keep]
    /usr/bin/python3 tests/bench/search.py --merge A/search.json B/search.json --out DIR

Every strategy drives the same daemon over its HTTP API (same engine, same
data, same base spec, same search space: experiments/search/space.json):

  random        Optuna's RandomSampler through experiments/bridges/optuna_bridge.py
                (uniform draws, no confirmation seeds: what a researcher runs)
  optuna-tpe    Optuna's TPESampler through the bridge, no pruner, 5 random
                startup trials (the agent's tpe startup) instead of Optuna's 10:
                with 10 a night of 10 runs would be random search throughout
  optuna-median Optuna's TPESampler (startup 5) + MedianPruner (the bridge
                reports training losses and cancels the runs it prunes)
  climb         the reference agent, --strategy climb
  agent-tpe     the reference agent, --strategy tpe
  agent-asha    the reference agent, --strategy tpe, on a second daemon started
                with --prune asha (successive halving is a mode of the daemon)
  (also available: agent-random, optuna-sha, optuna-tpe10: Optuna's defaults)

Every strategy of a seed k draws with seed k: the bridge's samplers all start
from the same random draws (Optuna's TPE starts with its sampler's random
trials), so random and the TPEs share their first points, common random
numbers that make their differences less noisy.

A night is one strategy with one search seed k. Every night has its own
dataset name (the same bytes prepared again under another name), so that no
night sees another's results: the daemon's duplicates, the pruners' medians,
ASHA's rungs and the agent's scope are all per dataset. A night gets R
full-run equivalents (R x B training tokens; a pruned, cancelled or
lower-rung run counts by the tokens it trained). The harness counts the
tokens of the night's runs (finished runs' tokens + running runs' full
budgets); once that reaches R x B it stops the strategy, cancels what is
queued and lets the running runs finish, so a night may overrun by less than
one run (the table shows what each night spent).

The night's answer, for every strategy alike: what the user reads in the
morning, the daemon's GET /v1/best of the night's scope (the configuration
with the lowest mean val_bpb over its seeds at the full budget; for a
strategy that runs each point once, its lowest val_bpb). The agent's own
pick (its noise-aware rule, from its state file) is kept in OUT/search.json
beside it. That configuration is re-measured on N fresh seeds (1000..), full budget,
never pruned; a night's score is their mean. The table gives, per strategy,
the mean +- sd over the K nights of that score, what the nights themselves
read for their best, runs, runs wasted (failed/diverged/oom/timeout,
duplicates, pruned by a pruner, refused specs) and the anytime curve; then
make run's default (agent-tpe) against each other strategy, paired by search
seed (mean +- standard error of the K differences), and its answer against
the baseline its nights ran (the agent's first run; one seed a night).

The anytime curve: re-measuring every intermediate best would cost N runs
per improvement, so only the final best is re-measured. The curve is the
night's running best val_bpb AS READ (one seed, the lucky one) against the
full-run equivalents spent: its median and interquartile range over the K
nights at 25/50/75/100% of the budget in the table; the plot draws the mean
with the re-measured final score beside it.

Sizing. The defaults: a full run is 65,536 training tokens (16 steps of
the baseline's 4,096; the budget the issue's first measurement used) scored
on 16,384 validation tokens; a night is R = 8 full-run equivalents, plus 3
re-measure runs; K = 5 seeds of 6 strategies is 30 nights, about 330 runs.
Two slots of one thread each (two 1-thread slots finish more runs an hour at
a token budget than one 2-thread slot: README, Slots; and two lanes keep the
bridge and the agent each with two runs in flight). A 1-thread baseline run
of 65,536 tokens took 10-11 s here (7 s training at ~9,400 tok/s, 2 s start,
1-2 s evaluation); a uniform draw from the space averages about twice the
baseline's work (depth 2-8, mean 5; n_embd's mean square about 162^2). On a
quiet 2-core AMD EPYC the default run took 1:23 (a random night 3-4
minutes, an agent night half that: its local moves stay near the small
baseline). Eight runs are too few for a model: the agent's tpe asks its
model only after 5 startup draws. The other sizing of the same hour is
`--strategies random,optuna-tpe,agent-tpe --runs 16 --tokens 32768`, 16
runs of 8 steps a night, 15 nights (36 minutes); at 16 runs no strategy
was told apart. The record behind make run's default
(experiments/search/bench/2026-12-03-32runs.md) doubles the nights:
`--runs 32`, 1:52 on a 2-core machine that was part of the time running the
test suite too (a night of 32 runs about 5 minutes when it was not).
--runs, --tokens, --k and --strategies scale it. --quick: K = 1, 6 runs of 16,384 tokens (4 steps),
evaluation 4,096 tokens, a few minutes: enough for Optuna's TPE to ask its
model once and the agents to propose past the baseline, not to rank
anything.

Output: the Markdown table on stdout and in OUT/search.md, the per-night
data in OUT/search.json, the plot in OUT/search.png (matplotlib; an SVG
written by hand when matplotlib is missing). --merge runs nothing: it prints
the table of the nights in several search.json files of the same night size
(strategies run apart, a stopped run resumed with --k-from and other seeds).
"""
import argparse
import json
import math
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "experiments", "search"))
import corpus as corpusmod  # noqa: E402
BRIDGE = os.path.join(ROOT, "experiments", "bridges", "optuna_bridge.py")
SPACE = os.path.join(ROOT, "experiments", "search", "space.json")
BASELINE = os.path.join(ROOT, "experiments", "specs", "baseline.json")
PY = "/usr/bin/python3"

STRATEGIES = {
    # name: (driver, options, daemon)
    "random": ("bridge", ["--sampler", "random", "--pruner", "none"], "main"),
    "optuna-tpe": ("bridge", ["--sampler", "tpe", "--startup", "5", "--pruner", "none"], "main"),
    "optuna-median": ("bridge", ["--sampler", "tpe", "--startup", "5", "--pruner", "median"],
                      "main"),
    "optuna-tpe10": ("bridge", ["--sampler", "tpe", "--pruner", "none"], "main"),
    "climb": ("agent", ["--strategy", "climb"], "main"),
    "agent-tpe": ("agent", ["--strategy", "tpe"], "main"),
    "agent-asha": ("agent", ["--strategy", "tpe"], "asha"),
    "agent-random": ("agent", ["--strategy", "random"], "main"),
    # tpe as it was before the baseline's seeds became 1: three first
    "agent-tpe-3": ("agent", ["--strategy", "tpe", "--noise-seeds", "3"], "main"),
    "optuna-sha": ("bridge", ["--sampler", "tpe", "--pruner", "sha"], "main"),
}
DEFAULT_STRATEGIES = "random,optuna-tpe,optuna-median,climb,agent-tpe,agent-asha"
ACTIVE = ("queued", "running")
FAILED = ("failed", "diverged", "oom", "timeout", "crashed")
CORPUS_BYTES = corpusmod.CORPUS_BYTES
REMEASURE_SEED = 1000
NIGHT_LIMIT_S = 1800  # a night that takes longer is cut (a hung run, a stuck agent)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def fmt_s(s):
    s = int(max(s, 0))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Api:
    def __init__(self, url, token):
        self.url, self.token = url, token

    def call(self, method, path, body=None):
        headers = {}
        data = None
        if method == "POST":
            headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self.token}"}
            data = json.dumps(body if body is not None else {}).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=15) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw)
            except ValueError:
                return e.code, None

    def get(self, path):
        status, doc = self.call("GET", path)
        if status != 200:
            raise RuntimeError(f"GET {path}: HTTP {status}: {doc}")
        return doc

    def experiments(self, dataset):
        out, after = [], None
        while True:
            q = f"/v1/experiments?dataset={dataset}&order=id&limit=1000" + (f"&after={after}" if after else "")
            doc = self.get(q)
            out += doc["experiments"]
            after = doc.get("next_after")
            if not after:
                return out


class Daemon:
    """One `nightshift serve` on loopback, a free port, a temporary state dir."""

    def __init__(self, args, work, name, prune, extra=()):
        self.dir = os.path.join(work, name)
        os.makedirs(self.dir, exist_ok=True)
        self.token = secrets.token_hex(16)
        self.secret_file = os.path.join(self.dir, "agent.secret")
        with open(self.secret_file, "w") as f:
            f.write(secrets.token_hex(16))
        self.agent_port = free_port()
        self.log = open(os.path.join(self.dir, "daemon.log"), "w")
        cmd = [args.bin, "serve", "--dir", self.dir, "--listen", "127.0.0.1:0",
               "--slots", str(args.slots), "--threads-per-slot", str(args.threads),
               "--token", self.token, "--prune", prune, "--agent-rate", "0",
               "--agent-url", f"http://127.0.0.1:{self.agent_port}/hook",
               "--asha-eta", str(args.asha_eta), "--asha-rungs", str(args.asha_rungs),
               "--agent-secret-file", self.secret_file] + list(extra)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     start_new_session=True)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError(f"the daemon did not start ({line.strip()}); see {self.dir}/daemon.log")
        self.url = line.split("listening on", 1)[1].strip()
        self.api = Api(self.url, self.token)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def prep_corpus(args, work):
    """The search corpus: 1 MB of the Brown corpus, every fifth document from
    the first on (all fifteen genres), then from the second, in order
    (experiments/search/corpus.py, which the landscapes read it with too)."""
    brown = os.path.join(args.corpus, "brown")
    if not os.path.isdir(brown):
        subprocess.run(["bash", os.path.join(ROOT, "scripts", "fetch-corpus.sh"), args.corpus],
                       check=True)
    text = corpusmod.bench_text(brown, CORPUS_BYTES)
    path = os.path.join(work, "search.txt")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path, len(text.encode())


def prep_dataset(args, daemon, corpus, name):
    # Byte vocabulary (no tokenizer to train), the last 10% the validation
    # split, no test split: nothing here reads one.
    subprocess.run([args.bin, "prep", "--dir", daemon.dir, "--name", name, "--vocab", "256",
                    "--test-fraction", "0", "--quiet", corpus], check=True,
                   stdout=subprocess.DEVNULL)


def exp_tokens(api, e, cache):
    """Training tokens an experiment used (finished: cached), and its budget."""
    eid = e["id"]
    if eid in cache:
        return cache[eid]
    d = api.get(f"/v1/experiments/{eid}")
    spec = d["spec"]
    step = spec["train"]["total_batch_tokens"]
    res = d.get("result") or {}
    if res.get("total_tokens"):
        used = int(res["total_tokens"])
    else:
        steps = [m.get("step", 0) for m in d.get("metrics") or []]
        steps.append((d.get("progress") or {}).get("step") or 0)
        used = max(steps) * step
    # A run trains whole steps: it stops after the step that reaches its budget
    # (an ASHA rung of B/9 may be less than one step).
    budget = int(spec["token_budget"])
    out = (used, budget, d, math.ceil(budget / step) * step)
    if d["status"] not in ACTIVE:
        cache[eid] = out
    return out


def stop_proc(p, grace=20):
    if p and p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def cancel_active(api, dataset):
    for e in api.experiments(dataset):
        if e["status"] == "queued":
            api.call("POST", f"/v1/experiments/{e['id']}/cancel")


def wait_idle(api, dataset, limit=600):
    t0 = time.time()
    while time.time() - t0 < limit:
        if not any(e["status"] in ACTIVE for e in api.experiments(dataset)):
            return
        time.sleep(0.5)
    for e in api.experiments(dataset):
        if e["status"] in ACTIVE:
            api.call("POST", f"/v1/experiments/{e['id']}/cancel")


class Progress:
    def __init__(self, n_nights):
        self.t0 = time.time()
        self.n = n_nights
        self.done = 0
        self.last = 0

    def show(self, night, label, force=False):
        now = time.time()
        if not force and now - self.last < 5:
            return
        self.last = now
        el = now - self.t0
        frac = (self.done + night) / self.n if self.n else 1
        eta = el / frac - el if frac > 0.02 else float("nan")
        log(f"bench-search: {label} | night {self.done + 1}/{self.n} | elapsed {fmt_s(el)}"
            + (f" | ETA {fmt_s(eta)}" if math.isfinite(eta) else ""))


def run_night(args, daemons, corpus, strategy, k, prog, work):
    driver, opts, which = STRATEGIES[strategy]
    dm = daemons[which]
    api = dm.api
    dataset = f"{strategy}-k{k}"
    prep_dataset(args, dm, corpus, dataset)
    if which != "main":  # the re-measure runs on the main daemon
        prep_dataset(args, daemons["main"], corpus, dataset)
    with open(BASELINE) as f:
        base = json.load(f)
    base.pop("time_budget_s", None)
    base.update(dataset=dataset, token_budget=args.tokens, eval_tokens=args.eval_tokens)
    base_path = os.path.join(work, f"base-{dataset}.json")
    with open(base_path, "w") as f:
        json.dump(base, f)
    budget = args.runs * args.tokens
    nlog = open(os.path.join(work, f"{dataset}.log"), "w")
    bridge_log = os.path.join(work, f"{dataset}.trials.jsonl")
    agent_state = os.path.join(work, f"{dataset}.agent.json")
    max_proposals, seeds = None, 0
    if driver == "bridge":
        cmd = [PY, BRIDGE, "--url", dm.url, "--token", dm.token, "--base", base_path,
               "--space", args.space, "--trials", "100000", "--seed", str(k),
               "--parallel", str(args.slots), "--poll", "0.5", "--log", bridge_log,
               "--max-tokens", str(int(budget)),
               "--study-name", dataset] + opts
    else:
        if "--noise-seeds" in opts:
            seeds = int(opts[opts.index("--noise-seeds") + 1])
        else:
            seeds = 3 if opts[opts.index("--strategy") + 1] == "climb" else 1
        cmd = [args.bin, "agent", "--listen", f"127.0.0.1:{dm.agent_port}",
               "--secret-file", dm.secret_file, "--baseline", base_path, "--space", args.space,
               "--state", agent_state, "--seed", str(k)] + opts
        # The night's length in runs, as a user who knows when morning comes
        # gives it: the agent spends its last proposals confirming the lowest
        # mean. Not under ASHA, where a run's cost depends on its rung. The
        # agent proposes the baseline too when the queue first runs dry,
        # and the daemon takes that as the harness's (a duplicate): so the
        # night's runs, not less the baseline's; the budget ends the night
        # when the agent's baseline came after the first result instead.
        if which == "main":
            max_proposals = max(1, int(args.runs))
            cmd += ["--max-proposals", str(max_proposals)]
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=nlog, stderr=subprocess.STDOUT, start_new_session=True)
    if driver == "agent":
        # What the agent does first on a fresh daemon: the baseline with its
        # noise seeds (--noise-seeds; by default 3 for climb, 1 for random
        # and tpe; never pruned). The daemon is not fresh, so the harness
        # queues them; the finished events bring the agent in.
        time.sleep(0.3)
        b = dict(base, name="baseline", tags=["baseline", "agent"], prune=False)
        api.call("POST", f"/v1/experiments?repeats={seeds}", b)
    try:
        cache = {}
        stopped = False
        done_polls = 0
        while True:
            exps = api.experiments(dataset)
            spent = committed = 0
            n_done = 0
            for e in exps:
                if e["status"] == "queued":
                    continue
                used, b, d, will = exp_tokens(api, e, cache)
                if e["status"] == "running":
                    committed += will
                else:
                    spent += used
                    n_done += 1
            active = any(e["status"] in ACTIVE for e in exps)
            label = (f"{strategy} k={k}: run {n_done} done, {spent / args.tokens:.1f}/{args.runs}"
                     f" full-run equivalents")
            prog.show(min((spent + committed) / budget, 1.0), label)
            # A bridge keeps the budget itself (--max-tokens, the same rule) and
            # exits when its last run ends; an agent is stopped here.
            over = spent + committed >= budget and driver == "agent"
            # An agent that made its last proposal ends the night when those end
            # (a failed run, or a proposal the daemon refused as a duplicate,
            # leaves budget it will not spend).
            # Twice in a row: the daemon queues the last proposal just after the
            # agent saved its state.
            done = (driver == "agent" and max_proposals is not None and not active
                    and agent_proposals(agent_state) >= max_proposals)
            done_polls = done_polls + 1 if done else 0
            over = over or done_polls >= 2
            if not stopped and (over or proc.poll() is not None
                                or time.time() - t0 > NIGHT_LIMIT_S):
                stopped = True
                stop_proc(proc)
                cancel_active(api, dataset)
            if stopped and not active:
                break
            if stopped:  # what was queued since (an agent's reply, an ASHA promotion)
                for e in exps:
                    if e["status"] == "queued":
                        api.call("POST", f"/v1/experiments/{e['id']}/cancel")
            if stopped and time.time() - t0 > NIGHT_LIMIT_S + 600:
                wait_idle(api, dataset, 1)
            time.sleep(0.5)
    finally:
        stop_proc(proc)  # an interrupted benchmark leaves no strategy running
    nlog.close()
    # What the night did, from the daemon.
    exps = api.experiments(dataset)
    trials = []
    if os.path.exists(bridge_log):
        with open(bridge_log) as f:
            trials = [json.loads(x) for x in f if x.strip()]
    pruned_ids = {t["id"] for t in trials if t.get("outcome") == "pruned" and t.get("id")}
    runs = []
    for e in exps:
        if not e.get("started"):  # queued, then cancelled at the night's end: never ran
            continue
        used, b, d, _ = exp_tokens(api, e, cache)
        runs.append({"id": e["id"], "status": e["status"], "val_bpb": e.get("val_bpb"),
                     "tokens": used, "budget": b, "finished": e.get("finished") or "",
                     "pruned": e["status"] == "pruned" or e["id"] in pruned_ids,
                     "cut": e["status"] == "cancelled" and e["id"] not in pruned_ids,
                     "baseline": "baseline" in (e.get("tags") or [])})
    order = sorted(runs, key=lambda r: (r["finished"], r["id"]))
    curve, cum, best = [], 0, math.inf
    for r in order:
        cum += r["tokens"]
        if r["status"] == "succeeded" and r["budget"] == args.tokens and r["val_bpb"] is not None:
            best = min(best, r["val_bpb"])
        curve.append((cum / args.tokens, best))
    # The night's answer: the daemon's best of the scope, for every strategy.
    best_id, best_read = None, None
    status, doc = api.call("GET", f"/v1/best?dataset={dataset}&budget=tokens:{args.tokens}"
                                  f"&eval_tokens={args.eval_tokens}")
    if status == 200 and isinstance(doc, dict) and isinstance(doc.get("best"), dict):
        best_id, best_read = int(doc["best"]["id"]), doc["best"]["val_bpb"]
    else:
        log(f"bench-search: {dataset}: no best ({status}: {doc})")
    agent_pick = None
    if driver == "agent":
        try:
            with open(agent_state) as f:
                st = json.load(f)
            if st.get("best"):
                agent_pick = {"id": int(st["best"]["id"]), "val_bpb": st["best"]["val_bpb"]}
        except (OSError, ValueError, KeyError):
            pass
    baseline = [r["val_bpb"] for r in runs
                if r["baseline"] and r["status"] == "succeeded" and r["budget"] == args.tokens]
    night = {"strategy": strategy, "k": k, "dataset": dataset, "seconds": time.time() - t0,
             "baseline": baseline,
             "fre": cum / args.tokens, "runs": len(runs),
             "failed": sum(r["status"] in FAILED for r in runs),
             "pruned": sum(r["pruned"] for r in runs),
             "cut": sum(r["cut"] for r in runs),
             "duplicates": sum(t.get("outcome") == "duplicate" for t in trials),
             "refused": sum(t.get("outcome") == "refused" for t in trials),
             "lower_rung": sum(r["budget"] < args.tokens and r["status"] == "succeeded" for r in runs),
             "best_id": best_id, "best_read": best_read, "agent_pick": agent_pick,
             "curve": curve, "remeasured": []}
    if best_id is not None:
        night["remeasured"] = remeasure(args, daemons["main"].api, dm.api, best_id, dataset, prog, label)
        spec = dm.api.get(f"/v1/experiments/{best_id}")["spec"]
        night["best_spec"] = {"model": spec["model"], "train": {
            k2: spec["train"][k2] for k2 in ("matrix_lr", "embedding_lr", "batch_size",
                                             "total_batch_tokens")}}
        # the whole spec, for checking a surrogate against the real answers
        night["answer_spec"] = {k2: v for k2, v in spec.items()
                                if k2 not in ("name", "tags", "dataset", "seed")}
    night["seconds"] = time.time() - t0
    vals = [v for v in night["remeasured"] if v is not None]
    night["score"] = statistics.mean(vals) if vals else None
    return night


def agent_proposals(state_path):
    """The proposals an agent made so far, from its state file (0 before it
    saved one)."""
    try:
        with open(state_path) as f:
            return int(json.load(f).get("proposals", 0))
    except (OSError, ValueError, TypeError):
        return 0


def remeasure(args, api, src_api, best_id, dataset, prog, label):
    spec = src_api.get(f"/v1/experiments/{best_id}")["spec"]
    spec = dict(spec, name=f"remeasure of {dataset} #{best_id}", tags=["remeasure"],
                prune=False, parent=None, priority=1, seed=REMEASURE_SEED,
                token_budget=args.tokens, time_budget_s=0)
    status, doc = api.call("POST", f"/v1/experiments?repeats={args.remeasure}", spec)
    if status not in (200, 201):
        log(f"bench-search: re-measure of #{best_id} refused: {doc}")
        return []
    items = doc if isinstance(doc, list) else doc.get("experiments", [doc])
    ids = [it["id"] for it in items]
    while True:
        ds = [api.get(f"/v1/experiments/{i}") for i in ids]
        if all(d["status"] not in ACTIVE for d in ds):
            break
        prog.show(1.0, label + f"; re-measuring #{best_id} on {args.remeasure} seeds")
        time.sleep(0.5)
    return [(d.get("result") or {}).get("val_bpb") if d["status"] == "succeeded" else None
            for d in ds]


def mean_sd(xs):
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    if not xs:
        return None, None, 0
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else float("nan")), len(xs)


def fmt_ms(m, s, n=None):
    if m is None:
        return "-"
    t = f"{m:.4f}" + (f" ± {s:.4f}" if s is not None and math.isfinite(s) else "")
    return t


def curve_at(curve, x):
    best = math.inf
    for fre, b in curve:
        if fre <= x + 1e-9:
            best = b
    return best


def summarize(args, nights, strategies):
    rows = []
    points = (0.25, 0.5, 0.75, 1.0)
    out = []
    out.append(f"## make bench-search: {len(nights)} nights, K = {args.k}, {args.runs} full-run "
               f"equivalents a night of {args.tokens} tokens, eval_tokens {args.eval_tokens}, "
               f"{args.slots} slot(s) x {args.threads} thread(s), best re-measured on "
               f"{args.remeasure} fresh seeds\n")
    out.append("| strategy | re-measured best (mean ± sd over K) | n | best as read | "
               "runs/night | FRE spent/night | failed | pruned | duplicate | refused | "
               "cut at the end | anytime best-as-read @25/50/75/100%, median [IQR] |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in strategies:
        ns = [n for n in nights if n["strategy"] == s]
        if not ns:
            continue
        m, sd, n = mean_sd([x["score"] for x in ns])
        rm, rsd, _ = mean_sd([x["best_read"] for x in ns])
        any_ = []
        for p in points:
            v = [curve_at(x["curve"], p * args.runs) for x in ns]
            v = [x for x in v if math.isfinite(x)]
            any_.append(median_iqr(v) if v else "-")
        tot = lambda key: sum(x[key] for x in ns)
        out.append(f"| {s} | {fmt_ms(m, sd)} | {n} | {fmt_ms(rm, rsd)} | "
                   f"{statistics.mean(x['runs'] for x in ns):.1f} | "
                   f"{statistics.mean(x['fre'] for x in ns):.2f} | {tot('failed')} | "
                   f"{tot('pruned')} | {tot('duplicates')} | {tot('refused')} | {tot('cut')} | "
                   f"{' / '.join(any_)} |")
        rows.append((s, m, sd, n))
    out.append("")
    out.append("Re-measured best: each night's answer (the daemon's best of the night's scope, "
               "GET /v1/best: the lowest mean val_bpb at the full budget, what `nightshift best` "
               "prints in the morning) trained again on fresh seeds; a night's score is their "
               "mean; best as read is that mean as the night read it. Failed, pruned, duplicate and refused count runs over all K nights "
               "(refused specs cost nothing; cut = runs cancelled when the night's budget ran out). "
               "The anytime columns are the night's running best val_bpb *as read* (one seed, not "
               "re-measured) at that share of the budget, median and interquartile range over "
               "the nights.")
    out.append("")
    rungs = ", ".join([f"B/{args.asha_eta ** r}" for r in range(args.asha_rungs - 1, 0, -1)] + ["B"])
    out.append("Strategies: random = Optuna's RandomSampler through experiments/bridges/"
               "optuna_bridge.py; optuna-tpe = its TPESampler (5 startup trials), optuna-median = "
               "the same + MedianPruner (the bridge cancels what it prunes); climb, agent-tpe = "
               "`nightshift agent --strategy climb|tpe` as make run starts it (climb: three "
               "baseline seeds first; tpe: one, and confirmation seeds for the lowest mean); "
               "agent-tpe-3 = tpe with `--noise-seeds 3`; agent-asha = "
               "`agent --strategy tpe` on a second daemon started with `serve --prune asha "
               f"--asha-eta {args.asha_eta} --asha-rungs {args.asha_rungs}` (rungs {rungs})"
               ". Every strategy of seed k draws with seed k.")
    ranked = sorted([r for r in rows if r[1] is not None], key=lambda r: r[1])
    if len(ranked) >= 2:
        a, b = ranked[0], ranked[1]
        se = math.sqrt((a[2] ** 2 / a[3] if a[3] > 1 else 0) + (b[2] ** 2 / b[3] if b[3] > 1 else 0)) \
            if all(math.isfinite(x[2]) for x in (a, b)) else float("nan")
        gap = b[1] - a[1]
        out.append("")
        out.append(f"Lowest: **{a[0]}** {a[1]:.4f}, ahead of {b[0]} by {gap:.4f}"
                   + (f" = {gap / se:.1f} standard errors of the difference" if se > 0 else
                      " (standard error not measurable with these K)") + ".")
    # make run's default against every other strategy, paired by search seed
    # (every strategy of seed k draws with seed k and re-measures on the same
    # fresh seeds)
    def score(strategy):
        return {n["k"]: n["score"] for n in nights
                if n["strategy"] == strategy and n["score"] is not None}

    mine = score("agent-tpe")
    parts = []
    for s in strategies:
        if s == "agent-tpe" or not mine:
            continue
        theirs = score(s)
        d = [mine[k] - theirs[k] for k in sorted(mine) if k in theirs]
        if len(d) >= 2:
            m, se = statistics.mean(d), statistics.stdev(d) / math.sqrt(len(d))
            parts.append(f"{s} {m:+.4f} ± {se:.4f}" + (f" ({m / se:+.1f} SE" if se > 0 else " (")
                         + f", K = {len(d)})")
    if parts:
        out.append("")
        out.append("agent-tpe (make run's default) against the others, paired by search seed: "
                   "its re-measured best minus theirs (negative: the default is better): " +
                   ", ".join(parts) + ".")
    # the default's answer against the baseline it started from
    base = [v for n in nights if n["strategy"] == "agent-tpe" for v in n.get("baseline", [])
            if v is not None]
    if mine and base and len(mine) >= 2:
        # The nights run the baseline on the daemon's default seed, so its runs
        # are often one run repeated bit for bit: its uncertainty is then the
        # seed noise, pooled over the seeds each answer was re-measured on.
        seeds = len(set(base))
        groups = [[v for v in n["remeasured"] if v is not None] for n in nights
                  if n["strategy"] == "agent-tpe"]
        ss = sum(sum((v - statistics.mean(g)) ** 2 for v in g) for g in groups if len(g) > 1)
        df = sum(len(g) - 1 for g in groups if len(g) > 1)
        noise = math.sqrt(ss / df) if df else float("nan")
        bm, dm, dsd = statistics.mean(base), statistics.mean(mine.values()), \
            statistics.stdev(mine.values())
        se = math.sqrt(noise ** 2 / seeds + dsd ** 2 / len(mine))
        out.append("")
        out.append(f"The baseline, as agent-tpe's nights ran it: {bm:.4f} ({len(base)} runs, "
                   f"{seeds} distinct result{'s' if seeds > 1 else ''}); the default's re-measured "
                   f"best {dm - bm:+.4f} from it" +
                   (f" ({(dm - bm) / se:+.1f} standard errors of the difference, the baseline's "
                    f"from the seed noise sd {noise:.4f} of the re-measured answers over {df} df)."
                    if se > 0 else "."))
    return "\n".join(out) + "\n"


def median_iqr(v):
    """"m [q1, q3]" of a list (quartiles by linear interpolation, as numpy's
    default; the median alone below four values)."""
    v = sorted(v)
    if len(v) < 4:
        return f"{statistics.median(v):.3f}"
    q = statistics.quantiles(v, n=4, method="inclusive")
    return f"{q[1]:.3f} [{q[0]:.3f}, {q[2]:.3f}]"


def plot(args, nights, strategies, path):
    grid = [i * args.runs / 40 for i in range(41)]
    series = []
    for s in strategies:
        ns = [n for n in nights if n["strategy"] == s]
        if not ns:
            continue
        ys = []
        for x in grid:
            v = [curve_at(n["curve"], x) for n in ns]
            v = [y for y in v if math.isfinite(y)]
            ys.append(statistics.mean(v) if len(v) == len(ns) else None)
        m, sd, _ = mean_sd([n["score"] for n in ns])
        series.append((s, ys, m, sd))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return plot_svg(args, grid, series, path[:-4] + ".svg")
    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    for i, (s, ys, m, sd) in enumerate(series):
        xs = [x for x, y in zip(grid, ys) if y is not None]
        line, = ax.step(xs, [y for y in ys if y is not None], where="post", label=f"{s} (best as read)")
        if m is not None:
            ax.errorbar([args.runs * (1.02 + 0.015 * i)], [m], yerr=[sd if sd and math.isfinite(sd) else 0],
                        fmt="o", color=line.get_color(), capsize=3)
    ax.set_xlabel("full-run equivalents spent (training tokens / tokens of one full run)")
    ax.set_ylabel("val_bpb")
    ax.set_title("Running best val_bpb as read (mean over search seeds);\n"
                 "dots at the right: the final best re-measured on fresh seeds (mean ± sd)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    return path


def plot_svg(args, grid, series, path):
    W, H, L, B = 720, 420, 60, 40
    ys = [y for _, v, m, _ in series for y in v + [m] if y is not None]
    if not ys:
        return None
    lo, hi = min(ys), max(ys)
    hi = hi if hi > lo else lo + 1
    sx = lambda x: L + (W - L - 20) * x / (args.runs * 1.1)
    sy = lambda y: 20 + (H - B - 20) * (hi - y) / (hi - lo)
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
    el = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}">',
          f'<text x="{L}" y="14" font-size="11">running best val_bpb as read (mean over seeds); '
          'dots: final best re-measured</text>']
    for i, (s, v, m, sd) in enumerate(series):
        c = colors[i % len(colors)]
        pts = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in zip(grid, v) if y is not None)
        el.append(f'<polyline fill="none" stroke="{c}" points="{pts}"/>')
        if m is not None:
            el.append(f'<circle cx="{sx(args.runs * 1.05):.1f}" cy="{sy(m):.1f}" r="3" fill="{c}"/>')
        el.append(f'<text x="{W - 150}" y="{30 + 14 * i}" font-size="11" fill="{c}">{s}</text>')
    el.append(f'<text x="{L}" y="{H - 8}" font-size="11">full-run equivalents spent (0..{args.runs}); '
              f'val_bpb {lo:.3f}..{hi:.3f}</text></svg>')
    with open(path, "w") as f:
        f.write("\n".join(el))
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "nightshift"))
    ap.add_argument("--quick", action="store_true",
                    help="prove the harness in a few minutes: K=1, 6 runs of 16,384 tokens a night")
    ap.add_argument("--k", type=int, help="search seeds per strategy (default 5; --quick 1)")
    ap.add_argument("--k-from", type=int, default=1,
                    help="the first search seed (1): a stopped benchmark goes on with "
                    "--k-from N and its nights join the first ones' with --merge")
    ap.add_argument("--strategies", default=DEFAULT_STRATEGIES,
                    help=f"comma-separated, from {', '.join(STRATEGIES)} (default %(default)s)")
    ap.add_argument("--runs", type=float, help="full-run equivalents a night (default 8; --quick 6)")
    ap.add_argument("--tokens", type=int, help="training tokens of a full run (default 65536; --quick 16384)")
    ap.add_argument("--eval-tokens", type=int, help="validation tokens scored (default 16384; --quick 4096)")
    ap.add_argument("--remeasure", type=int, default=3, help="fresh seeds for each night's best (3)")
    ap.add_argument("--slots", type=int, default=2, help="the daemon's slots (default 2)")
    ap.add_argument("--threads", type=int, default=1, help="threads per slot (default 1)")
    ap.add_argument("--asha-eta", type=int, default=3, help="agent-asha's daemon: --asha-eta (3)")
    ap.add_argument("--asha-rungs", type=int, default=3,
                    help="agent-asha's daemon: --asha-rungs (3: B/9, B/3, B; at 65,536 tokens "
                    "B/9 is one or two steps)")
    ap.add_argument("--space", default=SPACE)
    ap.add_argument("--corpus", default=os.path.join(ROOT, "state", "corpus"),
                    help="where the Brown corpus is (fetched there when missing)")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench-search"))
    ap.add_argument("--keep", action="store_true", help="keep the daemons' state directories")
    ap.add_argument("--merge", nargs="+", metavar="SEARCH_JSON",
                    help="run nothing: the table of the nights in these OUT/search.json files "
                    "(runs of the same night size, e.g. strategies run apart) into OUT")
    args = ap.parse_args()
    if args.merge:
        return merge(args)
    # SIGTERM (make interrupted, a timeout) cleans up like Ctrl-C: the daemons stop.
    signal.signal(signal.SIGTERM, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    q = args.quick
    if args.k_from < 1:
        ap.error("--k-from must be 1 or more")
    args.k = args.k or (1 if q else 5)
    args.runs = args.runs or (6 if q else 8)
    args.tokens = args.tokens or (16384 if q else 65536)
    args.eval_tokens = args.eval_tokens or (4096 if q else 16384)
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    for s in strategies:
        if s not in STRATEGIES:
            ap.error(f"unknown strategy {s} (from {', '.join(STRATEGIES)})")
    if any(STRATEGIES[s][0] == "bridge" for s in strategies):
        try:
            import optuna  # noqa: F401
        except ImportError:
            sys.exit("bench-search: needs python3-optuna (scripts/setup.sh --bench)")
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"bench-search: {args.bin} is not an executable (run make first)")
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="bench-search.")
    corpus, nbytes = prep_corpus(args, work)
    log(f"bench-search: corpus {nbytes} bytes (1 MB of Brown, byte vocabulary), {len(strategies)} "
        f"strategies x K={args.k}, {args.runs:g} full-run equivalents of {args.tokens} tokens a "
        f"night, re-measure on {args.remeasure} seeds; state in {work}")
    daemons = {}
    nights = []
    try:
        daemons["main"] = Daemon(args, work, "main", "off")
        if any(STRATEGIES[s][2] == "asha" for s in strategies):
            daemons["asha"] = Daemon(args, work, "asha", "asha")
        prog = Progress(len(strategies) * args.k)
        # Interleaved: seed 1 of every strategy, then seed 2, ... so a stopped
        # benchmark has every strategy at the same K and a drifting machine
        # load spreads over all of them.
        for k in range(args.k_from, args.k_from + args.k):
            for s in strategies:
                night = run_night(args, daemons, corpus, s, k, prog, work)
                nights.append(night)
                prog.done += 1
                log(f"bench-search: {s} k={k} done in {fmt_s(night['seconds'])}: {night['runs']} runs, "
                    f"{night['fre']:.2f} FRE, best #{night['best_id']} read {night['best_read']}, "
                    f"re-measured {night['remeasured']}")
                with open(os.path.join(args.out, "search.json"), "w") as f:
                    json.dump({"args": vars(args), "nights": nights}, f, indent=1)
    finally:
        for d in daemons.values():
            d.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    table = summarize(args, nights, strategies)
    img = plot(args, nights, strategies, os.path.join(args.out, "search.png"))
    table += f"\nPlot: {img}. Total {fmt_s(time.time() - prog.t0)} on {os.cpu_count()} CPUs.\n"
    with open(os.path.join(args.out, "search.md"), "w") as f:
        f.write(table)
    print(table)


def merge(args):
    """The table of nights recorded by several runs, as one run would print it."""
    nights, first, strategies = [], None, []
    for path in args.merge:
        with open(path) as f:
            doc = json.load(f)
        a = doc["args"]
        key = {x: a[x] for x in ("runs", "tokens", "eval_tokens", "remeasure", "slots", "threads")}
        if first is None:
            first = key
        elif key != first:
            sys.exit(f"bench-search: {path} measured other nights ({key}) than {args.merge[0]} "
                     f"({first})")
        for n in doc["nights"]:
            if any(m["strategy"] == n["strategy"] and m["k"] == n["k"] for m in nights):
                sys.exit(f"bench-search: {n['strategy']} k={n['k']} twice ({path})")
            nights.append(n)
            if n["strategy"] not in strategies:
                strategies.append(n["strategy"])
    for x, v in first.items():
        setattr(args, x, v)
    args.k = len({n["k"] for n in nights})
    os.makedirs(args.out, exist_ok=True)
    table = summarize(args, nights, strategies)
    img = plot(args, nights, strategies, os.path.join(args.out, "search.png"))
    table += f"\nPlot: {img}. Merged from {', '.join(args.merge)}.\n"
    with open(os.path.join(args.out, "search.md"), "w") as f:
        f.write(table)
    with open(os.path.join(args.out, "search.json"), "w") as f:
        json.dump({"args": vars(args), "nights": nights}, f, indent=1)
    print(table)


if __name__ == "__main__":
    main()
