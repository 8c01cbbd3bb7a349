"""Regenerate the parity fixtures: `make fixtures`, i.e.
    /usr/bin/python3 tests/torch/gen_fixtures.py tests/fixtures
(needs Debian's python3-torch and python3-numpy; the outputs are committed, CI
has no torch).

For every config below it writes OUTDIR/parity/<name>/:
    spec.json          {"model": {...}, "train": {batch_size, total_batch_tokens}}
    weights.safetensors random float32 weights, no tensor zero (see make_weights)
    tokens.bin         int32 LE, B rows of seq_len+1 ids: inputs = row[:-1],
                       targets = row[1:]; -1 = ignored target (only the last
                       column may be -1: any other entry is also an input id)
    expected.json      {"config": name, "loss": mean cross-entropy, ...}
    grads.safetensors  d(mean loss)/d(param) for every parameter
The loss and gradients come from tests/torch/reference.py run in float64 on
the float32 weights (cast up exactly), then the gradients are cast to float32.
Everything is seeded, so a rerun rewrites identical files.
"""

import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402

# Tiny configs that together switch every model option on. B = rows of tokens.
CONFIGS = [
    {
        "name": "gqa_sliding_ve_alternate",
        "batch": 2,
        "ignore_last": 0,
        "model": {
            "vocab_size": 64, "depth": 4, "n_embd": 32, "n_head": 4, "n_kv_head": 2,
            "mlp_ratio": 1, "mlp": "relu2", "seq_len": 16, "pos": "rope",
            "window_pattern": "SSSL", "ve_layers": "alternate", "ve_gate_channels": 32,
        },
    },
    {
        "name": "learned_tied_gelu",
        "batch": 3,
        "ignore_last": 2,
        "model": {
            "vocab_size": 80, "depth": 2, "n_embd": 24, "n_head": 2, "n_kv_head": 2,
            "mlp_ratio": 1, "mlp": "gelu", "seq_len": 16, "pos": "learned", "max_pos": 24,
            "tie_embeddings": True, "window_pattern": "L", "ve_layers": "all",
            "ve_gate_channels": 16,
        },
    },
    {
        "name": "swiglu_mqa_first_half",
        "batch": 2,
        "ignore_last": 0,
        "model": {
            "vocab_size": 72, "depth": 3, "n_embd": 24, "n_head": 4, "n_kv_head": 1,
            "mlp_ratio": 1, "mlp": "swiglu", "seq_len": 20, "pos": "rope",
            "window_pattern": "SL", "ve_layers": "first_half", "ve_gate_channels": 8,
            "softcap": 30,
        },
    },
    {
        "name": "geglu_list_last",
        "batch": 2,
        "ignore_last": 0,
        "model": {
            "vocab_size": 64, "depth": 3, "n_embd": 16, "n_head": 2, "n_kv_head": 1,
            "mlp_ratio": 2.5, "mlp": "geglu", "seq_len": 24, "pos": "rope",
            "window_pattern": "S", "ve_layers": [0, 2], "ve_gate_channels": 12,
            "softcap": 0,
        },
    },
    {
        "name": "relu2_last_half_learned",
        "batch": 3,
        "ignore_last": 2,
        "model": {
            "vocab_size": 96, "depth": 3, "n_embd": 24, "n_head": 4, "n_kv_head": 2,
            "mlp_ratio": 1, "mlp": "relu2", "seq_len": 16, "pos": "learned",
            "tie_embeddings": False, "window_pattern": "SSSL", "ve_layers": "last_half",
            "ve_gate_channels": 24,
        },
    },
    {
        # head_dim 32: the size from which bf16 runs multiply the attention in
        # bf16 (engine/attn_bf16.c). 87 tokens: two query tiles of 64 rows, the
        # second 23 (odd, a partial 16-row strip); layer 0's window of 43 keys
        # makes later strips start at the second 32-key block.
        "name": "hd32_gqa_sliding",
        "batch": 2,
        "ignore_last": 1,
        "model": {
            "vocab_size": 64, "depth": 2, "n_embd": 64, "n_head": 2, "n_kv_head": 1,
            "mlp_ratio": 0.5, "mlp": "relu2", "seq_len": 87, "pos": "rope",
            "tie_embeddings": False, "window_pattern": "SL", "ve_layers": "alternate",
            "ve_gate_channels": 32,
        },
    },
]


