#!/usr/bin/python3
"""replay.py - nights of a search replayed on a surrogate of a landscape, in
seconds: every strategy against the same simulated daemon.

    /usr/bin/python3 experiments/search/replay.py --landscape FILE.jsonl
        [--space FILE] [--lengths 16,32,96,200] [--k 30]
        [--strategies random,optuna-tpe,optuna-tpe-default,agent-tpe]
        [--out DIR] [--bin build/nightshift]

The simulated daemon (Daemon below) keeps what the real one keeps for a
night: experiments with their spec, seed, status and val_bpb; --slots runs at
a time (each takes 0.8 to 1.2 time units, drawn per run, so that runs end out
of order as on a machine); a queue; submissions checked as api_submit checks
them (a spec the engine refuses is rejected with invalid_spec; a spec whose
configuration and seed already ran is a duplicate and costs nothing); and
GET /v1/best's answer: the configuration with the lowest mean val_bpb over
its succeeded seeds. A run's result is the surrogate's: its mean at the
configuration plus noise drawn as the landscape's seed noise, a function of
(night seed, configuration, run seed) so that the strategies of one night
seed meet the same noise where they run the same thing.

Strategies:
  random              Optuna's RandomSampler (as experiments/bridges/optuna_bridge.py)
  optuna-tpe          Optuna's TPESampler with 5 startup trials (make bench-search's)
  optuna-tpe-default  Optuna's TPESampler as it comes (10 startup trials)
  optuna-tpe-mv       the same with multivariate=True, group=True (one kernel per
                      trial over all its parameters)
  agent-tpe, agent-random, agent-climb
                      the real `nightshift agent --strategy S --max-proposals N --seed k`
                      (make run's default is tpe), driven as the daemon drives it:
                      signed webhooks (Standard Webhooks headers, HMAC-SHA256 as
                      daemon/shared/webhook.c) with the payload of daemon/hook/hook.h
                      (experiment.finished, queue.empty, experiment.rejected; best,
                      noise, recent, queue_depth, running, defaults); its replies are
                      submitted to the simulated daemon. The agent calls nothing back.
The Optuna strategies ask and tell as the bridge does, --slots trials in
flight, the space defined by run (an inactive axis is not suggested); a
refused point is told FAIL and costs nothing, a duplicate gets its run's value.

A night is N runs started (duplicates and refused specs are not runs). Its
answer is the daemon's best at the end; its score is the surrogate's TRUE
mean of that configuration (no noise), and its regret that minus the best
mean the surrogate knows (a long search on it: random draws, then
one-axis descent from the best of them). The anytime curve is the same score
of the answer the daemon would give after 25/50/75/100% of the runs ended.

Output in --out: replay.md (a table per night length: median and IQR, mean
+- standard error of the score and the regret in val_bpb and per cent, and
the anytime curve as median [IQR]; each strategy paired by night seed with
random search and with Optuna's TPE) and replay.json (every night). The same
--seed gives the same replay. `replay.py --merge [--seeds LO-HI] A.json
B.json ... OUTDIR` writes the tables of replays run side by side (each with
some strategies), of the night seeds LO..HI when given.
"""
import argparse
import base64
import hashlib
import hmac
import json
import math
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import space as spacemod  # noqa: E402
import surrogate as surmod  # noqa: E402

ROOT = spacemod.ROOT
LABELS = ("name", "tags", "seed", "priority", "parent", "prune")
STRATEGIES = ("random", "optuna-tpe", "optuna-tpe-default", "optuna-tpe-mv", "agent-tpe",
              "agent-random", "agent-climb")
DEFAULT_STRATEGIES = "random,optuna-tpe,optuna-tpe-default,agent-tpe"
FRACTIONS = (0.25, 0.5, 0.75, 1.0)
HOOK_RECENT = 20


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def _norm(v):
    """JSON with every number a float (1 and 1.0 are one value)."""
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_norm(x) for x in v]
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return v


def merged(defaults, spec):
    out = json.loads(json.dumps(defaults))
    for k, v in spec.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = {**out[k], **v}
        else:
            out[k] = v
    return out


