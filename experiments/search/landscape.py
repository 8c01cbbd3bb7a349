#!/usr/bin/python3
"""landscape.py - record a landscape: real runs spread over the search space,
for the surrogate (surrogate.py) that replays nights in seconds (replay.py).

    /usr/bin/python3 experiments/search/landscape.py --corpus DIR_OR_FILE
        --out FILE.jsonl [--space FILE] [--lhs N] [--seeds 1,2] [--jobs 2]

The design, fixed by --design-seed (a restart rebuilds the same one):
the base spec itself, one-axis-at-a-time moves from it (every other listed
value of a listed axis, the 10% and 90% points of a range's scale), and a
Latin hypercube of --lhs points over every axis (a point the spec refuses is
recorded as refused and replaced by the next draw). They run interleaved
(baseline, then two hypercube points for each one-axis move) so that a
landscape cut short is still spread over the space. Each point runs on every
seed of --seeds with `nightshift train` directly (no daemon), --threads
threads a run, --jobs runs at a time.

The benchmark's corpus and budget are make bench-search's (tests/bench/search.py):
about 1 MB of text, byte vocabulary (`prep --vocab 256 --test-fraction 0`),
the base spec experiments/specs/baseline.json at token_budget 65,536 and
eval_tokens 16,384.

Output: one JSON line per finished run, appended to --out as it ends (a
restart skips the (point, seed) pairs already there): the point, the full
spec, the seed, status (succeeded, refused, failed, diverged, oom, timeout),
val_bpb and the run's seconds. A progress line with the ETA goes to stderr.
"""
import argparse
import concurrent.futures
import datetime
import json
import os
import platform
import random
import re
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import corpus as corpusmod  # noqa: E402
import space as spacemod  # noqa: E402

ROOT = spacemod.ROOT
CORPUS_BYTES = corpusmod.CORPUS_BYTES
EXIT_STATUS = {0: "succeeded", 1: "failed", 3: "diverged", 4: "oom"}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def fmt_s(s):
    s = int(max(s, 0))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def corpus_text(src):
    """About 1 MB of text from src, as make bench-search reads it
    (corpus.bench_text)."""
    return corpusmod.bench_text(src, CORPUS_BYTES)


def design(sp, n_lhs, seed, refused, oat_moves=True):
    """[(id, kind, point)]: baseline, one-axis moves, hypercube points, interleaved.
    refused(point) -> an error message or None (the spec's verdict)."""
    rng = random.Random(seed)
    oat = []
    for ax in sp.axes if oat_moves else []:
        if ax.listed:
            cur = sp.spec_value(sp.base, ax.path)
            moves = [v for v in ax.values if not spacemod._same(v, cur)]
        else:
            moves = [ax.value_at(0.1), ax.value_at(0.9)]
        for v in moves:
            pt = sp.point_of(sp.base)
            pt[ax.path] = v
            oat.append(("oat", sp.canonical(pt)))
    lhs = [("lhs", p) for p in sp.latin_hypercube(n_lhs, rng)]
    order = [("baseline", sp.point_of(sp.base))]
    while oat or lhs:
        for _ in range(2):
            if lhs:
                order.append(lhs.pop(0))
        if oat:
            order.append(oat.pop(0))
    out, seen, rejected = [], set(), []
    for kind, pt in order:
        if sp.key(pt) in seen:
            continue
        why = refused(pt)
        while why and kind == "lhs":
            if why != "duplicate":
                rejected.append((pt, why))
            pt = sp.sample(rng)
            why = "duplicate" if sp.key(pt) in seen else refused(pt)
        if why:
            rejected.append((pt, why))
            continue
        seen.add(sp.key(pt))
        out.append((f"p{len(out):03d}", kind, pt))
    return out, rejected