def make_weights(model, rng):
    """float64 random weights for every parameter of model, cast to float32.
    No tensor is zero and every path carries signal (autoresearch's init zeroes
    the output projections and gates, which would hide their gradients):
    wte normal(0, 0.5); wpe and value embeddings normal(0, 0.3); every block
    matrix, output projections and ve gates included, uniform(-s, s) with
    s = sqrt(3 / fan_in), i.e. unit output variance, so gate logits are O(1)
    and the sigmoid is not flat; lm_head normal(0, 2 / sqrt(D)), so logits
    (rows of a unit-RMS x times lm_head) have std ~2 and reach 6-10, where the
    softcap bends them; resid_lambdas U(0.6, 1.4); x0_lambdas U(0.05, 0.4).
    Returns dict name -> float32 numpy array in the model's parameter order."""
    D = model.cfg["n_embd"]
    out = {}
    for name, p in model.named_parameters():
        shape = tuple(p.shape)
        if name == "transformer.wte.weight":
            w = rng.normal(0.0, 0.5, shape)
        elif name == "transformer.wpe.weight" or name.startswith("value_embeds."):
            w = rng.normal(0.0, 0.3, shape)
        elif name == "lm_head.weight":
            w = rng.normal(0.0, 2.0 / math.sqrt(D), shape)
        elif name == "resid_lambdas":
            w = rng.uniform(0.6, 1.4, shape)
        elif name == "x0_lambdas":
            w = rng.uniform(0.05, 0.4, shape)
        else:
            assert len(shape) == 2, name
            s = math.sqrt(3.0 / shape[1])
            w = rng.uniform(-s, s, shape)
        out[name] = w.astype(np.float32)
        assert np.any(out[name] != 0), name
    return out


def make_tokens(cfg, B, ignore_last, rng):
    """(B, T+1) int32 ids; the last id of the first ignore_last rows is -1."""
    T, V = cfg["seq_len"], cfg["vocab_size"]
    rows = rng.integers(0, V, size=(B, T + 1)).astype(np.int32)
    rows[:ignore_last, T] = -1
    return rows


def run(model, weights, rows, dtype):
    """Loss (python float) and grads (dict name -> float32 array) of one batch
    with the reference cast to dtype."""
    model = model.to(dtype)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(weights[name]).to(dtype))
    model.eval()
    model.zero_grad(set_to_none=True)
    t = torch.from_numpy(rows.astype(np.int64))
    loss = model(t[:, :-1], t[:, 1:])
    loss.backward()
    grads = {
        n: p.grad.detach().to(torch.float32).numpy().copy() for n, p in model.named_parameters()
    }
    return loss.item(), grads


def worst_ratio(grads, ref):
    """max over tensors of max|g - ref| / max|ref|, and that tensor's name."""
    worst, where = 0.0, ""
    for n, r in ref.items():
        scale = float(np.max(np.abs(r)))
        err = float(np.max(np.abs(grads[n].astype(np.float64) - r)))
        ratio = err / scale if scale > 0 else err
        if ratio > worst:
            worst, where = ratio, n
    return worst, where


def generate(outdir, entry, seed):
    name, B = entry["name"], entry["batch"]
    cfg = reference.resolve_config(entry["model"])
    torch.manual_seed(seed)  # module construction draws default inits; all overwritten
    model = reference.GPT(cfg)
    rng = np.random.default_rng(seed)
    weights = make_weights(model, rng)
    rows = make_tokens(cfg, B, entry["ignore_last"], rng)

    loss, grads = run(model, weights, rows, torch.float64)
    loss32, grads32 = run(model, weights, rows, torch.float32)
    ratio32, where32 = worst_ratio(grads32, grads)
    for n, g in grads.items():
        assert np.any(g != 0), f"{name}: gradient of {n} is zero"

    d = os.path.join(outdir, "parity", name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "spec.json"), "w") as f:
        # The train section only states the batch: the spec validator wants
        # total_batch_tokens to be a multiple of batch_size * seq_len.
        train = {"batch_size": B, "total_batch_tokens": B * cfg["seq_len"]}
        json.dump({"model": entry["model"], "train": train}, f, indent=2)
        f.write("\n")
    reference.save_safetensors(os.path.join(d, "weights.safetensors"), weights)
    reference.save_safetensors(os.path.join(d, "grads.safetensors"), grads)
    rows.astype("<i4").tofile(os.path.join(d, "tokens.bin"))
    expected = {
        "config": name,
        "loss": loss,
        "batch_size": B,
        "seq_len": cfg["seq_len"],
        "ignored_targets": int(np.sum(rows[:, 1:] < 0)),
        "torch_float32_loss": loss32,
        "torch_float32_worst_grad_ratio": ratio32,
    }
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(expected, f, indent=2)
        f.write("\n")

    # Round trip the writer through the reader, so a broken writer fails here.
    back = reference.load_safetensors(os.path.join(d, "weights.safetensors"))
    assert list(back) == list(weights) and all(np.array_equal(back[n], weights[n]) for n in back)

    with torch.no_grad():
        logits = model.to(torch.float64)(torch.from_numpy(rows[:, :-1].astype(np.int64)))
    nbytes = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(
        f"{name}: loss {loss:.6f}  float32 torch: loss err {abs(loss32 - loss) / loss:.1e}, "
        f"worst grad ratio {ratio32:.1e} ({where32})  |logits| max {logits.abs().max():.2f}"
        f"  {nbytes / 1024:.0f} KiB"
    )
    return nbytes


def main():
    if len(sys.argv) != 2:
        print("usage: gen_fixtures.py OUTDIR", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    total = 0
    for k, entry in enumerate(CONFIGS):
        total += generate(sys.argv[1], entry, seed=1000 + k)
    print(f"total {total / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