def config_key(spec, defaults):
    """The configuration of a spec: every field with its default filled in, but
    the labels (the daemon's config hash leaves out the same)."""
    full = merged(defaults, spec)
    for k in LABELS:
        full.pop(k, None)
    if not full.get("token_budget"):
        full.pop("token_budget", None)
    else:
        full.pop("time_budget_s", None)
    return json.dumps(_norm(full), sort_keys=True)


# ------------------------------------------------------------- the daemon

class Daemon:
    """The simulated daemon of one night (see the file's header)."""

    def __init__(self, space, sur, night_seed, slots, n_runs, defaults):
        self.space, self.sur, self.k = space, sur, night_seed
        self.slots, self.n_runs, self.defaults = slots, n_runs, defaults
        self.exps = []  # dicts: id, spec, key, seed, status, val_bpb, end
        self.queue, self.running = [], []
        self.now = 0.0
        self.started = 0
        self.refused = 0
        self.duplicates = 0
        self.timeline = []  # (runs ended, answer key) after each end
        self.ended = []  # experiment ids in the order their runs ended

    def submit(self, spec):
        """(id, duplicate) or (None, (code, message))."""
        full = merged(self.defaults, spec)
        why = self.space.refusal(full)
        if why:
            self.refused += 1
            return None, ("invalid_spec", why)
        key = config_key(spec, self.defaults)
        seed = full.get("seed", 42)
        for e in self.exps:
            if e["key"] == key and e["seed"] == seed:
                self.duplicates += 1
                return e["id"], True
        e = {"id": len(self.exps) + 1, "spec": full, "key": key, "seed": seed,
             "status": "queued", "val_bpb": None, "end": None}
        self.exps.append(e)
        self.queue.append(e)
        return e["id"], False

    def schedule(self):
        """Start queued runs on free slots while the night has runs left."""
        while self.queue and len(self.running) < self.slots and self.started < self.n_runs:
            e = self.queue.pop(0)
            e["status"] = "running"
            e["end"] = self.now + 0.8 + 0.4 * surmod.unit_hash(self.k, "duration", e["id"])
            self.running.append(e)
            self.started += 1

    def cancel_queued(self):
        for e in self.queue:
            e["status"] = "cancelled"
        self.queue = []

    def finish_next(self):
        """End the running run that ends first; returns it (None when none runs)."""
        if not self.running:
            return None
        e = min(self.running, key=lambda x: (x["end"], x["id"]))
        self.running.remove(e)
        self.now = e["end"]
        status, v = self.sur.run(e["spec"], self.k, e["seed"])
        e["status"], e["val_bpb"] = status, v
        self.timeline.append(self.best_key())
        self.ended.append(e["id"])
        return e

    def configs(self):
        """{key: [val_bpb of its succeeded runs]} and the first experiment of each."""
        vals, first = {}, {}
        for e in self.exps:
            if e["status"] == "succeeded":
                vals.setdefault(e["key"], []).append(e["val_bpb"])
                first.setdefault(e["key"], e)
        return vals, first

    def best_key(self):
        """GET /v1/best: the configuration with the lowest mean over its seeds."""
        vals, _ = self.configs()
        if not vals:
            return None
        return min(vals, key=lambda k: (statistics.mean(vals[k]), k))

    def best_json(self):
        vals, first = self.configs()
        k = self.best_key()
        if k is None:
            return None
        e, v = first[k], vals[k]
        return {"id": e["id"], "name": e["spec"].get("name"), "mean_val_bpb": statistics.mean(v),
                "val_bpb_sd": statistics.stdev(v) if len(v) > 1 else None, "n_seeds": len(v),
                "seeds": [x["seed"] for x in self.exps if x["key"] == k and x["status"] == "succeeded"],
                "spec": e["spec"], "result": {"val_bpb": e["val_bpb"]}, "val_bpb": e["val_bpb"]}

    def noise_json(self):
        vals, _ = self.configs()
        ss, df, n_conf, runs = 0.0, 0, 0, 0
        for v in vals.values():
            runs += len(v)
            if len(v) > 1:
                m = statistics.mean(v)
                ss += sum((x - m) ** 2 for x in v)
                df += len(v) - 1
                n_conf += 1
        if not vals:
            return None
        base = self.exps[0]["spec"]
        return {"dataset": base.get("dataset"), "budget_kind": "tokens",
                "budget": base.get("token_budget"), "eval_tokens": base.get("eval_tokens"),
                "sd": math.sqrt(ss / df) if df else None, "configurations": n_conf,
                "runs": runs, "df": df}

    def exp_json(self, e):
        return {"id": e["id"], "name": e["spec"].get("name"), "status": e["status"],
                "reason": None if e["status"] == "succeeded" else
                ("the surrogate's failure" if e["status"] == "failed" else None),
                "spec": e["spec"], "result": {"val_bpb": e["val_bpb"]} if e["val_bpb"] else None,
                "asha": None}

    def payload(self, ev_id, typ, exp=None, rejected=None):
        recent = [{"id": e["id"], "name": e["spec"].get("name"), "status": e["status"],
                   "reason": None, "val_bpb": e["val_bpb"], "spec": e["spec"]}
                  for e in reversed(self.exps[-HOOK_RECENT:])]
        return {"id": ev_id, "type": typ, "created": "2026-01-01T00:00:00.000Z",
                "experiment": self.exp_json(exp) if exp else None, "rejected": rejected,
                "best": self.best_json(), "noise": self.noise_json(), "recent": recent,
                "queue_depth": len(self.queue), "running": len(self.running),
                "defaults": self.defaults}


