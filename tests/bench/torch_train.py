"""`make bench-train`: the PyTorch side of a training run on a nightshift dataset.

    /usr/bin/python3 tests/bench/torch_train.py SPEC.json [--dir STATE | --data DIR]
                     [--threads N] [--save W.safetensors] [--progress STEPS.jsonl]

Trains SPEC's model as `nightshift train --dir STATE SPEC.json` does, with
PyTorch: the model of tests/torch/reference.py, the AdamW and Muon steps of
tests/torch/gen_optim_fixtures.py (both imported, float32), on the dataset
STATE/datasets/<spec.dataset> (or DIR), for the spec's budget, then prints
val_bpb. What makes the two runs the same computation:

  init      gpt_init_weights (engine/gpt.c): the engine's generator
            (xoshiro256** seeded by splitmix64 with spec.seed, engine/rng.c)
            drawn in the engine's tensor order, so both sides start from the
            same weights bit for bit
  rows      train.sampler (engine/data.c): "random" draws every row's offset
            uniformly from [0, n - T - 1] with the same generator seeded
            seed ^ 0x9e3779b97f4a7c15, "sequential" walks from a seeded start;
            the same rows in the same order as the engine
  optimizer the groups of engine/optim.c (Muon for the block matrices, AdamW
            for the rest; learning rates scaled as there), the LR multiplier
            and Muon weight decay by progress through the budget (training
            seconds / time_budget_s, or steps x tokens per step / token_budget,
            before the step), Muon momentum by step
  budget    the sum of the optimiser steps' wall-clock times; the step in
            flight completes (startup and evaluation are not counted)
  val_bpb   every full (T+1)-token window of val.bin at stride T, B rows per
            forward: summed nats over targets whose token is not special
            (token_bytes > 0) / (ln 2 x their summed UTF-8 bytes)

The float arithmetic differs (PyTorch's kernels and summation orders), so
with a token budget the two val_bpb agree closely but not bit for bit. At
initialisation every block is an identity (zero output projections) and
RMSNorm is scale-invariant, so the gradients of resid_lambdas and x0_lambdas
are rounding noise (~1e-11), which AdamW's first step (eps 1e-10) would turn
into updates of up to the full learning rate, different on each side: both
sides leave the scalars out of the first step (engine/optim.h). Embedding dropout
(model.embed_dropout > 0) draws its masks from torch's generator, not the
engine's.

Prints progress on stderr and one JSON line on stdout: trainer, tokens, steps,
val_bpb, threads, training_seconds, total_seconds, tokens_per_second,
eval_tokens, the budget, peak_rss_mb. Exit 0, 1 failed, 3 diverged (as
`nightshift train`). Threads: --threads, else resources.threads, else every
CPU this process may run on; torch.set_num_threads and the BLAS library's own
count (through openblas_set_num_threads when torch's BLAS is OpenBLAS).
"""

import argparse
import ctypes
import json
import math
import os
import resource
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "tests", "torch"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import gen_optim_fixtures as opt  # noqa: E402
import reference  # noqa: E402

DIVERGED_LOSS = 100.0  # nats, as engine/train.c
ADAM_EPS = 1e-10  # every AdamW group (engine/optim.c)
M64 = (1 << 64) - 1


# ------------------------------------------------------------------ the spec


def load_spec(path):
    """SPEC.json over experiments/specs/default.json (which lists every field with
    its default), with the two rules of engine/spec.c that change a default:
    max_pos follows seq_len, and a token_budget makes time_budget_s 0 unless
    the spec gives it."""
    with open(os.path.join(SRC, "experiments", "specs", "default.json")) as f:
        spec = json.load(f)
    with open(path) as f:
        user = json.load(f)
    for key, value in user.items():
        if key not in spec:
            raise ValueError(f"{path}: unknown field {key}")
        if isinstance(spec[key], dict):
            unknown = set(value) - set(spec[key])
            if unknown:
                raise ValueError(f"{path}: unknown fields {key}.{sorted(unknown)}")
            spec[key].update(value)
        else:
            spec[key] = value
    model = user.get("model", {})
    if "max_pos" not in model:
        spec["model"]["max_pos"] = spec["model"]["seq_len"]
    if user.get("token_budget", 0) > 0 and "time_budget_s" not in user:
        spec["time_budget_s"] = 0
    if (spec["time_budget_s"] > 0) == (spec["token_budget"] > 0):
        raise ValueError(f"{path}: exactly one of time_budget_s and token_budget must be > 0")
    return spec


# ---------------------------------------------------------------- the dataset


