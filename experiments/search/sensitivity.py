#!/usr/bin/python3
"""sensitivity.py - which axes move val_bpb at make bench-search's corpus and budget.

    /usr/bin/python3 experiments/search/sensitivity.py --bin build/nightshift
        [--corpus state/corpus] [--out build/sensitivity] [--seeds 2]
        [--baseline-seeds 6] [--tokens 65536] [--eval-tokens 16384] [--jobs 2]

Each candidate axis is moved alone from the baseline (experiments/specs/
baseline.json at a token budget) to two or three values; every variant trains
on --seeds seeds, the baseline on --baseline-seeds, one thread a run, --jobs
runs at once, through `nightshift train` (no daemon: nothing here is a
search). The corpus and dataset are make bench-search's (1 MB of Brown, byte
vocabulary; tests/bench/search.py prep_corpus). A token budget makes a run's
val_bpb independent of the machine's load, so the runs may share the machine.

A few joint moves follow, where a single-axis table is known to mislead: fewer
tokens per optimiser step doubles the steps, and the learning rate that suits
more, noisier steps is not the baseline's.

The micro-batch is derived as the space file says: the largest power of two at
most the baseline's batch_size dividing total_batch_tokens / seq_len.

Output: OUT/runs.jsonl (one line a finished run; a restart skips what is
done) and OUT/sensitivity.md: per variant the mean over its seeds, the change
from the baseline's mean, and that change in units of the seed noise (the
baseline's seed sd; the standard error of a difference of two means of n and
m seeds is sd * sqrt(1/n + 1/m), shown as z).
"""
import argparse
import concurrent.futures
import copy
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "bench"))
import search  # noqa: E402  (prep_corpus: make bench-search's corpus)

DATASET = "sens"

# (path, values): each moved alone from the baseline.
SINGLE = [
    ("train.total_batch_tokens", [256, 512, 1024, 2048, 8192]),
    ("train.matrix_lr", [0.02, 0.08, 0.16]),
    ("train.embedding_lr", [0.3, 1.2]),
    ("train.unembedding_lr", [0.002, 0.008, 0.016]),
    ("train.value_embedding_lr", [0.3, 1.2]),
    ("train.scalar_lr", [0.125, 2.0]),
    ("train.weight_decay", [0.0, 0.05, 0.4]),
    ("train.warmup_ratio", [0.1, 0.2]),
    ("train.warmdown_ratio", [0.0, 0.25, 0.75]),
    ("train.final_lr_frac", [0.1, 0.2]),
    ("train.muon_momentum_steps", [0, 30]),
    ("train.muon_momentum_end", [0.85, 0.98]),
    ("model.depth", [2, 6]),
    ("model.n_embd", [96, 192]),
    ("model.n_head", [1, 4]),
    ("model.mlp", ["gelu", "swiglu"]),
    ("model.mlp_ratio", [2, 3]),
    ("model.window_pattern", ["L", "SL"]),
    ("model.ve_layers", ["none", "all"]),
    ("model.ve_gate_channels", [8, 128]),
]

# Joint moves: {path: value, ...}, labelled.
JOINT = [
    ("tokens/step 2048, matrix_lr 0.08",
     {"train.total_batch_tokens": 2048, "train.matrix_lr": 0.08}),
    ("tokens/step 1024, matrix_lr 0.08",
     {"train.total_batch_tokens": 1024, "train.matrix_lr": 0.08}),
    ("tokens/step 2048, matrix_lr 0.02",
     {"train.total_batch_tokens": 2048, "train.matrix_lr": 0.02}),
    ("tokens/step 512, matrix_lr 0.08",
     {"train.total_batch_tokens": 512, "train.matrix_lr": 0.08}),
    ("tokens/step 1024, unembedding_lr 0.008",
     {"train.total_batch_tokens": 1024, "train.unembedding_lr": 0.008}),
    ("tokens/step 1024, warmdown 0.75",
     {"train.total_batch_tokens": 1024, "train.warmdown_ratio": 0.75}),
]

ALSO = {"model.n_head": ["model.n_kv_head"]}


def set_path(spec, path, value):
    node = spec
    parts = path.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value


def get_path(spec, path, default=None):
    node = spec
    for p in path.split("."):
        if not isinstance(node, dict) or p not in node:
            return default
        node = node[p]
    return node


def derive_micro_batch(spec, base_batch):
    """The space file's rule: the largest power of two <= the base's batch_size
    that divides total_batch_tokens / seq_len."""
    rows = get_path(spec, "train.total_batch_tokens") // get_path(spec, "model.seq_len")
    b = 1
    while b * 2 <= base_batch and rows % (b * 2) == 0:
        b *= 2
    set_path(spec, "train.batch_size", b)


def variants():
    """[(label, {path: value})], the baseline first."""
    out = [("baseline", {})]
    for path, values in SINGLE:
        for v in values:
            out.append((f"{path} = {v}", {path: v}))
    out.extend(JOINT)
    return out


def make_spec(base, moves, seed, args):
    spec = copy.deepcopy(base)
    spec.pop("time_budget_s", None)
    spec.update(dataset=DATASET, token_budget=args.tokens, eval_tokens=args.eval_tokens,
                seed=seed)
    spec["resources"] = {"threads": 1}
    for path, v in moves.items():
        set_path(spec, path, v)
        for other in ALSO.get(path, []):
            set_path(spec, other, v)
    derive_micro_batch(spec, base["train"]["batch_size"])
    spec["name"] = "sens"
    return spec