# ------------------------------------------------------------ the drivers

def optuna_night(daemon, space, base, strategy, k, n_runs, slots):
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if strategy == "random":
        sampler = optuna.samplers.RandomSampler(seed=k)
    elif strategy == "optuna-tpe":
        sampler = optuna.samplers.TPESampler(seed=k, n_startup_trials=5)
    elif strategy == "optuna-tpe-mv":
        sampler = optuna.samplers.TPESampler(seed=k, multivariate=True, group=True,
                                             n_startup_trials=10)
    else:
        sampler = optuna.samplers.TPESampler(seed=k)
    study = optuna.create_study(sampler=sampler, direction="minimize")
    TrialState = optuna.trial.TrialState
    inflight = {}  # experiment id -> [trials]
    asked = 0

    def suggest(trial):
        point = {}

        def lookup(p):
            return point[p] if p in point else space.spec_value(space.base, p)

        for ax in space.axes:
            if not space.condition(ax, lookup):
                continue
            if ax.listed:
                point[ax.path] = trial.suggest_categorical(ax.path, ax.values)
            elif ax.type == "int":
                point[ax.path] = trial.suggest_int(ax.path, ax.low, ax.high, log=ax.log)
            else:
                v = spacemod.round_sig(trial.suggest_float(ax.path, ax.low, ax.high, log=ax.log))
                point[ax.path] = min(max(v, ax.low), ax.high)
        return point

    def tell(e):
        for trial in inflight.pop(e["id"], []):
            if e["status"] == "succeeded":
                study.tell(trial, e["val_bpb"])
            else:
                study.tell(trial, state=TrialState.FAIL)

    while True:
        while (daemon.started + len(daemon.queue) < n_runs and asked < 50 * n_runs
               and sum(len(v) for v in inflight.values()) < slots):
            trial = study.ask()
            asked += 1
            spec = space.apply(suggest(trial))
            spec["name"] = f"optuna#{trial.number}"
            eid, info = daemon.submit(spec)
            if eid is None:
                study.tell(trial, state=TrialState.FAIL)
                continue
            e = daemon.exps[eid - 1]
            if e["status"] in ("succeeded", "failed"):
                study.tell(trial, e["val_bpb"]) if e["status"] == "succeeded" else \
                    study.tell(trial, state=TrialState.FAIL)
                continue
            inflight.setdefault(eid, []).append(trial)
        daemon.schedule()
        e = daemon.finish_next()
        if e is None:
            break
        tell(e)
    return {"asked": asked}


