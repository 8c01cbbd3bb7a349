"""`make bench`: the engine's forward+backward speed beside PyTorch's.

    /usr/bin/python3 tests/bench/bench.py --bin build/nightshift [--repeat R]
                                          [--threads N] [--only NAME ...]

For each config below it writes a spec, random float32 weights and one token
batch into a temporary directory, then, one after the other in this run:
  - times our engine with `nightshift grad --repeat R` (zero_grad + forward +
    backward R times on the batch after one untimed warm-up; the binary
    prints the median, the minimum and the forward's median in ms);
  - times the PyTorch reference (tests/torch/reference.py) in float32 on the
    same weights and batch the same way: one warm-up, R timed passes, median;
  - checks that the two losses agree to a relative 1e-4.
Both sides get the same thread count (OPENBLAS_NUM_THREADS and the spec's
resources.threads for ours, torch.set_num_threads for torch). On Debian both
end up in the same OpenBLAS sgemm, so the ratio mostly measures everything
around the matrix products. Exits 1 when a run fails or a loss disagrees.

Needs Debian's python3-torch and python3-numpy (`scripts/setup.sh --torch`).
"""

import argparse
import ctypes
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))

# Loss agreement between the two float32 engines (a sanity check, not parity:
# tests/test_parity.c does that against float64 fixtures).
LOSS_RTOL = 1e-4


def default_model():
    """The model section and batch rows of experiments/default.json, with a
    4096-token vocabulary (about what `make dataset` builds with --vocab 4092;
    close enough for timing)."""
    with open(os.path.join(SRC, "experiments", "default.json")) as f:
        spec = json.load(f)
    model = dict(spec["model"])
    model["vocab_size"] = 4096
    return model, spec["train"]["batch_size"]


def configs():
    """(name, model section, batch rows, repeats). Fields not given take the
    reference's defaults, which are not the spec's, so every size field is
    spelled out."""
    common = {"mlp_ratio": 4, "mlp": "relu2", "pos": "rope", "window_pattern": "SSSL",
              "ve_layers": "alternate", "ve_gate_channels": 32, "softcap": 15}
    tiny = dict(common, vocab_size=512, depth=2, n_embd=64, n_head=2, n_kv_head=2, seq_len=64)
    wide = dict(common, vocab_size=4096, depth=4, n_embd=256, n_head=4, n_kv_head=4, seq_len=256)
    model, rows = default_model()
    # The last field is the number of timed passes unless --repeat says
    # otherwise: more for the tiny model, whose passes take milliseconds.
    return [("tiny", tiny, 8, 20), ("default", model, rows, 10), ("wide", wide, 8, 10)]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", required=True, help="the nightshift binary")
    p.add_argument("--repeat", type=int, default=None,
                   help="timed passes per side (default: 20 for tiny, 10 for the others)")
    p.add_argument("--threads", type=int, default=2, help="BLAS/torch threads (default 2)")
    p.add_argument("--only", nargs="*", default=None, help="config names to run")
    a = p.parse_args()
    if (a.repeat is not None and a.repeat < 1) or a.threads < 1:
        p.error("--repeat and --threads must be at least 1")
    return a


ARGS = parse_args()
# OpenBLAS reads its thread count when it is loaded, so set it before torch is
# imported; OMP_NUM_THREADS bounds torch's own OpenMP pool the same way.
os.environ["OPENBLAS_NUM_THREADS"] = str(ARGS.threads)
os.environ["OMP_NUM_THREADS"] = str(ARGS.threads)

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(SRC, "tests", "torch"))
import reference  # noqa: E402


def make_weights(model, rng):
    """float32 numpy arrays for every parameter, in the model's order. Not the
    training init (which zeroes the output projections and gates, so the
    loss would not depend on the blocks): every tensor is non-zero and has
    unit-scale outputs, like the parity fixtures."""
    D = model.cfg["n_embd"]
    out = {}
    for name, p in model.named_parameters():
        shape = tuple(p.shape)
        if name == "transformer.wte.weight":
            w = rng.normal(0.0, 1.0, shape)
        elif name.startswith("value_embeds.") or name == "transformer.wpe.weight":
            w = rng.normal(0.0, 0.3, shape)
        elif name == "lm_head.weight":
            w = rng.normal(0.0, 1.0 / np.sqrt(D), shape)
        elif name == "resid_lambdas":
            w = np.ones(shape)
        elif name == "x0_lambdas":
            w = np.full(shape, 0.1)
        else:
            s = np.sqrt(3.0 / shape[1])
            w = rng.uniform(-s, s, shape)
        out[name] = w.astype(np.float32)
    return out


