"""Regenerate the optimizer fixtures:
    /usr/bin/python3 tests/torch/gen_optim_fixtures.py tests/fixtures
(needs Debian's python3-torch; the outputs are committed, CI has no torch).

Writes OUTDIR/optim/<case>.safetensors, one file per case, each holding the
inputs of one optimizer step, its hyper-parameters as 1-element tensors
(float32, exactly what the C kernel receives), and the expected outputs
(names ending in "_out"). The metadata says which kernel and its arguments.

    adamw_step1   7x5, step 1 (m = v = 0), weight decay on
    adamw_step3   7x5, step 3 with nonzero m and v
    muon_tall     12x5 (rows > cols: X^T X side, per-row NorMuon)
    muon_wide     5x12 (rows < cols: X X^T side, per-column NorMuon)
    muon_square   8x8  (rows == cols: X X^T side, per-row NorMuon)

The update rules re-implement autoresearch's adamw_step_fused and
muon_step_fused with plain float32 torch ops (no torch.compile). Unlike
autoresearch, the polar-express iteration also stays in float32 instead of
bfloat16, as in engine/optim.c. Everything is seeded, so a rerun rewrites
identical files.
"""

import json
import os
import struct
import sys

import torch

POLAR_EXPRESS_COEFFS = [
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
]


def f32(x):
    """A 0-d float32 tensor, like autoresearch's hyper-parameter tensors."""
    return torch.tensor(x, dtype=torch.float32)


def adamw_step(p, grad, exp_avg, exp_avg_sq, step_t, lr_t, beta1_t, beta2_t, eps_t, wd_t):
    p.mul_(1 - lr_t * wd_t)
    exp_avg.lerp_(grad, 1 - beta1_t)
    exp_avg_sq.lerp_(grad.square(), 1 - beta2_t)
    bias1 = 1 - beta1_t**step_t
    bias2 = 1 - beta2_t**step_t
    denom = (exp_avg_sq / bias2).sqrt() + eps_t
    step_size = lr_t / bias1
    p.add_(exp_avg / denom, alpha=-step_size)


def muon_step(grads, params, momentum_buffer, second_momentum_buffer, momentum_t, lr_t, wd_t,
              beta2_t, ns_steps, red_dim):
    """One matrix (rows, cols); red_dim -1 if rows >= cols else -2."""
    momentum = momentum_t
    momentum_buffer.lerp_(grads, 1 - momentum)
    g = grads.lerp_(momentum_buffer, momentum)
    X = g.clone()  # float32 throughout (autoresearch: g.bfloat16())
    X = X / (X.norm(dim=(-2, -1), keepdim=True) * 1.02 + 1e-6)
    if g.size(-2) > g.size(-1):
        for a, b, c in POLAR_EXPRESS_COEFFS[:ns_steps]:
            A = X.mT @ X
            B = b * A + c * (A @ A)
            X = a * X + X @ B
    else:
        for a, b, c in POLAR_EXPRESS_COEFFS[:ns_steps]:
            A = X @ X.mT
            B = b * A + c * (A @ A)
            X = a * X + B @ X
    g = X
    beta2 = beta2_t
    v_mean = g.square().mean(dim=red_dim, keepdim=True)
    red_dim_size = g.size(red_dim)
    v_norm_sq = v_mean.sum(dim=(-2, -1), keepdim=True) * red_dim_size
    v_norm = v_norm_sq.sqrt()
    second_momentum_buffer.lerp_(v_mean, 1 - beta2)
    step_size = second_momentum_buffer.clamp_min(1e-10).rsqrt()
    scaled_sq_sum = (v_mean * red_dim_size) * step_size.square()
    v_norm_new = scaled_sq_sum.sum(dim=(-2, -1), keepdim=True).sqrt()
    final_scale = step_size * (v_norm / v_norm_new.clamp_min(1e-10))
    g = g * final_scale
    mask = (g * params) >= 0
    params.sub_(lr_t * g + lr_t * wd_t * params * mask)
    return mask


def save_safetensors(path, tensors, metadata):
    """F32 only: 8-byte LE header length, JSON header, raw LE data."""
    header = {"__metadata__": metadata}
    blobs = []
    offset = 0
    for name, t in tensors.items():
        data = t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)  # pad so the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)


def randn(gen, *shape, scale=1.0):
    return torch.randn(*shape, generator=gen, dtype=torch.float32) * scale