class Dataset:
    """A prepared dataset (engine/data.h): the manifest, token_bytes.bin
    (int32 per id: UTF-8 bytes, 0 for specials), train.bin and val.bin
    (uint16 token streams, mapped)."""

    def __init__(self, directory):
        with open(os.path.join(directory, "manifest.json")) as f:
            m = json.load(f)
        if m.get("dtype") != "uint16":
            raise ValueError(f"{directory}/manifest.json: dtype must be uint16")
        self.vocab_size = m["vocab_size"]
        self.token_bytes = np.fromfile(os.path.join(directory, "token_bytes.bin"), dtype="<i4")
        self.train = np.memmap(os.path.join(directory, "train.bin"), dtype="<u2", mode="r")
        self.val = np.memmap(os.path.join(directory, "val.bin"), dtype="<u2", mode="r")
        for what, got, want in (("token_bytes.bin", len(self.token_bytes), self.vocab_size),
                                ("train.bin", len(self.train), m["train_tokens"]),
                                ("val.bin", len(self.val), m["val_tokens"])):
            if got != want:
                raise ValueError(f"{directory}/{what}: {got} entries, the manifest says {want}")


# ------------------------------------------------- the engine's generator


class Rng:
    """engine/rng.c: xoshiro256** seeded through splitmix64."""

    def __init__(self, seed):
        x, s = seed & M64, []
        for _ in range(4):
            x = (x + 0x9E3779B97F4A7C15) & M64
            z = x
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
            s.append(z ^ (z >> 31))
        self.s = s

    def draws(self, n):
        """The next n outputs of rng_next, as a list of ints."""
        s0, s1, s2, s3 = self.s
        out = [0] * n
        for i in range(n):
            x = (s1 * 5) & M64
            out[i] = ((((x << 7) | (x >> 57)) & M64) * 9) & M64
            t = (s1 << 17) & M64
            s2 ^= s0
            s3 ^= s1
            s1 ^= s2
            s0 ^= s3
            s2 ^= t
            s3 = ((s3 << 45) | (s3 >> 19)) & M64
        self.s = [s0, s1, s2, s3]
        return out

    def uniform(self, n):
        """n of rng_uniform: 24-bit floats in [0, 1), float32."""
        return np.array([d >> 40 for d in self.draws(n)], dtype=np.float32) * np.float32(
            1.0 / 16777216.0)

    def normal(self, n):
        """n of rng_normal (Box-Muller in double with libm's log and cos,
        one value per two draws), float32."""
        d = self.draws(2 * n)
        k = 1.0 / 9007199254740992.0
        log, cos, sqrt, two_pi = math.log, math.cos, math.sqrt, 2.0 * math.pi
        return np.array([sqrt(-2.0 * log(1.0 - (d[2 * i] >> 11) * k))
                         * cos(two_pi * ((d[2 * i + 1] >> 11) * k)) for i in range(n)],
                        dtype=np.float32)

    def below(self, n):
        """rng_below: uniform in [0, n) by rejection."""
        limit = M64 - M64 % n
        while True:
            x = self.draws(1)[0]
            if x < limit:
                return x % n


def engine_tensor_order(model, cfg):
    """(name, parameter) in the engine's tensor table order (engine/gpt.c
    build_table), which is the order gpt_init_weights draws in."""
    params = dict(model.named_parameters())
    names = ["transformer.wte.weight"]
    if cfg["pos"] == "learned":
        names.append("transformer.wpe.weight")
    for i in range(cfg["depth"]):
        h = f"transformer.h.{i}."
        names += [h + "attn.c_q.weight", h + "attn.c_k.weight", h + "attn.c_v.weight",
                  h + "attn.c_proj.weight"]
        if cfg["has_ve"][i]:
            names.append(h + "attn.ve_gate.weight")
        names += [h + "mlp.c_fc.weight", h + "mlp.c_proj.weight"]
    names += [f"value_embeds.{i}.weight" for i in range(cfg["depth"]) if cfg["has_ve"][i]]
    if not cfg["tie_embeddings"]:
        names.append("lm_head.weight")
    names += ["resid_lambdas", "x0_lambdas"]
    assert sorted(names) == sorted(params), "the tensor table differs from the reference's"
    return [(n, params[n]) for n in names]


