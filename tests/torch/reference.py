"""PyTorch reference of the nightshift GPT (the model the README describes, engine/gpt.h).

It is autoresearch's GPT written out again, generalised to every option of the
spec's `model` section, so that the C engine can be checked against it. Module
names are the checkpoint tensor names of engine/gpt.h, so a safetensors file
written by the engine loads with load_state_dict and vice versa.

Runs in whatever dtype the module is cast to (the fixtures use float64 for the
best reference). Needs torch >= 1.13 only: rms_norm and attention are written
out by hand. Also holds a small safetensors reader/writer (F32 only).

Usage:
    cfg = resolve_config({"vocab_size": 64, "depth": 2, ...})
    model = GPT(cfg).double()
    loss = model(inputs, targets)   # inputs, targets: (B, T) int64; -1 = ignored
"""

import json
import math
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# Defaults of the spec's model section (spec_fields in engine/spec.c).
MODEL_DEFAULTS = {
    "vocab_size": 0,
    "depth": 4,
    "n_embd": 256,
    "n_head": 4,
    "n_kv_head": None,  # = n_head
    "mlp_ratio": 4,
    "mlp": "relu2",
    "seq_len": 256,
    "pos": "rope",
    "max_pos": None,  # = seq_len
    "tie_embeddings": False,
    "embed_dropout": 0.0,
    "softcap": 15.0,
    "window_pattern": "SSSL",
    "ve_layers": "alternate",
    "ve_gate_channels": 32,
}

# RMSNorm epsilon: F.rms_norm's default for float32 inputs, used in every dtype
# so a float64 run computes what the float32 engine computes.
RMS_EPS = float(torch.finfo(torch.float32).eps)


def resolve_config(model):
    """Return a dict with every model field set and the derived fields added:
    head_dim, mlp_hidden, window (per layer), has_ve (per layer)."""
    unknown = set(model) - set(MODEL_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown model fields: {sorted(unknown)}")
    c = dict(MODEL_DEFAULTS)
    c.update(model)
    if c["n_kv_head"] is None:
        c["n_kv_head"] = c["n_head"]
    if c["max_pos"] is None:
        c["max_pos"] = c["seq_len"]
    L, D, H, Hkv = c["depth"], c["n_embd"], c["n_head"], c["n_kv_head"]
    assert c["vocab_size"] > 0 and D % H == 0 and H % Hkv == 0
    assert c["pos"] in ("rope", "learned") and c["seq_len"] <= c["max_pos"]
    assert c["mlp"] in ("relu2", "gelu", "swiglu", "geglu")
    assert 0 < c["ve_gate_channels"] <= D
    c["head_dim"] = D // H
    assert c["pos"] != "rope" or c["head_dim"] % 2 == 0
    hidden = c["mlp_ratio"] * D
    assert hidden == int(hidden), "mlp_ratio * n_embd must be a whole number"
    c["mlp_hidden"] = int(hidden)

    pattern = c["window_pattern"].upper()
    assert pattern and all(ch in "SL" for ch in pattern)
    long_w, short_w = c["seq_len"], c["seq_len"] // 2
    c["window"] = [short_w if pattern[i % len(pattern)] == "S" else long_w for i in range(L)]
    c["window"][-1] = long_w

    ve = c["ve_layers"]
    if isinstance(ve, list):
        assert all(0 <= i < L for i in ve)
        c["has_ve"] = [i in ve for i in range(L)]
    else:
        rule = {
            "alternate": lambda i: i % 2 == (L - 1) % 2,
            "all": lambda i: True,
            "none": lambda i: False,
            "first_half": lambda i: i < L // 2,
            "last_half": lambda i: i >= L // 2,
        }[ve]
        c["has_ve"] = [rule(i) for i in range(L)]
    return c


def rms_norm(x):
    """RMSNorm over the last dimension, no weight: x * rsqrt(mean(x^2) + eps)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS)


def rope_tables(T, head_dim):
    """cos, sin of shape (T, head_dim/2), computed in float32 as the engine does:
    angle(t, j) = t * 10000^(-2j/head_dim)."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    t = torch.arange(T, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq)
    return freqs.cos(), freqs.sin()


def apply_rope(x, cos, sin):
    """x (B, T, heads, hd); rotates the first half of hd against the second."""
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    cos = cos[None, :, None, :].to(x.dtype)
    sin = sin[None, :, None, :].to(x.dtype)
    return torch.cat([x1 * cos + x2 * sin, -x1 * sin + x2 * cos], dim=-1)


def window_mask(T, w):
    """(T, T) bool: key j is visible from query i iff i - w <= j <= i."""
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    return (j <= i) & (j >= i - w)


def attention(q, k, v, window):
    """softmax(q k^T / sqrt(hd), keys outside the window masked) v, for q, k, v
    of shape (B, H, T, hd); a module-level function so that
    gen_bf16_fixtures.py can replace it with its rounded-operand version."""
    T, hd = q.shape[-2], q.shape[-1]
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))  # (B, H, T, T)
    att = att.masked_fill(~window_mask(T, window), float("-inf"))
    att = torch.softmax(att, dim=-1)
    return att @ v


