"""Regenerate the bf16 fixtures beside the parity fixtures: `make fixtures`, i.e.
    /usr/bin/python3 tests/torch/gen_bf16_fixtures.py tests/fixtures
(after gen_fixtures.py; needs Debian's python3-torch and python3-numpy; the
outputs are committed, CI has no torch).

For every OUTDIR/parity/<name>/ (spec.json, weights.safetensors, tokens.bin)
it runs tests/torch/reference.py on the same weights and batch twice more and
writes
    bf16.json                  {"loss": float64 loss, "autocast_loss": ...,
                                "rounded_loss": ..., per-tensor error ratios;
                                where the head size is a multiple of 32
                                also "rounded_float_attention_loss": the
                                rounded run with the attention unrounded}
    grads_autocast.safetensors  the gradients under torch.autocast("cpu",
                                dtype=torch.bfloat16), the model in float32:
                                how PyTorch trains in bf16 on a CPU
    grads_rounded.safetensors   the gradients in float64 with every linear
                                layer's operands rounded to bf16 (nearest
                                even) and nothing else: x and W in the
                                forward, dy and W for dx, dy and x for dW,
                                which is what the engine's bf16 products do;
                                where the head size is a multiple of 32 the
                                attention's products too, as
                                engine/attn_bf16.c rounds them (see
                                RoundedAttention)
The rounded run is the tight oracle: the engine matches it up to float32
rounding, except where an activation lies within float32 rounding of a bf16
rounding boundary and the two round it apart (2^-8 of that value), so the
test bounds are a small multiple of the autocast run's distance from float64
(that distance is bf16's rounding error on these models, measured).
Everything is seeded or read from the committed fixtures, so a rerun rewrites
identical files.
"""

import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402

ATTENTION = reference.attention  # the float attention, kept while run() replaces it


def bf16(t):
    """t rounded to bfloat16 (nearest, ties to even), back in t's dtype."""
    return t.to(torch.float32).to(torch.bfloat16).to(t.dtype)


class RoundedLinear(torch.autograd.Function):
    """y = r(x) r(W)^T; dx = r(dy) r(W); dW = r(dy)^T r(x), r = bf16 rounding."""

    @staticmethod
    def forward(ctx, x, w):
        xr, wr = bf16(x), bf16(w)
        ctx.save_for_backward(xr, wr)
        return xr @ wr.t()

    @staticmethod
    def backward(ctx, dy):
        xr, wr = ctx.saved_tensors
        dyr = bf16(dy)
        dx = dyr @ wr
        dw = dyr.reshape(-1, dyr.shape[-1]).t() @ xr.reshape(-1, xr.shape[-1])
        return dx, dw


def rounded_linear(x, weight, bias=None):
    assert bias is None
    return RoundedLinear.apply(x, weight)


class RoundedAttention(torch.autograd.Function):
    """The attention core with its products' operands rounded where and as
    engine/attn_bf16.c rounds them (r = bf16 rounding, scale = 1/sqrt(hd),
    masked keys get no weight), everything else in the input's dtype:
        forward   S = r(q) r(k)^T;  e = exp(scale (S - rowmax S));
                  y = (r(e) r(v)) / rowsum(e)  (the unnormalised
                  probabilities are rounded, the sum is of the unrounded)
        backward  P = e / rowsum(e);  dP = r(dO) r(v)^T;
                  D = rowsum(r(dO) * y)  (dO rounded as dP's product takes it);
                  dS = scale P (dP - D);  dV = r(P)^T r(dO);
                  dQ = r(dS) r(k);  dK = r(dS)^T r(q)
    q, k, v: (B, H, T, hd), k and v already repeated for grouped queries."""

    @staticmethod
    def forward(ctx, q, k, v, mask):
        scale = 1.0 / math.sqrt(q.shape[-1])
        qr, kr, vr = bf16(q), bf16(k), bf16(v)
        s = (qr @ kr.transpose(-2, -1)).masked_fill(~mask, float("-inf"))
        e = torch.exp(scale * (s - s.amax(-1, keepdim=True)))
        total = e.sum(-1, keepdim=True)
        y = (bf16(e) @ vr) / total
        ctx.save_for_backward(qr, kr, vr, e / total, y)
        ctx.scale = scale
        return y

    @staticmethod
    def backward(ctx, dy):
        qr, kr, vr, p, y = ctx.saved_tensors
        dyr = bf16(dy)
        dp = dyr @ vr.transpose(-2, -1)
        d = (dyr * y).sum(-1, keepdim=True)
        dsr = bf16(ctx.scale * p * (dp - d))
        return dsr @ kr, dsr.transpose(-2, -1) @ qr, bf16(p).transpose(-2, -1) @ dyr, None