def init_weights(model, cfg, seed):
    """gpt_init_weights: wte normal(0, 1), wpe 0.02 normal, lm_head 0.001
    normal, q/k/v/fc and value embeddings uniform(-s, s) with s =
    sqrt(3)/sqrt(n_embd), projections and gates 0, resid_lambdas 1,
    x0_lambdas 0.1; float32 arithmetic as in C."""
    rng = Rng(seed)
    s = np.float32(np.sqrt(np.float32(3.0)) / np.sqrt(np.float32(cfg["n_embd"])))
    uniform_kinds = ("attn.c_q.weight", "attn.c_k.weight", "attn.c_v.weight", "mlp.c_fc.weight")
    with torch.no_grad():
        for name, p in engine_tensor_order(model, cfg):
            n = p.numel()
            if name == "transformer.wte.weight":
                x = rng.normal(n)
            elif name == "transformer.wpe.weight":
                x = np.float32(0.02) * rng.normal(n)
            elif name == "lm_head.weight":
                x = np.float32(0.001) * rng.normal(n)
            elif name.endswith(uniform_kinds) or name.startswith("value_embeds."):
                x = s * (np.float32(2.0) * rng.uniform(n) - np.float32(1.0))
            elif name == "resid_lambdas":
                x = np.ones(n, dtype=np.float32)
            elif name == "x0_lambdas":
                x = np.full(n, 0.1, dtype=np.float32)
            else:  # output projections and value-embedding gates
                x = np.zeros(n, dtype=np.float32)
            p.copy_(torch.from_numpy(x).view(p.shape))


class Sampler:
    """engine/data.c data_sampler_*: the offset of each training row."""

    def __init__(self, kind, n, T, seed):
        self.kind, self.n, self.T = kind, n, T
        self.rng = Rng((seed & M64) ^ 0x9E3779B97F4A7C15)
        self.cursor = self.rng.below(n - T) if kind == "sequential" else 0

    def next(self):
        if self.kind == "random":
            return self.rng.below(self.n - self.T)
        if self.cursor + self.T + 1 > self.n:
            self.cursor = 0
        off = self.cursor
        self.cursor += self.T
        return off


# ---------------------------------------------------------------- optimizer


class Optimizer:
    """engine/optim.c optim_new / optim_step over the reference model."""

    MUON = ("attn.c_q.weight", "attn.c_k.weight", "attn.c_v.weight", "attn.c_proj.weight",
            "attn.ve_gate.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")

    def __init__(self, model, cfg, train):
        width = (cfg["n_embd"] / 768.0) ** -0.5
        beta1, beta2 = train["adam_betas"]
        self.muon_beta2 = opt.f32(train["muon_beta2"])
        self.ns_steps = train["ns_steps"]
        self.groups = []  # [kind, param, lr, state...]
        for name, p in engine_tensor_order(model, cfg):
            if name.startswith("transformer.h.") and name.endswith(self.MUON):
                rows, cols = p.shape
                lr = train["matrix_lr"] * math.sqrt(max(1.0, rows / cols))
                red = -1 if rows >= cols else -2
                second = torch.zeros(rows, 1) if red == -1 else torch.zeros(1, cols)
                self.groups.append(["muon", p, lr, torch.zeros_like(p), second, red])
                continue
            b1 = beta1
            if name == "lm_head.weight":
                lr = train["unembedding_lr"] * width
            elif name == "transformer.wte.weight":
                tied = cfg["tie_embeddings"]
                lr = (train["unembedding_lr"] if tied else train["embedding_lr"]) * width
            elif name == "transformer.wpe.weight":
                lr = train["embedding_lr"] * width
            elif name.startswith("value_embeds."):
                lr = train["value_embedding_lr"] * width
            elif name == "resid_lambdas":
                lr = train["scalar_lr"] * 0.01
            elif name == "x0_lambdas":
                lr, b1 = train["scalar_lr"], train["x0_beta1"]
            else:
                raise ValueError(f"{name}: no optimizer group")
            # The scalars sit out the first step (engine/optim.h): their
            # gradient at initialisation is rounding noise.
            skip = 1 if name in ("resid_lambdas", "x0_lambdas") else 0
            self.groups.append(["adamw", p, lr, torch.zeros_like(p), torch.zeros_like(p),
                                0, opt.f32(b1), opt.f32(beta2), skip])

    def step(self, lr_mult, momentum, wd):
        f32 = opt.f32
        with torch.no_grad():
            for g in self.groups:
                p, lr = g[1], f32(g[2] * lr_mult)
                if g[0] == "muon":
                    # muon_step overwrites its gradient argument, as the C kernel's copy.
                    opt.muon_step(p.grad, p, g[3], g[4], f32(momentum), lr, f32(wd),
                                  self.muon_beta2, self.ns_steps, g[5])
                elif g[8] > 0:
                    g[8] -= 1
                else:
                    g[5] += 1
                    opt.adamw_step(p, p.grad, g[3], g[4], f32(g[5]), lr, g[6], g[7],
                                   f32(ADAM_EPS), f32(0.0))