class Runner:
    def __init__(self, args, sp, state, dataset):
        self.args, self.sp, self.state, self.dataset = args, sp, state, dataset
        self.specs = os.path.join(args.work, "specs")
        os.makedirs(self.specs, exist_ok=True)
        self.lock = threading.Lock()

    def spec(self, point, seed, name):
        spec = self.sp.apply(point)
        spec.pop("time_budget_s", None)
        spec.update(name=name, seed=seed, dataset=self.dataset, token_budget=self.args.tokens,
                    eval_tokens=self.args.eval_tokens)
        spec.setdefault("resources", {})["threads"] = self.args.threads
        return spec

    def refused(self, point):
        """The spec's verdict on a point without training: `nightshift cost`
        parses it (spec_parse) and checks it fits in memory."""
        spec = self.spec(point, 0, "check")
        path = os.path.join(self.specs, "check.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        r = subprocess.run([self.args.bin, "cost", path, "--dir", self.state],
                           capture_output=True, text=True, timeout=60)
        if r.returncode == 0:
            return None
        lines = (r.stderr.strip() or r.stdout.strip() or f"exit {r.returncode}").splitlines()
        return lines[-1].replace(f"cost: {path}: ", "")

    def train(self, pid, kind, point, seed):
        spec = self.spec(point, seed, f"{pid}-s{seed}")
        path = os.path.join(self.specs, f"{pid}-s{seed}.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        t0 = time.time()
        cmd = ["timeout", "-k", "10", str(self.args.run_limit), self.args.bin, "train", "--dir",
               self.state, "--peak-gflops", str(self.args.peak_gflops), path]
        r = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.time() - t0
        summary = {}
        for line in r.stdout.splitlines():
            m = re.match(r"^([a-z_A-Z]+):\s+(\S+)", line)
            if m:
                try:
                    summary[m.group(1)] = float(m.group(2))
                except ValueError:
                    summary[m.group(1)] = m.group(2)
        status = "timeout" if r.returncode in (124, 137) else EXIT_STATUS.get(r.returncode, "failed")
        rec = {"id": pid, "kind": kind, "point": point, "key": self.sp.key(point), "seed": seed,
               "status": status, "val_bpb": summary.get("val_bpb") if status == "succeeded" else None,
               "wall_s": round(wall, 2),
               "summary": {k: summary[k] for k in ("training_seconds", "total_seconds",
                                                   "tokens_per_second", "num_steps", "params_total",
                                                   "flops_per_token", "peak_rss_mb") if k in summary},
               "spec": spec}
        if status != "succeeded":
            err = [ln for ln in r.stderr.splitlines() if ln.strip()]
            rec["error"] = err[-1][-300:] if err else f"exit {r.returncode}"
        return rec


def summary(path):
    """What a landscape holds: points and runs by kind and status, the seed
    noise of its pairs, and what its runs cost."""
    recs = [json.loads(ln) for ln in open(path) if ln.strip()]
    runs = [r for r in recs if r["status"] != "refused"]
    pts = {}
    for r in runs:
        pts.setdefault(r["key"], []).append(r)
    by_status, by_kind = {}, {}
    for r in runs:
        by_status[r["status"]] = by_status.get(r["status"], 0) + 1
    for rs in pts.values():
        by_kind[rs[0]["kind"]] = by_kind.get(rs[0]["kind"], 0) + 1
    pairs = []
    for rs in pts.values():
        v = sorted((r["seed"], r["val_bpb"]) for r in rs if r["status"] == "succeeded")
        if len(v) >= 2:
            pairs.append((v[0][1], v[1][1]))
    sd = (sum((a - b) ** 2 / 2 for a, b in pairs) / len(pairs)) ** 0.5 if pairs else float("nan")
    vals = sorted(sum(p) / 2 for p in pairs)
    wall = sum(r["wall_s"] for r in runs)
    train = sum(r.get("summary", {}).get("training_seconds", 0) for r in runs)
    return (f"{len(pts)} points ({', '.join(f'{k} {v}' for k, v in sorted(by_kind.items()))}), "
            f"{len(runs)} runs ({', '.join(f'{k} {v}' for k, v in sorted(by_status.items()))}), "
            f"{len(recs) - len(runs)} draws refused by the spec and drawn again; "
            f"{len(pairs)} seed pairs: pooled seed sd {sd:.4f} val_bpb; point means "
            f"{vals[0]:.3f} .. {vals[-1]:.3f} (median {vals[len(vals) // 2]:.3f}); "
            f"run wall time {wall / 3600:.2f} h in all ({wall / max(1, len(runs)):.0f} s a run, "
            f"{train / 3600:.2f} h of it training)")


BENCH_STATUS = ("succeeded", "failed", "diverged", "oom", "timeout", "crashed")


def from_bench(db, name, out_path, sp, tokens, eval_tokens, corpus_name):
    """Append the runs of make bench-search nights (the nightshift.db of a
    state kept with --keep) at the full budget to a landscape file: real runs
    at the benchmark's corpus and budget, dense where searches end, which the
    design's hypercube samples thinly. A run's configuration is its model and
    train sections (the night's dataset name, tags and seed dropped), so one
    configuration run in two nights, or re-measured, is one point with its
    seeds. A run's id is bench-NAME-ID. A run whose configuration and seed the
    file already holds is left out: the engine is deterministic, so it is the
    same run again (a benchmark's strategies of one search seed share draws, a
    night stopped and run again repeats its runs), not another sample of the
    noise. Returns the number of lines written."""
    import sqlite3
    runs = set()  # (configuration key, seed) of every line: a run already there
    if os.path.exists(out_path):
        with open(out_path) as f:
            for ln in f:
                if ln.strip():
                    r = json.loads(ln)
                    runs.add((r.get("key"), r.get("seed")))
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rows = con.execute("SELECT e.id, e.spec, e.seed, e.status, e.dataset, r.val_bpb "
                       "FROM experiments e LEFT JOIN results r ON r.experiment_id = e.id "
                       "WHERE e.budget_kind = 'tokens' AND e.budget = ? AND e.eval_tokens = ? "
                       "ORDER BY e.id", (tokens, eval_tokens)).fetchall()
    con.close()
    n = 0
    with open(out_path, "a") as out:
        for eid, spec_text, seed, status, dataset, val in rows:
            rid = f"bench-{name}-{eid}"
            if status not in BENCH_STATUS or (status == "succeeded" and val is None):
                continue
            full = json.loads(spec_text)
            spec = {"name": f"{dataset}-{eid}", "seed": seed, "dataset": corpus_name,
                    "model": full["model"], "train": full["train"],
                    "token_budget": tokens, "eval_tokens": eval_tokens}
            point = sp.point_of(spec)
            key = sp.key(point)
            if (key, seed) in runs:
                continue
            out.write(json.dumps({"id": rid, "kind": "bench", "point": point,
                                  "key": key, "seed": seed, "status": status,
                                  "val_bpb": val if status == "succeeded" else None,
                                  "spec": spec}) + "\n")
            runs.add((key, seed))
            n += 1
    return n


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--summary":
        print(summary(sys.argv[2]))
        return
    if "--from-bench" in sys.argv:
        ap = argparse.ArgumentParser(description="landscape lines from make bench-search nights")
        ap.add_argument("--from-bench", required=True, metavar="NIGHTSHIFT_DB",
                        help="a kept bench state's nightshift.db")
        ap.add_argument("--name", required=True,
                        help="the nights' name in the runs' ids (bench-NAME-ID)")
        ap.add_argument("--out", required=True)
        ap.add_argument("--space", default=spacemod.SPACE)
        ap.add_argument("--base", default=spacemod.BASELINE)
        ap.add_argument("--tokens", type=int, default=65536)
        ap.add_argument("--eval-tokens", type=int, default=16384)
        ap.add_argument("--corpus-name", default="brown")
        a = ap.parse_args()
        n = from_bench(a.from_bench, a.name, a.out, spacemod.load(a.space, a.base), a.tokens,
                       a.eval_tokens, a.corpus_name)
        with open(a.out + ".meta.jsonl", "a") as f:  # the space the surrogate encodes it by
            f.write(json.dumps({"landscape": True, "space": os.path.relpath(a.space, ROOT),
                                "from_bench": a.name, "runs": n, "tokens": a.tokens,
                                "eval_tokens": a.eval_tokens, "added": datetime.datetime.now(
                                    datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")})
                    + "\n")
        log(f"landscape: {n} runs of bench nights appended to {a.out}")
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "nightshift"))
    ap.add_argument("--corpus", required=True,
                    help="a directory of .txt documents (the Brown corpus) or one text file")
    ap.add_argument("--corpus-name", default="brown", help="the dataset's name (default brown)")
    ap.add_argument("--space", default=spacemod.SPACE)
    ap.add_argument("--base", default=spacemod.BASELINE)
    ap.add_argument("--out", required=True, help="the JSONL file runs are appended to")
    ap.add_argument("--work", help="state and specs (default: beside --out, OUT.work)")
    ap.add_argument("--lhs", type=int, default=120, help="Latin hypercube points (120)")
    ap.add_argument("--no-oat", action="store_true", help="no one-axis-at-a-time moves")
    ap.add_argument("--design-seed", type=int, default=1)
    ap.add_argument("--seeds", default="1,2", help="training seeds of every point (1,2)")
    ap.add_argument("--tokens", type=int, default=65536)
    ap.add_argument("--eval-tokens", type=int, default=16384)
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time (2)")
    ap.add_argument("--threads", type=int, default=1, help="threads of a run (1)")
    ap.add_argument("--run-limit", type=int, default=900, help="seconds before a run is killed")
    ap.add_argument("--peak-gflops", type=float, default=100,
                    help="passed to train so it does not measure the sgemm peak (MFU only)")
    ap.add_argument("--max-points", type=int, help="stop after this many design points")
    args = ap.parse_args()
    args.work = args.work or args.out + ".work"
    os.makedirs(args.work, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]

    sp = spacemod.load(args.space, args.base)
    state = os.path.join(args.work, "state")
    text_path = os.path.join(args.work, "corpus.txt")
    text = corpus_text(args.corpus)
    with open(text_path, "w", encoding="utf-8") as f:
        f.write(text)
    subprocess.run([args.bin, "prep", "--dir", state, "--name", args.corpus_name, "--vocab", "256",
                    "--test-fraction", "0", "--quiet", "--force", text_path], check=True,
                   stdout=subprocess.DEVNULL)
    runner = Runner(args, sp, state, args.corpus_name)
    points, rejected = design(sp, args.lhs, args.design_seed, runner.refused,
                              oat_moves=not args.no_oat)
    if args.max_points:
        points = points[:args.max_points]

    done = set()
    if os.path.exists(args.out):
        with open(args.out) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    done.add((r["key"], r["seed"]))
    header = {"landscape": True, "space": os.path.relpath(args.space, ROOT),
              "corpus_bytes": len(text.encode()), "tokens": args.tokens,
              "eval_tokens": args.eval_tokens, "seeds": seeds, "threads": args.threads,
              "jobs": args.jobs, "lhs": args.lhs, "design_seed": args.design_seed,
              "points": len(points), "refused_draws": len(rejected),
              "cpu": platform.processor() or platform.machine(), "started":
              datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    with open(args.out + ".meta.jsonl", "a") as f:
        f.write(json.dumps(header) + "\n")
    out = open(args.out, "a")
    for pt, why in rejected:
        if (sp.key(pt), None) not in done:
            out.write(json.dumps({"id": None, "kind": "refused", "point": pt, "key": sp.key(pt),
                                  "seed": None, "status": "refused", "val_bpb": None,
                                  "error": why}) + "\n")
            done.add((sp.key(pt), None))
    out.flush()
    todo = [(pid, kind, pt, s) for pid, kind, pt in points for s in seeds
            if (sp.key(pt), s) not in done]
    log(f"landscape: {len(points)} points x {len(seeds)} seeds, {len(todo)} runs to do "
        f"({len(points) * len(seeds) - len(todo)} done before), {len(rejected)} draws refused; "
        f"{args.jobs} at a time, {args.threads} thread(s) each")
    t0, n_done, wall_sum = time.time(), 0, 0.0
    status_count = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futs = [pool.submit(runner.train, *t) for t in todo]
        try:
            for fut in concurrent.futures.as_completed(futs):
                rec = fut.result()
                out.write(json.dumps(rec) + "\n")
                out.flush()
                n_done += 1
                wall_sum += rec["wall_s"]
                status_count[rec["status"]] = status_count.get(rec["status"], 0) + 1
                el = time.time() - t0
                eta = el / n_done * (len(todo) - n_done)
                log(f"landscape: {n_done}/{len(todo)} | {rec['id']} s{rec['seed']} {rec['status']} "
                    f"{rec['val_bpb'] if rec['val_bpb'] is not None else ''} in {rec['wall_s']:.0f} s"
                    f" | elapsed {fmt_s(el)} | ETA {fmt_s(eta)} | "
                    + ", ".join(f"{k} {v}" for k, v in sorted(status_count.items())))
        except KeyboardInterrupt:
            for f in futs:
                f.cancel()
            raise
    log(f"landscape: done, {n_done} runs in {fmt_s(time.time() - t0)}")


if __name__ == "__main__":
    main()