class CausalSelfAttention(nn.Module):
    def __init__(self, c, layer):
        super().__init__()
        D, H, Hkv, hd = c["n_embd"], c["n_head"], c["n_kv_head"], c["head_dim"]
        self.n_head, self.n_kv_head, self.head_dim = H, Hkv, hd
        self.rope = c["pos"] == "rope"
        self.window = c["window"][layer]
        self.gate_channels = c["ve_gate_channels"]
        self.c_q = nn.Linear(D, H * hd, bias=False)
        self.c_k = nn.Linear(D, Hkv * hd, bias=False)
        self.c_v = nn.Linear(D, Hkv * hd, bias=False)
        self.c_proj = nn.Linear(D, D, bias=False)
        self.ve_gate = None
        if c["has_ve"][layer]:
            self.ve_gate = nn.Linear(self.gate_channels, Hkv, bias=False)

    def forward(self, xn, ve):
        """xn: normalised block input (B, T, D); ve: (B, T, Hkv*hd) or None."""
        B, T, D = xn.shape
        H, Hkv, hd = self.n_head, self.n_kv_head, self.head_dim
        q = self.c_q(xn).view(B, T, H, hd)
        k = self.c_k(xn).view(B, T, Hkv, hd)
        v = self.c_v(xn).view(B, T, Hkv, hd)
        if ve is not None:
            # One gate per kv head, read from the first C channels of norm(x).
            gate = 2 * torch.sigmoid(self.ve_gate(xn[..., : self.gate_channels]))  # (B, T, Hkv)
            v = v + gate.unsqueeze(-1) * ve.view(B, T, Hkv, hd)
        if self.rope:
            cos, sin = rope_tables(T, hd)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        q, k = rms_norm(q), rms_norm(k)
        # GQA: query head h reads kv head h // (H / Hkv).
        rep = H // Hkv
        q = q.transpose(1, 2)  # (B, H, T, hd)
        k = k.transpose(1, 2).repeat_interleave(rep, dim=1)
        v = v.transpose(1, 2).repeat_interleave(rep, dim=1)
        y = attention(q, k, v, self.window).transpose(1, 2).reshape(B, T, H * hd)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        D, hidden = c["n_embd"], c["mlp_hidden"]
        self.kind = c["mlp"]
        self.hidden = hidden
        gated = self.kind in ("swiglu", "geglu")
        # Gated kinds: rows [0, hidden) are the gate, [hidden, 2*hidden) the up projection.
        self.c_fc = nn.Linear(D, (2 if gated else 1) * hidden, bias=False)
        self.c_proj = nn.Linear(hidden, D, bias=False)

    def forward(self, x):
        h = self.c_fc(x)
        if self.kind == "relu2":
            h = F.relu(h).square()
        elif self.kind == "gelu":
            h = F.gelu(h)  # exact erf form
        else:
            gate, up = h[..., : self.hidden], h[..., self.hidden :]
            act = F.silu(gate) if self.kind == "swiglu" else F.gelu(gate)
            h = act * up
        return self.c_proj(h)


class Block(nn.Module):
    def __init__(self, c, layer):
        super().__init__()
        self.attn = CausalSelfAttention(c, layer)
        self.mlp = MLP(c)

    def forward(self, x, ve):
        x = x + self.attn(rms_norm(x), ve)
        x = x + self.mlp(rms_norm(x))
        return x


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.cfg = c
        V, D, L = c["vocab_size"], c["n_embd"], c["depth"]
        modules = {"wte": nn.Embedding(V, D)}
        if c["pos"] == "learned":
            modules["wpe"] = nn.Embedding(c["max_pos"], D)
        modules["h"] = nn.ModuleList([Block(c, i) for i in range(L)])
        self.transformer = nn.ModuleDict(modules)
        self.lm_head = None if c["tie_embeddings"] else nn.Linear(D, V, bias=False)
        self.resid_lambdas = nn.Parameter(torch.ones(L))
        self.x0_lambdas = nn.Parameter(torch.zeros(L))
        kv_dim = c["n_kv_head"] * c["head_dim"]
        self.value_embeds = nn.ModuleDict(
            {str(i): nn.Embedding(V, kv_dim) for i in range(L) if c["has_ve"][i]}
        )

    def forward(self, idx, targets=None):
        """idx, targets: (B, T) int64. Returns the mean cross-entropy over
        targets != -1, or the softcapped logits (B, T, V) without targets."""
        B, T = idx.shape
        c = self.cfg
        x = self.transformer.wte(idx)
        if c["pos"] == "learned":
            x = x + self.transformer.wpe.weight[:T]
        x = F.dropout(x, p=c["embed_dropout"], training=self.training)
        x = rms_norm(x)
        x0 = x
        for i, block in enumerate(self.transformer.h):
            x = self.resid_lambdas[i] * x + self.x0_lambdas[i] * x0
            ve = self.value_embeds[str(i)](idx) if str(i) in self.value_embeds else None
            x = block(x, ve)
        x = rms_norm(x)
        if self.lm_head is None:
            logits = x @ self.transformer.wte.weight.T
        else:
            logits = self.lm_head(x)
        cap = c["softcap"]
        if cap > 0:
            logits = cap * torch.tanh(logits / cap)
        if targets is None:
            return logits
        return F.cross_entropy(
            logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1
        )


# ---------------------------------------------------------------------------
# safetensors (F32 only): 8-byte LE header length, JSON header, raw LE data.


def save_safetensors(path, tensors, metadata=None):
    """tensors: dict name -> array-like; written as little-endian float32 in
    the dict's order."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        a = np.ascontiguousarray(np.asarray(t, dtype="<f4"))
        header[name] = {
            "dtype": "F32",
            "shape": list(a.shape),
            "data_offsets": [offset, offset + a.nbytes],
        }
        blobs.append(a.tobytes())
        offset += a.nbytes
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # keep the data 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    """Returns dict name -> float32 numpy array (F32 tensors only)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise ValueError(f"{name}: dtype {info['dtype']} is not F32")
        b, e = info["data_offsets"]
        a = np.frombuffer(data[base + b : base + e], dtype="<f4")
        out[name] = a.reshape(info["shape"]).copy()
    return out