def adamw_case(outdir, name, gen, step, lr, beta1, beta2, eps, wd):
    p = randn(gen, 7, 5, scale=0.1)
    g = randn(gen, 7, 5, scale=0.5)
    if step == 1:
        m = torch.zeros(7, 5)
        v = torch.zeros(7, 5)
    else:  # a plausible state after step-1 updates
        m = randn(gen, 7, 5, scale=0.2)
        v = randn(gen, 7, 5, scale=0.3).square() + 0.01
    ins = {"param": p, "grad": g, "exp_avg": m, "exp_avg_sq": v}
    hp = {"step": f32(step), "lr": f32(lr), "beta1": f32(beta1), "beta2": f32(beta2),
          "eps": f32(eps), "wd": f32(wd)}
    po, mo, vo = p.clone(), m.clone(), v.clone()
    adamw_step(po, g.clone(), mo, vo, hp["step"], hp["lr"], hp["beta1"], hp["beta2"], hp["eps"],
               hp["wd"])
    tensors = dict(ins)
    tensors.update({k: t.reshape(1) for k, t in hp.items()})
    tensors.update({"param_out": po, "exp_avg_out": mo, "exp_avg_sq_out": vo})
    meta = {"kernel": "adamw", "case": name}
    save_safetensors(os.path.join(outdir, name + ".safetensors"), tensors, meta)
    rel = ((po - p).abs().max() / po.abs().max()).item()
    print(f"{name}: max |update| / max |param_out| = {rel:.3f}")


def muon_case(outdir, name, gen, rows, cols, momentum, lr_base, wd, beta2, ns_steps):
    p = randn(gen, rows, cols, scale=0.05)
    g = randn(gen, rows, cols, scale=0.3)
    buf = randn(gen, rows, cols, scale=0.2)
    # Second moments of a previous step's normalised update: about 1/max(rows, cols).
    if rows >= cols:
        second = (randn(gen, rows, 1, scale=0.3).abs() + 0.5) / cols
        red_dim = -1
    else:
        second = (randn(gen, 1, cols, scale=0.3).abs() + 0.5) / rows
        red_dim = -2
    lr = lr_base * max(1.0, rows / cols) ** 0.5
    hp = {"momentum": f32(momentum), "lr": f32(lr), "wd": f32(wd), "beta2": f32(beta2),
          "ns_steps": f32(ns_steps)}
    po, bo, so = p.clone(), buf.clone(), second.clone()
    mask = muon_step(g.clone(), po, bo, so, hp["momentum"], hp["lr"], hp["wd"], hp["beta2"],
                     ns_steps, red_dim)
    assert 0 < int(mask.sum()) < mask.numel(), "the weight-decay mask should be mixed"
    tensors = {"param": p, "grad": g, "momentum_buffer": buf, "second_buffer": second}
    tensors.update({k: t.reshape(1) for k, t in hp.items()})
    tensors.update({"param_out": po, "momentum_buffer_out": bo, "second_buffer_out": so})
    meta = {"kernel": "muon", "case": name, "rows": str(rows), "cols": str(cols)}
    save_safetensors(os.path.join(outdir, name + ".safetensors"), tensors, meta)
    rel = ((po - p).abs().max() / po.abs().max()).item()
    print(f"{name}: max |update| / max |param_out| = {rel:.3f}, "
          f"decayed {int(mask.sum())}/{mask.numel()}")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gen_optim_fixtures.py OUTDIR")
    outdir = os.path.join(sys.argv[1], "optim")
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(1234)
    # Learning rates are larger than in training so the update is a sizeable
    # part of the output (the C test compares relative to max |param_out|).
    adamw_case(outdir, "adamw_step1", gen, 1, 0.05, 0.8, 0.95, 1e-10, 0.1)
    adamw_case(outdir, "adamw_step3", gen, 3, 0.05, 0.8, 0.95, 1e-10, 0.0)
    muon_case(outdir, "muon_tall", gen, 12, 5, 0.9, 0.05, 0.2, 0.95, 5)
    muon_case(outdir, "muon_wide", gen, 5, 12, 0.85, 0.05, 0.2, 0.95, 5)
    muon_case(outdir, "muon_square", gen, 8, 8, 0.95, 0.05, 0.2, 0.95, 5)


if __name__ == "__main__":
    main()
