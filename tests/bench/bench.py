"""`make bench`: full training steps of the engine beside PyTorch's.

    /usr/bin/python3 tests/bench/bench.py --bin build/nightshift [--rounds R]
                                          [--threads N] [--only NAME ...]

For each config (S, M, L below: byte vocabulary, seq_len 256, full windows,
value embeddings on alternate layers, relu2) it times full training steps -
zero_grad, forward, backward, optimiser step (Muon for the block matrices,
AdamW for the rest) on one random batch - on both sides, alternately:

    R rounds of:  `nightshift bench --spec S --steps n --warmup w`
                  the PyTorch reference (tests/torch/reference.py with the
                  optimiser of tests/torch/gen_optim_fixtures.py), same n, w

each side in a fresh process, so a round measures tokens per second and the
process's peak RSS. The table shows medians over the rounds: tokens/s of both,
their ratio, the model GFLOP/s (`nightshift cost` FLOPs per token x tokens/s),
MFU against the sgemm peak (`nightshift calibrate`, 2 s, measured right
before each of nightshift's rounds: the machine's speed drifts over a run, and
a peak taken minutes earlier would measure that drift; printed with the
instruction set of OpenBLAS's kernels and how busy the CPUs were), the kernel
path that ran (--isa or NIGHTSHIFT_ISA forces one), peak RSS of both, and the share of nightshift's step time in
attention, matrix products, element-wise work and the optimiser (from the
engine's own timers, engine/prof.h).

Both sides run under the same environment: OPENBLAS_NUM_THREADS and
OMP_NUM_THREADS = --threads, OMP_WAIT_POLICY as the caller set it (or
PASSIVE, as the issue's PyTorch figures were taken; --omp-wait-policy) and
GOMP_SPINCOUNT as the caller set it (or 2000, what an engine command sets
when both are unset: engine/cli.h, THREADS_SPIN_COUNT; --gomp-spincount).
Without Debian's python3-torch only nightshift's columns are printed.

Where the engine's bf16 products run (`nightshift calibrate` reports a bf16
peak: AVX512_BF16, AMX where present), each round also runs both sides in
bf16: `nightshift bench` with train.precision bf16 and the reference under
torch.autocast("cpu", dtype=torch.bfloat16) (fp32 master weights and
optimiser, as autoresearch trains), and the table gains their columns: bf16
tok/s of both, the engine's bf16 over its fp32 (paired by round), the
engine's bf16 over PyTorch's faster mode of the round, and the bf16 run's MFU
against the bf16 peak. --no-bf16 leaves them out.
"""

import argparse
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "tests", "torch"))

COMMON = {"vocab_size": 256, "seq_len": 256, "mlp_ratio": 4, "mlp": "relu2", "pos": "rope",
          "window_pattern": "L", "ve_layers": "alternate", "ve_gate_channels": 32,
          "softcap": 15}