class Agent:
    """A `nightshift agent` process and its signed deliveries."""

    def __init__(self, binary, base_path, space_path, strategy, k, n_runs, work, extra=()):
        self.secret = hashlib.sha256(f"replay-{k}".encode()).hexdigest()
        self.n = 0
        self.k = k
        self.log = open(os.path.join(work, f"agent-{strategy}-{n_runs}-{k}.log"), "w")
        cmd = [binary, "agent", "--listen", "127.0.0.1:0", "--baseline", base_path, "--space", space_path, "--strategy",
               strategy.split("-", 1)[1], "--seed", str(k), "--max-proposals", str(n_runs),
               *extra]
        env = dict(os.environ, NIGHTSHIFT_AGENT_SECRET=self.secret)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     env=env)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.stop()
            raise RuntimeError(f"the agent did not start: {line.strip()}")
        self.url = line.split("listening on", 1)[1].strip() + "/hook"

    def deliver(self, payload):
        """POST one event as the daemon's hook does; the reply's specs (a list)."""
        body = json.dumps(payload).encode()
        ev_id = payload["id"]
        ts = str(int(time.time()))
        mac = hmac.new(self.secret.encode(), f"{ev_id}.{ts}.".encode() + body, hashlib.sha256)
        sig = "v1," + base64.b64encode(mac.digest()).decode()
        req = urllib.request.Request(self.url, data=body, method="POST", headers={
            "Content-Type": "application/json", "webhook-id": ev_id, "webhook-timestamp": ts,
            "webhook-signature": sig})
        with urllib.request.urlopen(req, timeout=60) as r:
            raw = r.read()
        if not raw.strip():
            return []
        doc = json.loads(raw)
        if doc is None or doc == {}:
            return []
        return doc if isinstance(doc, list) else [doc]

    def event_id(self):
        self.n += 1
        return "evt_" + hashlib.sha256(f"{self.k}-{self.n}".encode()).hexdigest()[:32]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.log.close()


def agent_night(daemon, agent, n_runs):
    """The daemon's side of a night with an agent: queue.empty first, then an
    event per ended run, the agent's replies submitted, rejections answered."""
    stats = {"events": 0, "idle_asks": 0}

    def send(typ, exp=None, rejected=None):
        stats["events"] += 1
        props = agent.deliver(daemon.payload(agent.event_id(), typ, exp, rejected))
        for spec in props:
            eid, info = daemon.submit(spec)
            if eid is None:
                send("experiment.rejected", rejected={"proposal": spec, "code": info[0],
                                                      "error": info[1]})
        return len(props)

    send("queue.empty")
    idle = 0
    while True:
        daemon.schedule()
        # the real daemon re-sends queue.empty while a slot is idle and the queue empty
        if (len(daemon.running) < daemon.slots and not daemon.queue
                and daemon.started < n_runs and idle < 3):
            stats["idle_asks"] += 1
            if send("queue.empty") == 0:
                idle += 1
            continue
        e = daemon.finish_next()
        if e is None:
            break
        idle = 0
        daemon.schedule()
        if daemon.started >= n_runs:
            daemon.cancel_queued()
        send("experiment.finished", exp=e)
    daemon.cancel_queued()
    return stats


# --------------------------------------------------------------- the night