def lr_multiplier(progress, warmup, warmdown, final):
    """optim_lr_multiplier."""
    progress = min(max(progress, 0.0), 1.0)
    if progress < warmup:
        return progress / warmup if warmup > 0 else 1.0
    if progress < 1.0 - warmdown or warmdown <= 0:
        return 1.0
    cooldown = (1.0 - progress) / warmdown
    return cooldown + (1.0 - cooldown) * final


def muon_momentum(step, start, end, ramp):
    """optim_muon_momentum."""
    frac = min(max(step / ramp if ramp > 0 else 1.0, 0.0), 1.0)
    return (1.0 - frac) * start + frac * end


# --------------------------------------------------------------- threads


def set_threads(n):
    """torch's OpenMP team and, when torch's BLAS is OpenBLAS, its threads.
    Returns the BLAS thread count, or None when the BLAS cannot be asked."""
    torch.set_num_threads(n)
    for lib in ("libblas.so.3", "libopenblas.so.0"):
        try:
            blas = ctypes.CDLL(lib)
            blas.openblas_set_num_threads(ctypes.c_int(n))
            return int(blas.openblas_get_num_threads())
        except (OSError, AttributeError):
            continue
    return None


# ------------------------------------------------------------------- train


def batch(tokens, offsets, T):
    rows = np.stack([np.asarray(tokens[o:o + T + 1], dtype=np.int64) for o in offsets])
    rows = torch.from_numpy(rows)
    return rows[:, :T], rows[:, 1:]


def evaluate_bpb(model, data, B, T):
    """engine/train.c evaluate_bpb. Returns (val_bpb, target tokens counted)."""
    n = len(data.val)
    rows = (n - 1) // T if n > T else 0
    token_bytes = torch.from_numpy(data.token_bytes.astype(np.int64))
    nats, nbytes, counted = 0.0, 0, 0
    model.eval()
    with torch.no_grad():
        for row in range(0, rows, B):
            x, y = batch(data.val, [r * T for r in range(row, min(row + B, rows))], T)
            y = torch.where(token_bytes[y] > 0, y, torch.full_like(y, -1))
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1),
                                   ignore_index=-1, reduction="none")
            keep = y.reshape(-1) >= 0
            nats += loss[keep].double().sum().item()
            nbytes += int(token_bytes[y.reshape(-1)[keep]].sum())
            counted += int(keep.sum())
    model.train()
    return (nats / (math.log(2) * nbytes) if nbytes else float("nan")), counted


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("spec", help="the spec JSON, as for `nightshift train`")
    p.add_argument("--dir", default="state",
                   help="state directory: the dataset is DIR/datasets/<spec.dataset> (state)")
    p.add_argument("--data", help="the dataset directory itself (overrides --dir)")
    p.add_argument("--threads", type=int, default=0,
                   help="threads (default resources.threads, 0 = every CPU available)")
    p.add_argument("--save", help="write the trained weights here (safetensors, F32)")
    p.add_argument("--progress", help="write one JSON line per step here, as `nightshift "
                   "train --progress` does ({\"event\":\"step\",\"step\",\"loss\",...})")
    return p.parse_args()