# (name, model fields, batch rows, timed steps per round, warm-up steps)
CONFIGS = [
    ("S", dict(COMMON, depth=2, n_embd=64, n_head=2, n_kv_head=2), 16, 12, 2),
    ("M", dict(COMMON, depth=4, n_embd=128, n_head=4, n_kv_head=4), 16, 8, 2),
    ("L", dict(COMMON, depth=6, n_embd=256, n_head=4, n_kv_head=2), 8, 8, 2),
]
# The targets, nightshift tokens/s over PyTorch's: 3x on S, and at least 2x
# on every config on every kernel path.
TARGETS = {"S": 3.0, "M": 2.0, "L": 2.0}
# bf16: the engine's bf16 over its own fp32 (M and L), and over PyTorch's
# faster mode (fp32 or bf16 autocast) on every config.
BF16_SELF_TARGETS = {"S": None, "M": 1.6, "L": 1.6}
BF16_TORCH_TARGET = 2.0


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", help="the nightshift binary")
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds per config (5)")
    p.add_argument("--threads", type=int, default=2, help="threads of both sides (2)")
    p.add_argument("--only", nargs="*", default=None, help="config names to run")
    p.add_argument("--omp-wait-policy", default=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"),
                   help="OMP_WAIT_POLICY of both sides (default PASSIVE)")
    p.add_argument("--gomp-spincount", default=os.environ.get("GOMP_SPINCOUNT", "2000"),
                   help="GOMP_SPINCOUNT of both sides (default 2000, the engine's own)")
    p.add_argument("--no-torch", action="store_true", help="time nightshift alone")
    p.add_argument("--isa", default=os.environ.get("NIGHTSHIFT_ISA", ""),
                   help="the kernel path nightshift runs (NIGHTSHIFT_ISA: avx512, avx2, generic; "
                        "default: the widest this CPU has)")
    p.add_argument("--no-bf16", action="store_true", help="fp32 columns only")
    p.add_argument("--torch-worker", nargs=4, metavar=("SPEC", "STEPS", "WARMUP", "PRECISION"),
                   help=argparse.SUPPRESS)
    a = p.parse_args()
    if not a.torch_worker and not a.bin:
        p.error("--bin is required")
    if a.rounds < 1 or a.threads < 1:
        p.error("--rounds and --threads must be at least 1")
    return a


# ----------------------------------------------------------------- torch side


def torch_worker(spec_path, steps, warmup, precision):
    """Runs in its own process: times `steps` training steps of the reference
    after `warmup` and prints the same keys as `nightshift bench`. precision
    bf16: the forward and the loss under CPU bf16 autocast, the backward from
    its loss and the optimiser outside it (fp32 weights), as autoresearch."""
    import torch

    import gen_optim_fixtures as opt
    import reference

    with open(spec_path) as f:
        spec = json.load(f)
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    torch.manual_seed(1)
    cfg = reference.resolve_config(spec["model"])
    model = reference.GPT(cfg).float()
    model.train()
    B, T, V = spec["train"]["batch_size"], cfg["seq_len"], cfg["vocab_size"]
    gen = torch.Generator().manual_seed(2)
    inputs = torch.randint(0, V, (B, T), generator=gen)
    targets = torch.randint(0, V, (B, T), generator=gen)

    # Groups as engine/optim.c: Muon for the block matrices, AdamW otherwise.
    muon_suffixes = ("c_q.weight", "c_k.weight", "c_v.weight", "c_proj.weight",
                     "ve_gate.weight", "c_fc.weight")
    state = []
    for name, p in model.named_parameters():
        if name.startswith("transformer.h.") and name.endswith(muon_suffixes):
            red = -1 if p.shape[0] >= p.shape[1] else -2
            second = torch.zeros(p.shape[0], 1) if red == -1 else torch.zeros(1, p.shape[1])
            state.append(("muon", p, torch.zeros_like(p), second, red))
        else:
            state.append(("adamw", p, torch.zeros_like(p), torch.zeros_like(p), [0]))
    f32 = opt.f32
    lr, mom, wd, beta2 = f32(0.02), f32(0.95), f32(0.2), f32(0.95)

    def step():
        model.zero_grad(set_to_none=True)
        if precision == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(inputs, targets)
        else:
            loss = model(inputs, targets)
        loss.backward()
        with torch.no_grad():
            for kind, p, a, b, extra in state:
                if kind == "muon":
                    opt.muon_step(p.grad, p, a, b, mom, lr, wd, beta2, 5, extra)
                else:
                    extra[0] += 1
                    opt.adamw_step(p, p.grad, a, b, f32(extra[0]), f32(0.004), f32(0.8),
                                   f32(0.95), f32(1e-10), f32(0.0))
        return loss.item()

    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(f"loss: {loss:.6f}")
    print(f"step_ms_median: {1e3 * med:.3f}")
    print(f"tokens_per_second: {B * T / med:.1f}")
    print(f"peak_rss_mb: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f}")
    return 0


# ------------------------------------------------------------------- driver