def rounded_attention(q, k, v, window):
    """reference.attention, with RoundedAttention where the engine's bf16
    attention runs (head size a multiple of 32; attn.c keeps others float32)."""
    if q.shape[-1] % 32:
        return ATTENTION(q, k, v, window)
    return RoundedAttention.apply(q, k, v, reference.window_mask(q.shape[-2], window))


class TiedHead(torch.nn.Module):
    """lm_head tied to the token table, through F.linear (reference.py
    multiplies by wte.weight.T in place, which the rounded run would miss);
    it owns no parameter, so the model's parameters do not change."""

    def __init__(self, model):
        super().__init__()
        self.table = [model.transformer.wte]  # a list: not a registered submodule

    def forward(self, x):
        return F.linear(x, self.table[0].weight)


def load_model(d):
    with open(os.path.join(d, "spec.json")) as f:
        spec = json.load(f)
    cfg = reference.resolve_config(spec["model"])
    model = reference.GPT(cfg)
    weights = reference.load_safetensors(os.path.join(d, "weights.safetensors"))
    T = cfg["seq_len"]
    rows = np.fromfile(os.path.join(d, "tokens.bin"), dtype="<i4").reshape(-1, T + 1)
    return model, weights, rows


def run(model, weights, rows, dtype, mode):
    """Loss and float32 grads (dict) of the batch: mode "plain", "autocast"
    (bf16 autocast, model in float32), "rounded" (linear operands rounded,
    and the attention's where the engine runs it in bf16) or "rounded_linear"
    (linear operands rounded, the attention in dtype)."""
    model = model.to(dtype)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(weights[name]).to(dtype))
    model.eval()
    model.zero_grad(set_to_none=True)
    t = torch.from_numpy(rows.astype(np.int64))
    linear = F.linear
    tied = model.lm_head is None
    try:
        if mode in ("rounded", "rounded_linear"):
            F.linear = rounded_linear  # nn.Linear.forward calls F.linear
            if mode == "rounded":
                reference.attention = rounded_attention
            if tied:
                model.lm_head = TiedHead(model)
        if mode == "autocast":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(t[:, :-1], t[:, 1:])
        else:
            loss = model(t[:, :-1], t[:, 1:])
        loss.float().backward()
    finally:
        F.linear = linear
        reference.attention = ATTENTION
        if tied:
            model.lm_head = None
    grads = {
        n: p.grad.detach().to(torch.float32).numpy().copy() for n, p in model.named_parameters()
    }
    return float(loss.item()), grads


def ratios(grads, ref):
    """Per tensor max|g - ref| / max|ref|."""
    out = {}
    for n, r in ref.items():
        scale = float(np.max(np.abs(r)))
        err = float(np.max(np.abs(grads[n].astype(np.float64) - r.astype(np.float64))))
        out[n] = err / scale if scale > 0 else err
    return out


def generate(d):
    name = os.path.basename(d)
    model, weights, rows = load_model(d)
    loss64, g64 = run(model, weights, rows, torch.float64, "plain")
    loss_ac, g_ac = run(model, weights, rows, torch.float32, "autocast")
    loss_rd, g_rd = run(model, weights, rows, torch.float64, "rounded")
    r_ac, r_rd = ratios(g_ac, g64), ratios(g_rd, g64)
    reference.save_safetensors(os.path.join(d, "grads_autocast.safetensors"), g_ac)
    reference.save_safetensors(os.path.join(d, "grads_rounded.safetensors"), g_rd)
    out = {
        "config": name,
        "loss": loss64,
        "autocast_loss": loss_ac,
        "rounded_loss": loss_rd,
        "autocast_grad_ratio": r_ac,
        "rounded_grad_ratio": r_rd,
    }
    if model.cfg["head_dim"] % 32 == 0:
        # the same run with the attention left in float64: how far the
        # attention's rounding moves the loss, so the test can tell that the
        # engine rounded it (tests/test_parity.c)
        out["rounded_float_attention_loss"] = run(model, weights, rows, torch.float64,
                                                  "rounded_linear")[0]
    with open(os.path.join(d, "bf16.json"), "w") as f:
        json.dump(out, f, indent=2, sort_keys=True)
        f.write("\n")
    print(f"{name}: loss {loss64:.6f} autocast {loss_ac:.6f} ({abs(loss_ac - loss64) / loss64:.1e}) "
          f"rounded {loss_rd:.6f} ({abs(loss_rd - loss64) / loss64:.1e}); worst grad ratio "
          f"autocast {max(r_ac.values()):.1e}, rounded {max(r_rd.values()):.1e}")


def main():
    if len(sys.argv) != 2:
        print("usage: gen_bf16_fixtures.py OUTDIR", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    root = os.path.join(sys.argv[1], "parity")
    for name in sorted(os.listdir(root)):
        if os.path.isdir(os.path.join(root, name)):
            generate(os.path.join(root, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