def train(args, label, spec, seed, workdir):
    tag = f"{abs(hash((label, seed))) % 10**12}"
    spec_path = os.path.join(workdir, f"spec-{tag}.json")
    prog_path = os.path.join(workdir, f"prog-{tag}.jsonl")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    t0 = time.time()
    p = subprocess.run([args.bin, "train", "--dir", args.out, "--peak-gflops", "100",
                        "--progress", prog_path, spec_path],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       timeout=900, env=dict(os.environ, OMP_NUM_THREADS="1"))
    res = {}
    if os.path.exists(prog_path):
        for line in open(prog_path):
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("event") == "result":
                res = e
        os.unlink(prog_path)
    os.unlink(spec_path)
    row = {"label": label, "seed": seed, "exit": p.returncode,
           "status": res.get("status", "failed"), "val_bpb": res.get("val_bpb"),
           "steps": res.get("num_steps"), "tok_s": res.get("tokens_per_second"),
           "wall_s": round(time.time() - t0, 2)}
    if p.returncode != 0:
        row["error"] = p.stderr.strip().splitlines()[-1:] if p.stderr else []
    return row


def summarize(args, rows):
    by = {}
    for r in rows:
        if r["status"] == "succeeded" and r["val_bpb"] is not None:
            by.setdefault(r["label"], []).append(r["val_bpb"])
    base = by.get("baseline", [])
    if len(base) < 2:
        return "too few baseline runs\n"
    bm, bsd = statistics.mean(base), statistics.stdev(base)
    lines = [
        f"# Sensitivity at make bench-search's corpus and budget\n",
        f"{args.tokens} training tokens a run, {args.eval_tokens} validation tokens, byte "
        f"vocabulary, 1 MB of Brown; one thread a run. Baseline "
        f"(experiments/specs/baseline.json): {bm:.4f} +- {bsd:.4f} (mean +- seed sd, "
        f"{len(base)} seeds). z = change / (sd x sqrt(1/n + 1/{len(base)})).\n",
        "| variant | seeds | val_bpb | change | z |", "|---|---:|---:|---:|---:|"]
    order = [lab for lab, _ in variants()]
    failed = {r["label"] for r in rows if r["status"] != "succeeded"}
    for lab in order[1:]:
        xs = by.get(lab, [])
        if not xs:
            if lab in failed:
                lines.append(f"| {lab} | 0 | failed | | |")
            continue
        m = statistics.mean(xs)
        se = bsd * math.sqrt(1 / len(xs) + 1 / len(base))
        lines.append(f"| {lab} | {len(xs)} | {m:.4f} | {m - bm:+.4f} | {(m - bm) / se:+.1f} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "nightshift"))
    ap.add_argument("--corpus", default=os.path.join(ROOT, "state", "corpus"))
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "sensitivity"))
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--baseline-seeds", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=65536)
    ap.add_argument("--eval-tokens", type=int, default=16384)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    args.bin = os.path.abspath(args.bin)
    os.makedirs(args.out, exist_ok=True)
    work = os.path.join(args.out, "work")
    os.makedirs(work, exist_ok=True)
    if not os.path.exists(os.path.join(args.out, "datasets", DATASET, "manifest.json")):
        corpus, _ = search.prep_corpus(args, work)
        subprocess.run([args.bin, "prep", "--dir", args.out, "--name", DATASET, "--vocab", "256",
                        "--test-fraction", "0", "--quiet", corpus], check=True,
                       stdout=subprocess.DEVNULL)
    with open(os.path.join(ROOT, "experiments", "specs", "baseline.json")) as f:
        base = json.load(f)
    runs_path = os.path.join(args.out, "runs.jsonl")
    done = []
    if os.path.exists(runs_path):
        done = [json.loads(line) for line in open(runs_path) if line.strip()]
    have = {(r["label"], r["seed"]) for r in done}
    todo = []
    for label, moves in variants():
        n = args.baseline_seeds if label == "baseline" else args.seeds
        for seed in range(1, n + 1):
            if (label, seed) not in have:
                todo.append((label, make_spec(base, moves, seed, args), seed))
    lock = threading.Lock()
    t0, n_done = time.time(), 0
    with open(runs_path, "a") as out, \
            concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futs = [pool.submit(train, args, lab, spec, seed, work) for lab, spec, seed in todo]
        for fut in concurrent.futures.as_completed(futs):
            row = fut.result()
            with lock:
                out.write(json.dumps(row) + "\n")
                out.flush()
                done.append(row)
                n_done += 1
                el = time.time() - t0
                eta = el / n_done * (len(todo) - n_done)
                print(f"sensitivity: {n_done}/{len(todo)} {row['label']} seed {row['seed']}: "
                      f"{row['status']} {row['val_bpb']} ({el:.0f} s, ETA {eta:.0f} s)",
                      file=sys.stderr, flush=True)
    table = summarize(args, done)
    with open(os.path.join(args.out, "sensitivity.md"), "w") as f:
        f.write(table)
    print(table)


if __name__ == "__main__":
    main()