def best_known(space, sur, n_random=20000, seed=0, rounds=3):
    """The lowest mean the surrogate knows on the space: n_random uniform draws,
    then one-axis descent (every listed value, a range at 9 points) from the
    best 10 until nothing improves."""
    rng = random.Random(seed)
    specs, seen = [], set()
    while len(specs) < n_random:
        pt = space.sample(rng)
        s = space.apply(pt)
        k = space.key(pt)
        if k in seen or space.refusal(merged(space.defaults, s)):
            continue
        seen.add(k)
        specs.append((pt, s))
    means = sur.means([s for _, s in specs])
    order = sorted(range(len(specs)), key=lambda i: means[i])[:10]
    best_pt, best_v = specs[order[0]][0], means[order[0]]
    for i in order:
        pt, v = specs[i][0], means[i]
        for _ in range(rounds * len(space.axes)):
            moved = False
            for ax in space.axes:
                if ax.path not in pt:
                    continue
                cands = ax.values if ax.listed else sorted({ax.value_at(u / 8 * 0.999)
                                                            for u in range(9)})
                trial = []
                for c in cands:
                    q = dict(pt)
                    q[ax.path] = c
                    q = space.point_of(space.apply(q))
                    s = space.apply(q)
                    if not space.refusal(merged(space.defaults, s)):
                        trial.append((q, s))
                if not trial:
                    continue
                ms = sur.means([s for _, s in trial])
                j = min(range(len(trial)), key=lambda t: ms[t])
                if ms[j] < v - 1e-12:
                    pt, v, moved = trial[j][0], ms[j], True
            if not moved:
                break
        if v < best_v:
            best_pt, best_v = pt, v
    return best_pt, best_v