def parse_keys(text):
    got = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep or not value.strip():
            continue
        try:
            got[key.strip()] = float(value.split()[0])
        except ValueError:
            got[key.strip()] = value.strip()
    return got


def run(cmd, env, want):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)}\nexited {r.returncode}: {r.stderr.strip()}")
    got = parse_keys(r.stdout)
    missing = [k for k in want if got.get(k) is None]
    if missing:
        raise RuntimeError(f"{shlex.join(cmd)}\nprinted no {missing}")
    return got


def calibrate(binary, tmp, threads, seconds, env):
    """The sgemm peak, measured now whatever the load (a benchmark wants this
    moment's peak beside its round; the share of the CPUs other processes
    used meanwhile is printed with it)."""
    return run([binary, "calibrate", "--dir", tmp, "--threads", str(threads), "--seconds",
                str(seconds), "--attempts", "1", "--accept-load"], env,
               ["peak_gflops", "isa", "blas_core", "sgemm", "others_cpu", "bf16_gflops",
                "bf16_kernel"])


def peak_source(cal):
    """Whose sgemm the peak is: OpenBLAS's, or the engine's kernel where
    OpenBLAS's kernels are narrower than the path (engine/calibrate.h)."""
    if cal["sgemm"] == "nightshift":
        return f"the engine's {cal['isa']} kernel (OpenBLAS's {cal['blas_core']} kernels narrower)"
    return f"OpenBLAS's {cal['blas_core']} kernels ({cal['isa']})"


def have_torch():
    r = subprocess.run(["/usr/bin/python3", "-c", "import torch, numpy"], capture_output=True)
    return r.returncode == 0


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for text in f:
                if text.startswith("model name"):
                    return text.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def print_table(head, rows):
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(head)]
    print("  ".join(h.rjust(w) for h, w in zip(head, widths)))
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))