def main():
    args = parse_args()
    t_start = time.perf_counter()
    spec = load_spec(args.spec)
    data = Dataset(args.data or os.path.join(args.dir, "datasets", spec["dataset"]))
    mspec = dict(spec["model"])
    if mspec["vocab_size"] == 0:
        mspec["vocab_size"] = data.vocab_size
    elif mspec["vocab_size"] != data.vocab_size:
        raise ValueError(f"model.vocab_size {mspec['vocab_size']} differs from the dataset's "
                         f"{data.vocab_size}")
    cfg = reference.resolve_config(mspec)
    tr = spec["train"]
    B, T = tr["batch_size"], cfg["seq_len"]
    tokens_per_step = tr["total_batch_tokens"]
    accum = tokens_per_step // (B * T)
    if accum < 1 or accum * B * T != tokens_per_step:
        raise ValueError(f"train.total_batch_tokens {tokens_per_step} is not a multiple of "
                         f"batch_size*seq_len {B * T}")

    threads = args.threads or spec["resources"]["threads"] or len(os.sched_getaffinity(0))
    blas_threads = set_threads(threads)
    torch.manual_seed(spec["seed"] & 0xFFFFFFFF)  # embed dropout only
    model = reference.GPT(cfg).float()
    init_weights(model, cfg, spec["seed"])
    model.train()
    optimizer = Optimizer(model, cfg, tr)
    sampler = Sampler(tr["sampler"], len(data.train), T, spec["seed"])
    time_budget, token_budget = float(spec["time_budget_s"]), float(spec["token_budget"])
    n_params = sum(p.numel() for p in model.parameters())
    budget = f"{token_budget:.0f} tokens" if token_budget > 0 else f"{time_budget:g}s"
    print(f"torch_train: {spec['name']} | {len(data.train)} train / {len(data.val)} val tokens, "
          f"vocab {data.vocab_size} | {n_params / 1e6:.2f}M params | {threads} threads "
          f"(BLAS {blas_threads if blas_threads is not None else '?'}) | budget {budget} | "
          f"{tr['sampler']} sampler | {accum} x {B} x {T} tokens/step | torch {torch.__version__}",
          file=sys.stderr)

    progress_file = open(args.progress, "w") if args.progress else None
    training_time, step, smooth, last_print = 0.0, 0, 0.0, time.perf_counter()
    t_train_start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        loss_sum = 0.0
        for micro in range(accum):
            x, y = batch(data.train, [sampler.next() for _ in range(B)], T)
            loss = model(x, y)
            value = loss.item()
            if not math.isfinite(value) or value > DIVERGED_LOSS:
                print(f"torch_train: diverged: loss {value} at step {step + 1} "
                      f"(micro-batch {micro + 1})", file=sys.stderr)
                return 3
            loss_sum += value
            (loss / accum).backward()
        if token_budget > 0:
            progress = min(step * tokens_per_step / token_budget, 1.0)
        else:
            progress = min(training_time / time_budget, 1.0)
        lrm = lr_multiplier(progress, tr["warmup_ratio"], tr["warmdown_ratio"],
                            tr["final_lr_frac"])
        mom = muon_momentum(step, tr["muon_momentum_start"], tr["muon_momentum_end"],
                            tr["muon_momentum_steps"])
        optimizer.step(lrm, mom, tr["weight_decay"] * (1.0 - progress))
        model.zero_grad(set_to_none=True)
        training_time += time.perf_counter() - t0
        step += 1
        smooth = 0.9 * smooth + 0.1 * loss_sum / accum
        done = step * tokens_per_step
        spent = done >= token_budget if token_budget > 0 else training_time >= time_budget
        if progress_file:
            spent_frac = min(done / token_budget if token_budget > 0
                             else training_time / time_budget, 1.0)
            progress_file.write(json.dumps({"event": "step", "step": step, "progress": spent_frac,
                                            "training_seconds": training_time,
                                            "loss": loss_sum / accum, "lrm": lrm}) + "\n")
        if spent or time.perf_counter() - last_print >= 5.0:
            last_print = time.perf_counter()
            print(f"step {step:05d} | loss: {smooth / (1 - 0.9 ** step):.6f} | lrm: {lrm:.2f} | "
                  f"tok/sec: {done / training_time:.0f} | epoch: {done / len(data.train):.2f}",
                  file=sys.stderr)
        if spent:
            break
    startup = t_train_start - t_start  # loading, building, initialising
    if progress_file:
        progress_file.close()

    t_eval = time.perf_counter()
    val_bpb, eval_tokens = evaluate_bpb(model, data, B, T)
    eval_seconds = time.perf_counter() - t_eval
    if not math.isfinite(val_bpb):
        print(f"torch_train: diverged: val_bpb {val_bpb}", file=sys.stderr)
        return 3
    if args.save:
        reference.save_safetensors(args.save, {n: p.detach() for n, p in
                                               engine_tensor_order(model, cfg)})
    tokens = step * tokens_per_step
    print(json.dumps({
        "trainer": "torch", "val_bpb": round(val_bpb, 6), "tokens": tokens, "steps": step,
        "threads": threads, "blas_threads": blas_threads,
        "training_seconds": round(training_time, 3),
        "total_seconds": round(time.perf_counter() - t_start, 3),
        "startup_seconds": round(startup, 3), "eval_seconds": round(eval_seconds, 3),
        "tokens_per_second": round(tokens / training_time, 1), "eval_tokens": eval_tokens,
        "time_budget_s": time_budget, "token_budget": int(token_budget),
        "epochs": round(tokens / len(data.train), 4),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, ValueError, KeyError, AssertionError) as e:
        # A bare assert (reference.resolve_config's checks) says nothing: show its line.
        where = traceback.extract_tb(e.__traceback__)[-1]
        print(f"torch_train: {str(e) or f'{where.filename}:{where.lineno}: {where.line}'}",
              file=sys.stderr)
        sys.exit(1)