def agent_inputs(args, space, base, base_path, work):
    """The space file and base spec the agent is given: the space itself when
    the agent reads it; else (an agent that predates conditional axes and the
    derived micro-batch) the space without its `when` and `why`, and a base
    whose batch_size divides every total_batch_tokens of the space, so that
    the agent's "round total_batch_tokens up" repair never moves a value (the
    micro-batch changes speed, not what is learned). Returns (space, base,
    note)."""
    probe = subprocess.Popen([args.bin, "agent", "--listen", "127.0.0.1:0", "--space",
                              args.space_path, "--baseline", base_path],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, NIGHTSHIFT_AGENT_SECRET="x"))
    line = probe.stdout.readline()
    probe.terminate()
    _, err = probe.communicate(timeout=10)
    if "listening on" in line:
        return args.space_path, base_path, "the agent reads the space as it is"
    doc = spacemod.load_json(args.space_path)
    for ax in doc["axes"]:
        ax.pop("when", None)
        ax.pop("why", None)
    doc["about"] = "the replayed space without its conditions, for an agent that predates them"
    sp_path = os.path.join(work, "space-compat.json")
    with open(sp_path, "w") as f:
        json.dump(doc, f)
    b = json.loads(json.dumps(base))
    tbt_ax = space.by_path.get("train.total_batch_tokens")
    if tbt_ax is not None and tbt_ax.listed:
        seq = space.spec_value(base, "model.seq_len")
        bs = space.spec_value(base, "train.batch_size")
        for t in tbt_ax.values:
            while bs > 1 and (t // seq) % bs:
                bs //= 2
        b.setdefault("train", {})["batch_size"] = bs
    b_path = os.path.join(work, "base-compat.json")
    with open(b_path, "w") as f:
        json.dump(b, f)
    m = re.search(r"axes\[\d+\]: .*", err)
    why = m.group(0) if m else "it refuses it"
    return sp_path, b_path, ("the agent does not read this space file (" + why[-160:] + "): "
                             "it is given the space without its conditions and a base with "
                             f"train.batch_size {b['train']['batch_size']}")


def run_night(args, space, sur, base, base_path, strategy, n_runs, k, work):
    daemon = Daemon(space, sur, k, args.slots, n_runs, space.defaults)
    t0 = time.time()
    if strategy.startswith("agent-"):
        agent = Agent(args.bin, args.agent_base, args.agent_space, strategy, k, n_runs, work,
                      extra=args.agent_args)
        try:
            info = agent_night(daemon, agent, n_runs)
        finally:
            agent.stop()
    else:
        info = optuna_night(daemon, space, base, strategy, k, n_runs, args.slots)
    vals, first = daemon.configs()
    ans = daemon.best_key()
    night = {"strategy": strategy, "runs": n_runs, "k": k, "started": daemon.started,
             "refused": daemon.refused, "duplicates": daemon.duplicates,
             "failed": sum(e["status"] == "failed" for e in daemon.exps),
             "ended": daemon.ended, **info}
    if ans is None:
        night.update(answer=None, read=None, true=None)
    else:
        spec = first[ans]["spec"]
        night.update(answer=space.point_of(spec), answer_id=first[ans]["id"],
                     read=statistics.mean(vals[ans]), seeds=len(vals[ans]), true=sur.mean(spec))
        # the best configuration the night ran, by its true mean: what an
        # answer chosen without noise would have scored (search against choice)
        night["ran_best"] = min(sur.mean(first[k]["spec"]) for k in vals)
    curve = []
    n_end = len(daemon.timeline)
    for f in FRACTIONS:
        i = max(1, math.ceil(f * n_end)) - 1 if n_end else None
        key = daemon.timeline[i] if n_end else None
        if key is None:
            curve.append(None)
        else:
            spec = next(e["spec"] for e in daemon.exps if e["key"] == key)
            curve.append(sur.mean(spec))
    night["curve"] = curve
    night["seconds"] = round(time.time() - t0, 3)
    return night


def qs(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return q


def fmt_q(xs, nd=4):
    q = qs(xs)
    return "-" if q is None else f"{q[1]:.{nd}f} [{q[0]:.{nd}f}, {q[2]:.{nd}f}]"


def fmt_mse(xs, nd=4):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    m = statistics.mean(xs)
    se = statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else float("nan")
    return f"{m:.{nd}f} ± {se:.{nd}f}"


def tables(nights, strategies, lengths, best_v, base_true, meta):
    out = ["# Search replayed on the surrogate\n",
           f"{meta}\n",
           f"Best mean the surrogate knows (long search): **{best_v:.4f}**; the baseline's "
           f"true mean {base_true:.4f}. Score = the surrogate's true mean (no noise) of the "
           "night's answer (the daemon's GET /v1/best at the end: lowest mean over its "
           "seeds); regret = score - best known. Median [IQR] and mean ± standard error over "
           "the K nights. Best run: the lowest true mean among the configurations the night "
           "ran (what an answer chosen without noise would score).\n"]
    for n in lengths:
        out.append(f"\n## Nights of {n} runs\n")
        out.append("| strategy | K | score median [IQR] | score mean ± se | regret median [IQR] "
                   "| regret % median [IQR] | regret mean ± se | best run, median | "
                   "anytime score 25% | 50% | 75% | 100% | runs | refused | dup. | failed |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for s in strategies:
            ns = [x for x in nights if x["strategy"] == s and x["runs"] == n]
            if not ns:
                continue
            sc = [x["true"] for x in ns]
            rg = [x["true"] - best_v if x["true"] is not None else None for x in ns]
            pc = [100 * r / best_v if r is not None else None for r in rg]
            cur = [fmt_q([x["curve"][i] for x in ns], 3) for i in range(len(FRACTIONS))]
            ran = [x.get("ran_best") for x in ns if x.get("ran_best") is not None]
            ran_md = f"{statistics.median(ran):.4f}" if ran else "-"
            out.append(f"| {s} | {len(ns)} | {fmt_q(sc)} | {fmt_mse(sc)} | {fmt_q(rg)} | "
                       f"{fmt_q(pc, 2)} | {fmt_mse(rg)} | {ran_md} | " + " | ".join(cur) +
                       f" | {statistics.mean(x['started'] for x in ns):.1f} | "
                       f"{sum(x['refused'] for x in ns)} | {sum(x['duplicates'] for x in ns)} | "
                       f"{sum(x['failed'] for x in ns)} |")
        for against, what in (("random", "random search"),
                              ("optuna-tpe-default", "Optuna's TPE (optuna-tpe-default)")):
            ref = [x for x in nights if x["runs"] == n and x["strategy"] == against]
            cmp = []
            for s in strategies:
                if s in ("random", against) or not ref:
                    continue
                ns = {x["k"]: x["true"] for x in nights if x["strategy"] == s and x["runs"] == n}
                d = [ns[r["k"]] - r["true"] for r in ref if r["k"] in ns
                     and ns[r["k"]] is not None and r["true"] is not None]
                if len(d) > 1:
                    m, se = statistics.mean(d), statistics.stdev(d) / math.sqrt(len(d))
                    cmp.append(f"{s} {m:+.4f} ± {se:.4f} ({m / se:+.1f} se, K = {len(d)})"
                               if se > 0 else f"{s} {m:+.4f}")
            if cmp:
                out.append(f"\nAgainst {what}, paired by night seed (score minus its; "
                           "negative is better): " + "; ".join(cmp) + ".")
    return "\n".join(out) + "\n"


def merge(paths, out, seeds=None):
    """The tables of several replay.json of one landscape and space (replays
    run side by side, each with some strategies): nights of a strategy,
    length and seed that two files hold are counted once; seeds (lo, hi)
    keeps the night seeds lo..hi."""
    docs = [json.load(open(p)) for p in paths]
    if len({round(d["best_known"], 9) for d in docs}) != 1:
        sys.exit("replay: these replays do not share a surrogate (their best known differ)")
    seen, nights, strategies, lengths = set(), [], [], []
    for d in docs:
        for n in d["nights"]:
            key = (n["strategy"], n["runs"], n["k"])
            if seeds and not seeds[0] <= n["k"] <= seeds[1]:
                continue
            if key not in seen:
                seen.add(key)
                nights.append(n)
                if n["strategy"] not in strategies:
                    strategies.append(n["strategy"])
                if n["runs"] not in lengths:
                    lengths.append(n["runs"])
    meta = docs[0].get("meta", "")
    md = tables(nights, strategies, sorted(lengths), docs[0]["best_known"],
                docs[0]["baseline_true"], meta)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "replay.md"), "w") as f:
        f.write(md)
    with open(os.path.join(out, "replay.json"), "w") as f:
        json.dump(dict(docs[0], nights=nights, merged_from=len(docs)), f, indent=1)
    print(md)


def main(argv=None):
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--merge":
        rest, seeds = sys.argv[2:], None
        if rest and rest[0] == "--seeds":
            lo, _, hi = rest[1].partition("-")
            seeds, rest = (int(lo), int(hi or lo)), rest[2:]
        return merge(rest[:-1], rest[-1], seeds)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--landscape", action="append", help="a landscape JSONL (repeatable)")
    ap.add_argument("--stand-in", action="store_true",
                    help="a smooth stand-in surrogate instead of a landscape (tests)")
    ap.add_argument("--space", help="the space searched (default the last landscape's)")
    ap.add_argument("--model", choices=surmod.MODELS, default="extratrees",
                    help="the surrogate's model (surrogate.py says why extra trees)")
    ap.add_argument("--base", default=spacemod.BASELINE)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "nightshift"))
    ap.add_argument("--lengths", default="16,32,96,200")
    ap.add_argument("--k", type=int, default=30, help="night seeds per strategy and length (30)")
    ap.add_argument("--seed", type=int, default=1, help="the first night seed (k = seed..seed+K-1)")
    ap.add_argument("--strategies", default=DEFAULT_STRATEGIES)
    ap.add_argument("--agent-args", default="", help="more options for the agent, one string")
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=65536)
    ap.add_argument("--eval-tokens", type=int, default=16384)
    ap.add_argument("--noise-sd", type=float,
                    help="the seed noise sd every simulated run draws (default the landscape's "
                    "pairs: their better half)")
    ap.add_argument("--long-search", type=int, default=20000)
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "replay"))
    ap.add_argument("--keep", action="store_true", help="keep the work directory (agent logs)")
    args = ap.parse_args(argv)
    args.agent_args = args.agent_args.split()
    strategies = [s for s in args.strategies.split(",") if s]
    for s in strategies:
        if s not in STRATEGIES:
            ap.error(f"unknown strategy {s} ({', '.join(STRATEGIES)})")
    lengths = [int(x) for x in args.lengths.split(",")]
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="replay.")
    if args.keep:
        log(f"replay: work directory {work}")

    base = spacemod.load_json(args.base)
    base.pop("time_budget_s", None)
    base.update(dataset="bench", token_budget=args.tokens, eval_tokens=args.eval_tokens)
    base_path = os.path.join(work, "base.json")
    with open(base_path, "w") as f:
        json.dump(base, f)
    if args.space:
        args.space_path = args.space
    elif args.landscape:
        args.space_path = surmod.landscape_space_path(args.landscape[-1])
    else:
        args.space_path = spacemod.SPACE
    space = spacemod.load(args.space_path, base=base)
    if args.stand_in:
        sur = StandIn(space)
        meta = "Surrogate: the smooth stand-in (a test, not a landscape)."
    else:
        feat_space = surmod.union_space([space] + [surmod.landscape_space(p)
                                                   for p in args.landscape])
        sur = surmod.FittedSurrogate(feat_space, surmod.read_landscape(args.landscape),
                                     model=args.model)
        meta = (f"Surrogate: {args.model} on {sur.n_points} points of "
                f"{', '.join(os.path.basename(p) for p in args.landscape)}, seed noise sd "
                f"{sur.noise_sd:.4f} (better half; {sur.noise_all:.4f} over all pairs), "
                f"{sur.n_failed} failed runs. Space searched: {os.path.relpath(args.space_path, ROOT)}; "
                f"{args.slots} slots.")
    if args.noise_sd is not None:
        if not args.noise_sd >= 0:
            ap.error("--noise-sd must be 0 or more")
        meta += f" Seed noise set to sd {args.noise_sd:.4f} (--noise-sd)."
        sur.noise_sd = args.noise_sd
    args.agent_space, args.agent_base, agent_note = args.space_path, base_path, ""
    if any(s.startswith("agent-") for s in strategies):
        args.agent_space, args.agent_base, agent_note = agent_inputs(args, space, base,
                                                                     base_path, work)
        log(f"replay: {agent_note}")
        meta += f" Agent: {agent_note}."
    t0 = time.time()
    best_pt, best_v = best_known(space, sur, args.long_search, seed=0)
    base_true = sur.mean(space.apply(space.point_of(base)))
    log(f"replay: best known {best_v:.4f} ({time.time() - t0:.1f} s), baseline {base_true:.4f}")
    nights = []

    def write():
        md = tables(nights, strategies, lengths, best_v, base_true, meta)
        with open(os.path.join(args.out, "replay.md"), "w") as f:
            f.write(md)
        with open(os.path.join(args.out, "replay.json"), "w") as f:
            kept = ("lengths", "k", "seed", "strategies", "agent_args", "slots", "tokens",
                    "eval_tokens", "long_search", "stand_in", "model")
            a = {k: getattr(args, k) for k in kept}
            a["landscape"] = [os.path.basename(p) for p in args.landscape or []]
            a["space"] = os.path.relpath(os.path.abspath(args.space_path), ROOT)
            json.dump({"args": a, "agent": agent_note, "meta": meta,
                       "best_known": best_v, "best_point": best_pt, "baseline_true": base_true,
                       "nights": nights}, f, indent=1)
        return md

    try:
        # strategy by strategy (in the order given), each at every length: a
        # replay cut short has whole strategies
        for s in strategies:
            for n in lengths:
                t1 = time.time()
                for k in range(args.seed, args.seed + args.k):
                    nights.append(run_night(args, space, sur, base, base_path, s, n, k, work))
                ns = [x["true"] for x in nights if x["strategy"] == s and x["runs"] == n]
                log(f"replay: {s} x {args.k} nights of {n} runs in {time.time() - t1:.1f} s: "
                    f"median score {statistics.median([x for x in ns if x is not None]):.4f}")
                write()
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    md = write()
    print(md)
    return nights


class StandIn(surmod.Surrogate):
    """A smooth stand-in: val_bpb 3 + the squared distance of the features from
    0.3 (an inactive axis sits at -1: far), noise sd 0.02, nothing fails."""

    def __init__(self, space):
        super().__init__(space, 0.02)

    def _predict(self, xs):
        return [3 + sum((v - 0.3) ** 2 for v in x) / max(1, len(x)) for x in xs]

    def _fail(self, xs):
        return [0.0] * len(xs)


if __name__ == "__main__":
    main()