def main():
    args = parse_args()
    if args.torch_worker:
        spec, steps, warmup, precision = args.torch_worker
        return torch_worker(spec, int(steps), int(warmup), precision)

    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(args.threads),
               OMP_NUM_THREADS=str(args.threads), OMP_WAIT_POLICY=args.omp_wait_policy,
               GOMP_SPINCOUNT=args.gomp_spincount)
    if args.isa:
        env["NIGHTSHIFT_ISA"] = args.isa
    binary = os.path.abspath(args.bin)
    use_torch = not args.no_torch and have_torch()
    wanted = CONFIGS
    if args.only:
        unknown = set(args.only) - {c[0] for c in CONFIGS}
        if unknown:
            print(f"bench: unknown config(s) {sorted(unknown)}", file=sys.stderr)
            return 2
        wanted = [c for c in CONFIGS if c[0] in args.only]

    print(f"command: /usr/bin/python3 {shlex.join(sys.argv)}")
    print(f"both sides: OPENBLAS_NUM_THREADS={args.threads} OMP_NUM_THREADS={args.threads} "
          f"OMP_WAIT_POLICY={args.omp_wait_policy} GOMP_SPINCOUNT={args.gomp_spincount}")
    print(f"cpu: {cpu_name()} ({os.cpu_count()} online), load average at start "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"kernel path: {args.isa or 'auto'} (NIGHTSHIFT_ISA); OPENBLAS_CORETYPE="
          f"{os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    if not use_torch:
        print("torch: not available to /usr/bin/python3 (scripts/setup.sh --torch installs "
              "python3-torch); nightshift's columns only" if not args.no_torch
              else "torch: skipped (--no-torch)")

    tmp = tempfile.mkdtemp(prefix="nightshift-bench-")
    failed = False
    try:
        cal = calibrate(binary, tmp, args.threads, 3, env)
        peak = cal["peak_gflops"]
        bf16 = not args.no_bf16 and cal["bf16_gflops"] > 0
        print(f"sgemm peak ({args.threads} threads, `nightshift calibrate`): {peak:.1f} GFLOP/s "
              f"at the start, {peak_source(cal)}, others used "
              f"{100 * cal['others_cpu']:.0f}% of the CPUs meanwhile; MFU uses the peak measured "
              f"before each round")
        if bf16:
            print(f"bf16 peak: {cal['bf16_gflops']:.1f} GFLOP/s at the start, the engine's "
                  f"{cal['bf16_kernel']} product (bf16 operands, fp32 accumulation); a bf16 "
                  "run's MFU is against the bf16 peak measured before its round")
        elif not args.no_bf16:
            print("bf16: this CPU (or the forced path) has no bf16 products; fp32 columns only")
        print(f"each side per round: a fresh process, warm-up steps, then timed steps; "
              f"{args.rounds} rounds alternating; medians over rounds")
        print()
        results = []
        for name, model, rows, steps, warmup in wanted:
            spec = {"name": f"bench-{name}", "model": model,
                    "train": {"batch_size": rows, "total_batch_tokens": rows * model["seq_len"]},
                    "resources": {"threads": args.threads}}
            path = os.path.join(tmp, f"{name}.json")
            with open(path, "w") as f:
                json.dump(spec, f)
            ours, theirs, ours16, theirs16 = [], [], [], []
            path16 = os.path.join(tmp, f"{name}-bf16.json")
            if bf16:
                with open(path16, "w") as f:
                    json.dump(dict(spec, train=dict(spec["train"], precision="bf16")), f)
            try:
                for _ in range(args.rounds):
                    rc = calibrate(binary, tmp, args.threads, 2, env)
                    ours.append(run([binary, "bench", "--spec", path, "--steps", str(steps),
                                     "--warmup", str(warmup)], env,
                                    ["tokens_per_second", "flops_per_token",
                                     "optim_flops_per_token", "peak_rss_mb", "isa",
                                     "blas_core"]))
                    o = ours[-1]
                    o["mfu"] = (o["flops_per_token"] * o["tokens_per_second"] / 1e9
                                / rc["peak_gflops"])
                    o["mfu_optim"] = o["mfu"] * (1 + o["optim_flops_per_token"]
                                                 / o["flops_per_token"])
                    ours[-1]["peak_gflops"] = rc["peak_gflops"]
                    ours[-1]["peak_isa"] = rc["isa"]
                    ours[-1]["peak_sgemm"] = rc["sgemm"]
                    ours[-1]["peak_others"] = rc["others_cpu"]
                    if use_torch:
                        theirs.append(run(["/usr/bin/python3", os.path.abspath(__file__),
                                           "--torch-worker", path, str(steps), str(warmup),
                                           "fp32"], env, ["tokens_per_second", "peak_rss_mb"]))
                    if bf16:
                        ours16.append(run([binary, "bench", "--spec", path16, "--steps",
                                           str(steps), "--warmup", str(warmup)], env,
                                          ["tokens_per_second", "flops_per_token", "precision"]))
                        o16 = ours16[-1]
                        o16["mfu"] = (o16["flops_per_token"] * o16["tokens_per_second"] / 1e9
                                      / rc["bf16_gflops"])
                        o16["peak_gflops"] = rc["bf16_gflops"]
                        if use_torch:
                            theirs16.append(run(["/usr/bin/python3", os.path.abspath(__file__),
                                                 "--torch-worker", path, str(steps), str(warmup),
                                                 "bf16"], env, ["tokens_per_second"]))
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"{name}: FAILED: {e}", file=sys.stderr)
                failed = True
                continue
            med = lambda runs, k: statistics.median(r[k] for r in runs)  # noqa: E731
            results.append((name, model, rows, steps, ours, theirs, med, ours16, theirs16))
            tps = med(ours, "tokens_per_second")
            line = f"{name}: nightshift {tps:,.0f} tok/s"
            if theirs:
                line += f", torch {med(theirs, 'tokens_per_second'):,.0f} tok/s"
            rounds = " ".join(f"{r['tokens_per_second']:.0f}" for r in ours)
            mfus = " ".join(f"{100 * r['mfu']:.1f}" for r in ours)
            peaks = " ".join(f"{r['peak_gflops']:.0f}" for r in ours)
            others = " ".join(f"{100 * r['peak_others']:.0f}" for r in ours)
            paired = ""
            if theirs:
                # each round runs the two sides back to back, so a round's own
                # ratio cancels the machine's drift between rounds
                ratios = [o["tokens_per_second"] / t["tokens_per_second"]
                          for o, t in zip(ours, theirs)]
                paired = (f"; torch rounds: "
                          + " ".join(f"{t['tokens_per_second']:.0f}" for t in theirs)
                          + f"; ratio by round: {' '.join(f'{x:.2f}' for x in ratios)} (median "
                          f"{statistics.median(ratios):.2f})")
            print(f"{line} (path {ours[0]['isa']}, OpenBLAS {ours[0]['blas_core']}; nightshift "
                  f"rounds: {rounds}{paired}; MFU % {mfus}; peak GFLOP/s {peaks} from "
                  f"{ours[0]['peak_isa']} sgemm of {ours[0]['peak_sgemm']}, others used % of "
                  f"the CPUs {others})")
            if ours[0]["peak_sgemm"] == "nightshift":
                print(f"{name}: note: OpenBLAS's {ours[0]['blas_core']} kernels are narrower than "
                      f"the path, so the peak is the engine's own {ours[0]['peak_isa']} sgemm; "
                      "OpenBLAS's kernels of that instruction set may be faster, and MFU against "
                      "them lower. Set OPENBLAS_CORETYPE by hand for this benchmark (SkylakeX for "
                      "avx512) to compare with them.")
            elif ours[0]["peak_isa"] != ours[0]["isa"]:
                print(f"{name}: note: the peak is OpenBLAS's {ours[0]['peak_isa']} sgemm, the "
                      f"path {ours[0]['isa']}: MFU against another instruction set's peak. Set "
                      "OPENBLAS_CORETYPE by hand for this benchmark (SkylakeX for avx512, Haswell "
                      "for avx2) to compare like with like.")
            if ours16:
                self_r = [b["tokens_per_second"] / f["tokens_per_second"]
                          for b, f in zip(ours16, ours)]
                rounds16 = " ".join(f"{r['tokens_per_second']:.0f}" for r in ours16)
                mfus16 = " ".join(f"{100 * r['mfu']:.1f}" for r in ours16)
                peaks16 = " ".join(f"{r['peak_gflops']:.0f}" for r in ours16)
                line16 = (f"{name} bf16: nightshift {med(ours16, 'tokens_per_second'):,.0f} tok/s "
                          f"(rounds: {rounds16}; over its fp32 by round: "
                          f"{' '.join(f'{x:.2f}' for x in self_r)}, median "
                          f"{statistics.median(self_r):.2f}; MFU % {mfus16} of bf16 peaks "
                          f"{peaks16})")
                if theirs16:
                    best = [b["tokens_per_second"] / max(t["tokens_per_second"], t16["tokens_per_second"])
                            for b, t, t16 in zip(ours16, theirs, theirs16)]
                    line16 += (f"; torch autocast rounds: "
                               + " ".join(f"{t['tokens_per_second']:.0f}" for t in theirs16)
                               + f"; over torch's faster mode by round: "
                               + " ".join(f"{x:.2f}" for x in best)
                               + f" (median {statistics.median(best):.2f})")
                print(line16)
            sys.stdout.flush()
    finally:
        subprocess.run(["rm", "-rf", tmp])

    print()
    head = ["config", "depth", "n_embd", "heads(kv)", "batch", "ns tok/s"]
    if use_torch:
        head += ["torch tok/s", "ratio", "target"]
    head += ["GFLOP/s", "MFU %", "+optim %", "ns RSS MB"]
    if use_torch:
        head += ["torch RSS MB"]
    head += ["attn %", "matmul %", "elem %", "optim %"]
    rows_out = []
    for name, model, rows, steps, ours, theirs, med, _, _ in results:
        tps = med(ours, "tokens_per_second")
        gflops = med(ours, "flops_per_token") * tps / 1e9
        r = [name, str(model["depth"]), str(model["n_embd"]),
             f"{model['n_head']}({model['n_kv_head']})", str(rows), f"{tps:,.0f}"]
        if use_torch:
            ttps = med(theirs, "tokens_per_second")
            r += [f"{ttps:,.0f}", f"{tps / ttps:.2f}", f">= {TARGETS[name]:.1f}"]
        r += [f"{gflops:.1f}", f"{100 * med(ours, 'mfu'):.1f}",
              f"{100 * med(ours, 'mfu_optim'):.1f}", f"{med(ours, 'peak_rss_mb'):.0f}"]
        if use_torch:
            r += [f"{med(theirs, 'peak_rss_mb'):.0f}"]
        r += [f"{100 * med(ours, k + '_share'):.0f}"
              for k in ("attention", "matmul", "elementwise", "optim")]
        rows_out.append(r)
    print_table(head, rows_out)
    if any(r[7] for r in results):
        print()
        head16 = ["config", "ns fp32", "ns bf16", "bf16/fp32", "target"]
        if use_torch:
            head16 += ["torch fp32", "torch bf16", "bf16 / torch best", "target"]
        head16 += ["MFU fp32 %", "MFU bf16 %"]
        rows16 = []
        for name, model, rows, steps, ours, theirs, med, ours16, theirs16 in results:
            if not ours16:
                continue
            self_r = statistics.median(b["tokens_per_second"] / f["tokens_per_second"]
                                       for b, f in zip(ours16, ours))
            tgt = BF16_SELF_TARGETS[name]
            r = [name, f"{med(ours, 'tokens_per_second'):,.0f}",
                 f"{med(ours16, 'tokens_per_second'):,.0f}", f"{self_r:.2f}",
                 f">= {tgt:.1f}" if tgt else "-"]
            if use_torch:
                best = statistics.median(
                    b["tokens_per_second"] / max(t["tokens_per_second"], t16["tokens_per_second"])
                    for b, t, t16 in zip(ours16, theirs, theirs16))
                r += [f"{med(theirs, 'tokens_per_second'):,.0f}",
                      f"{med(theirs16, 'tokens_per_second'):,.0f}", f"{best:.2f}",
                      f">= {BF16_TORCH_TARGET:.1f}"]
            r += [f"{100 * med(ours, 'mfu'):.1f}", f"{100 * med(ours16, 'mfu'):.1f}"]
            rows16.append(r)
        print_table(head16, rows16)
        print("bf16 table: tok/s medians over rounds; bf16/fp32 and bf16 / torch best are "
              "medians of each round's own ratio (torch best: the faster of PyTorch's fp32 and "
              "bf16 autocast in that round); MFU bf16 against the bf16 peak.")
    print()
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("tok/s: tokens per second of full training steps (median step of a round, median "
          "over rounds); ratio = nightshift / torch.")
    if use_torch:
        print("ratio by round (each config's line): a round's nightshift over its torch, run back "
              "to back; where the machine's speed drifts between rounds, their median is the "
              "steadier figure.")
    print("GFLOP/s: `nightshift cost` training FLOPs per token x nightshift tok/s; MFU: a "
          "round's GFLOP/s over the sgemm peak measured right before it, median over rounds.")
    print("+optim: the same with the optimiser's FLOPs counted too (Muon's Newton-Schulz "
          "iterations as the engine runs them, `optim_flops_per_token` of `nightshift bench`): "
          "MFU leaves them out, and at a small batch they are a large share of the work.")
    print("attn/matmul/elem/optim: nightshift's step time by phase (engine/prof.h); elem is "
          "everything outside attention, linear layers and the optimiser.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
