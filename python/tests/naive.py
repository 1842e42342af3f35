"""A deliberately naive forward pass (per position, per head, scalar RoPE), in float64, written
from the architecture description only. Tests compare kvec_ref.model against it."""

import math

import torch


def rms(v: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return v / math.sqrt(float((v * v).mean()) + eps) * w


def rope_angle(config, pos: int, i: int) -> float:
    """Angle of rotated pair i at position pos."""
    theta = pos * config.rope_theta ** (-2.0 * i / config.rope_dim)
    if config.rope_scaling_type == "linear":
        theta /= config.rope_scaling_factor
    if config.rope_freqs is not None:
        theta /= config.rope_freqs[i]
    return theta


def rope_vec(config, vec: torch.Tensor, pos: int) -> torch.Tensor:
    out = vec.clone()
    half = config.rope_dim // 2
    for i in range(half):
        a_i, b_i = (i, i + half) if config.rope_neox else (2 * i, 2 * i + 1)
        t = rope_angle(config, pos, i)
        a, b = float(vec[a_i]), float(vec[b_i])
        out[a_i] = a * math.cos(t) - b * math.sin(t)
        out[b_i] = a * math.sin(t) + b * math.cos(t)
    return out


def naive_swiglu(sd, p, m):
    gate = sd[p + "gate.weight"] @ m
    up = sd[p + "up.weight"] @ m
    return sd[p + "down.weight"] @ (gate * torch.sigmoid(gate) * up)


def naive_moe(c, sd, p, m):
    """One token's mixture of experts: softmax over every expert's router logit, the
    n_expert_used largest (a full sort), their probabilities as weights (divided by their sum
    unless qwen2moe), each expert's SwiGLU; qwen2moe adds sigmoid(m . gate) * shared expert."""
    logits = [float(sd[p + "ffn.router.weight"][e] @ m) for e in range(c.n_expert)]
    top = max(logits)
    ex = [math.exp(v - top) for v in logits]
    probs = [v / sum(ex) for v in ex]
    chosen = sorted(range(c.n_expert), key=lambda e: -probs[e])[:c.n_expert_used]
    total = sum(probs[e] for e in chosen) if c.arch != "qwen2moe" else 1.0
    f = torch.zeros_like(m)
    for e in chosen:
        gate = sd[p + "ffn.gate_exps"][e] @ m
        up = sd[p + "ffn.up_exps"][e] @ m
        f = f + probs[e] / total * (sd[p + "ffn.down_exps"][e] @ (gate * torch.sigmoid(gate) * up))
    if c.n_ff_shexp > 0:
        g = 1.0 / (1.0 + math.exp(-float(sd[p + "ffn.shexp_gate"] @ m)))
        f = f + g * naive_swiglu(sd, p + "ffn.shexp.", m)
    return f


def naive_forward(model, tokens, kv_visible=None, positions=None):
    """Returns (logits [T, V] float64, probs: list over layers of [n_head, T, T])."""
    c = model.config
    sd = {k: v.detach().double() for k, v in model.state_dict().items()}
    T = len(tokens)
    positions = list(range(T)) if positions is None else list(positions)
    D, H, Hkv = c.head_dim, c.n_head, c.n_head_kv
    rep = H // Hkv
    x = [sd["tok_embd.weight"][t].clone() for t in tokens]
    all_probs = []
    for l in range(c.n_layer):
        p = f"layers.{l}."
        n = [rms(xi, sd[p + "attn_norm.weight"], c.norm_eps) for xi in x]

        def proj(name, vec):
            y = sd[p + f"attn.{name}.weight"] @ vec
            if c.qkv_bias:
                y = y + sd[p + f"attn.{name}.bias"]
            return y

        q = [[proj("wq", n[t])[h * D:(h + 1) * D] for h in range(H)] for t in range(T)]
        k = [[proj("wk", n[t])[h * D:(h + 1) * D] for h in range(Hkv)] for t in range(T)]
        v = [[proj("wv", n[t])[h * D:(h + 1) * D] for h in range(Hkv)] for t in range(T)]
        if c.qk_norm:
            q = [[rms(qh, sd[p + "attn.q_norm.weight"], c.norm_eps) for qh in qt] for qt in q]
            k = [[rms(kh, sd[p + "attn.k_norm.weight"], c.norm_eps) for kh in kt] for kt in k]
        q = [[rope_vec(c, qh, positions[t]) for qh in q[t]] for t in range(T)]
        k = [[rope_vec(c, kh, positions[t]) for kh in k[t]] for t in range(T)]
        probs = torch.zeros(H, T, T, dtype=torch.float64)
        new_x = []
        for i in range(T):
            heads = []
            for h in range(H):
                g = h // rep
                keys = [j for j in range(i + 1) if kv_visible is None or i < int(kv_visible[l][g][j])]
                s = torch.tensor([float(q[i][h] @ k[j][g]) / math.sqrt(D) for j in keys], dtype=torch.float64)
                pr = torch.softmax(s, dim=0)
                for jj, j in enumerate(keys):
                    probs[h, i, j] = pr[jj]
                heads.append(sum(pr[jj] * v[j][g] for jj, j in enumerate(keys)))
            o = sd[p + "attn.wo.weight"] @ torch.cat(heads)
            hres = x[i] + o
            m = rms(hres, sd[p + "ffn_norm.weight"], c.norm_eps)
            f = naive_moe(c, sd, p, m) if c.n_expert > 0 else naive_swiglu(sd, p + "ffn.", m)
            new_x.append(hres + f)
        x = new_x
        all_probs.append(probs)
    out_w = sd["tok_embd.weight"] if c.tied_output else sd["output.weight"]
    logits = torch.stack([out_w @ rms(xi, sd["output_norm.weight"], c.norm_eps) for xi in x])
    return logits, all_probs