def run_bin(cmd, threads):
    """Runs the nightshift command line cmd with `threads` BLAS threads.
    Returns (dict of its `key: number` output lines, the command as a shell
    line). Raises RuntimeError when it fails."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads))
    line = f"OPENBLAS_NUM_THREADS={threads} " + shlex.join(cmd)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"{line}\nexited {r.returncode}: {r.stderr.strip()}")
    got = {}
    for text in r.stdout.splitlines():
        key, sep, value = text.partition(":")
        try:
            got[key.strip()] = float(value.split()[0].replace(",", "")) if sep else None
        except (ValueError, IndexError):
            pass
    return got, line


def time_ours(binary, d, repeat, threads):
    """`nightshift grad --repeat` on the files in d: (loss and timings in ms,
    the command line)."""
    cmd = [binary, "grad", "--spec", os.path.join(d, "spec.json"),
           "--checkpoint", os.path.join(d, "weights.safetensors"),
           "--tokens", os.path.join(d, "tokens.bin"), "--repeat", str(repeat)]
    got, line = run_bin(cmd, threads)
    want = ("loss", "fwd_bwd_ms_median", "fwd_bwd_ms_min", "forward_ms_median")
    missing = [k for k in want if got.get(k) is None]
    if missing:
        raise RuntimeError(f"{line}\nprinted no {missing}")
    return got, line


def flops_per_token(binary, d):
    """Training FLOPs per token of the spec in d, from `nightshift cost`."""
    got, line = run_bin([binary, "cost", os.path.join(d, "spec.json")], 1)
    if got.get("flops_per_token") is None:
        raise RuntimeError(f"{line}\nprinted no flops_per_token")
    return got["flops_per_token"]


def time_torch(model, inputs, targets, repeat):
    """The reference's float32 zero_grad + forward + backward, timed like
    `grad --repeat`. Returns a dict with the same keys as time_ours."""

    def one():
        t0 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        t1 = time.perf_counter()
        loss = model(inputs, targets)
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        return loss.item(), t2 - t1, t3 - t0

    if repeat > 1:
        one()
    runs = [one() for _ in range(repeat)]
    return {
        "loss": runs[-1][0],
        "fwd_bwd_ms_median": 1e3 * statistics.median(r[2] for r in runs),
        "fwd_bwd_ms_min": 1e3 * min(r[2] for r in runs),
        "forward_ms_median": 1e3 * statistics.median(r[1] for r in runs),
    }


def bench_one(name, model_section, rows, repeat, args, seed):
    """Times both sides on one config. Returns a dict for the tables."""
    cfg = reference.resolve_config(model_section)
    torch.manual_seed(seed)  # module construction draws inits; all overwritten
    model = reference.GPT(cfg).float()
    rng = np.random.default_rng(seed)
    weights = make_weights(model, rng)
    T, V = cfg["seq_len"], cfg["vocab_size"]
    batch = rng.integers(0, V, size=(rows, T + 1)).astype(np.int32)
    params = sum(w.size for w in weights.values())
    binary = os.path.abspath(args.bin)

    d = tempfile.mkdtemp(prefix=f"nightshift-bench-{name}-")
    try:
        spec = {
            "name": f"bench-{name}",
            "model": model_section,
            "train": {"batch_size": rows, "total_batch_tokens": rows * T},
            "resources": {"threads": args.threads},
        }
        with open(os.path.join(d, "spec.json"), "w") as f:
            json.dump(spec, f, indent=2)
        reference.save_safetensors(os.path.join(d, "weights.safetensors"), weights)
        batch.astype("<i4").tofile(os.path.join(d, "tokens.bin"))
        flops = flops_per_token(binary, d)
        ours, line = time_ours(binary, d, repeat, args.threads)
    finally:
        shutil.rmtree(d, ignore_errors=True)

    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(torch.from_numpy(weights[n]))
    model.eval()  # no dropout, as `grad` runs
    t = torch.from_numpy(batch.astype(np.int64))
    theirs = time_torch(model, t[:, :-1], t[:, 1:], repeat)
    rel = abs(ours["loss"] - theirs["loss"]) / abs(theirs["loss"])
    return {"name": name, "params": params, "tokens": rows * T, "flops_per_token": flops,
            "repeat": repeat, "ours": ours, "torch": theirs, "loss_rel": rel, "command": line}


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for text in f:
                if text.startswith("model name"):
                    return text.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def openblas_info():
    """OpenBLAS's version and the kernel it picked for this CPU, as loaded in
    this process (torch and nightshift link the same system library)."""
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_config.restype = ctypes.c_char_p
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return (f"{lib.openblas_get_config().decode()}; "
                f"kernel {lib.openblas_get_corename().decode()}")
    except (OSError, AttributeError):
        return "not found as libopenblas.so.0"


def print_table(head, rows):
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(head)]
    print("  ".join(h.rjust(w) for h, w in zip(head, widths)))
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))


def main():
    args = ARGS
    torch.set_num_threads(args.threads)
    wanted = configs()
    if args.only:
        unknown = set(args.only) - {c[0] for c in wanted}
        if unknown:
            print(f"bench: unknown config(s) {sorted(unknown)}", file=sys.stderr)
            return 2
        wanted = [c for c in wanted if c[0] in args.only]

    print(f"command: /usr/bin/python3 {shlex.join(sys.argv)}")
    print(f"torch {torch.__version__}: torch.get_num_threads() = {torch.get_num_threads()}, "
          f"OPENBLAS_NUM_THREADS = {os.environ['OPENBLAS_NUM_THREADS']}, "
          f"OMP_NUM_THREADS = {os.environ['OMP_NUM_THREADS']}")
    print(f"nightshift: resources.threads = {args.threads}, "
          f"OPENBLAS_NUM_THREADS = {args.threads}")
    print(f"cpu: {cpu_name()} ({os.cpu_count()} online), load average "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"openblas: {openblas_info()}")
    print("each side: one untimed warm-up, then the timed passes; times are medians")
    print()

    results, failed = [], False
    for k, (name, model_section, rows, repeat) in enumerate(wanted):
        repeat = args.repeat or repeat
        try:
            r = bench_one(name, model_section, rows, repeat, args, seed=2000 + k)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"{name}: FAILED: {e}", file=sys.stderr)
            failed = True
            continue
        print(f"{name}: {r['command']}")
        if r["loss_rel"] > LOSS_RTOL:
            print(f"{name}: FAILED: loss {r['ours']['loss']:.7g} vs torch "
                  f"{r['torch']['loss']:.7g} (rel {r['loss_rel']:.1e} > {LOSS_RTOL:g})",
                  file=sys.stderr)
            failed = True
        results.append(r)
        sys.stdout.flush()

    print()
    main_rows, detail_rows = [], []
    for r in results:
        o, t = r["ours"], r["torch"]
        ours_s = o["fwd_bwd_ms_median"] / 1e3
        main_rows.append((
            r["name"], f"{r['params']:,}", str(r["tokens"]),
            f"{o['fwd_bwd_ms_median']:.1f}", f"{t['fwd_bwd_ms_median']:.1f}",
            f"{t['fwd_bwd_ms_median'] / o['fwd_bwd_ms_median']:.2f}",
            f"{r['tokens'] / ours_s:,.0f}",
        ))
        detail_rows.append((
            r["name"], str(r["repeat"]),
            f"{o['forward_ms_median']:.1f}", f"{t['forward_ms_median']:.1f}",
            f"{o['fwd_bwd_ms_min']:.1f}", f"{t['fwd_bwd_ms_min']:.1f}",
            f"{t['fwd_bwd_ms_min'] / o['fwd_bwd_ms_min']:.2f}",
            f"{r['flops_per_token'] * r['tokens'] / ours_s / 1e9:.1f}",
            f"{r['ours']['loss']:.6f}", f"{r['loss_rel']:.1e}",
        ))
    print_table(("config", "params", "tokens/batch", "ours ms", "torch ms", "torch/ours",
                 "ours tokens/s"), main_rows)
    print()
    print_table(("config", "passes", "ours fwd ms", "torch fwd ms", "ours min ms", "torch min ms",
                 "torch/ours min", "ours GFLOP/s", "loss", "loss rel diff"), detail_rows)
    print()
    print("ms: one zero_grad + forward + backward of the whole batch, median over the passes;")
    print("torch/ours > 1 means nightshift is faster. fwd: the forward alone (median).")
    print("min: the fastest pass, less sensitive to other load on the machine.")
    print("GFLOP/s: `nightshift cost` flops_per_token x tokens / our median time (the MFU "
          "numerator; compare `nightshift calibrate`).")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
