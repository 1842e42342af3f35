"""A hand-built variable-tracking circuit (the backward hop), added to a model that has the
four-token induction circuit of `train.init_induction_circuit` (n_gram 4).

Variable tracking asks "which variables are assigned the value V?" over statements
`VAR X = 12345.` and `VAR Y = VAR X.`; the answer lists the chain in order (X, Y, ...). Each name
after the first is the left-hand side of the statement whose right-hand side is the name before
it: a backward hop, which a copy circuit cannot make (a copy predicts what *follows* a matching
context; here the answer *precedes* it). Four query heads make it, in the second KV head of
layers `layer_a` (1) and `layer_b` (2); the four-token circuit leaves them free:

- **gather** (layer_a, first query head): at the token after each "." it attends to the most
  recent statement start, the token after "VAR" whose third token back is not "=" (the
  left-hand side's first token), by a token filter on the slowest RoPE pair and a recency kernel
  on the fast ones (a statement's "." is 10-16 tokens after its left-hand side). It writes that
  token's identity, and a fixed marker, into block 1 of the residual stream (which holds "."
  there). Other queries attend to BOS, whose value is zero.
- **value mover** (layer_a, second query head, same keys and values): at a ":" it attends 4 and
  5 tokens back and writes those identities into block 1 of the ":" (in "... the value 12345,
  they are:" the value's last two tokens).
- **hop** (layer_b, first query head): the three tokens before the query (blocks 1-3) against
  the three before each marked position's "." (its blocks 2-4), plus the marker; it copies the
  gathered identity into the token space. So after "..., SGTMM," the model is handed the first
  token of the name assigned "VAR SGTMM".
- **first name** (layer_b, second query head): at a ":" after "they", the moved value tokens
  against the tokens before each marked "." and the marker: the first token of the name
  assigned the value.

The hop and first-name heads see a residual stream that trained layers have written into, so
they are noisier than the gather head (measured in docs/training-log.md, session 9). The recipes
that use the circuit (configs/cpu-vt-circuit.json, a fine-tune of run 14, and
configs/cpu-4gram-vt.json, from step 0) keep the circuit's heads and everything they read fixed
(training the heads, or the layer-1 FFN below them, lost their targets) and train the rest.

Directions are the token embedding's identity directions; every feature is scaled by its mean on
a calibration sequence (forward hooks), so the same code applies at step 0 and after training.
"""
from __future__ import annotations

import math
from typing import Dict, Sequence

import torch

# Recency kernel of the gather head: weights of RoPE pairs 0..6 (pair i turns by base^(-i/32) per
# position at rope_theta 1e16), found by maximising min K(10..16) - max K(22..4300) for a peak at
# 13 (a gradient search, session 9 of docs/training-log.md); used one position further (d0 = 14)
# because the query is the token after the ".".
RECENCY_W = (0.0, 0.105, 0.240, 0.218, 0.161, 0.117, 0.158)
# Kernel of the value mover over the same pairs, (cos, sin) weights: equal peaks 4 and 5 positions
# back, at least 0.58 (of a unit weight vector) above every other distance up to 4400 (the same
# search, session 9).
MOVER_K = ((-0.1193, -0.6672), (0.0677, 0.3502), (0.3234, 0.0561), (0.2916, -0.0552),
           (0.2370, -0.0733), (0.2269, -0.0675), (0.3060, -0.0800))
NEEDED = ("ĠV", "AR", "=", ".", ",", ":", "Ġthey", "Ġare", "Ġ")


def _unit_ident(model, d_tok: int) -> torch.Tensor:
    e = model.tok_embd.weight.detach()[:, :d_tok].float()  # [n_vocab, d_tok]
    return e / e.norm(dim=1, keepdim=True)


@torch.no_grad()
def _normed_inputs(model, ids: Sequence[int]) -> Dict[int, torch.Tensor]:
    """The attention inputs (after attn_norm) of every layer for one sequence: {layer: [T, D]}."""
    caps: Dict[int, torch.Tensor] = {}
    hooks = [L.attn_norm.register_forward_hook(lambda m, a, out, i=i: caps.__setitem__(i, out[0].detach().float()))
             for i, L in enumerate(model.layers)]
    try:
        model(torch.tensor([list(ids)], dtype=torch.long, device=next(model.parameters()).device))
    finally:
        for h in hooks:
            h.remove()
    return caps


def _frame(n: int, dim: int, gen: torch.Generator, steps: int = 300) -> torch.Tensor:
    """n unit vectors in `dim` dimensions with small pairwise dot products: [dim, n]."""
    F = torch.randn(dim, n, generator=gen)
    F.requires_grad_(True)
    opt = torch.optim.Adam([F], lr=0.05)
    with torch.enable_grad():
        for _ in range(steps):
            G = F / F.norm(dim=0, keepdim=True)
            loss = ((G.T @ G - torch.eye(n)) ** 2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    F = F.detach()
    return F / F.norm(dim=0, keepdim=True)


@torch.no_grad()
def init_vt_circuit(model, tok, calib_ids: Sequence[int], n_gram: int = 4, kv_head: int = 1,
                    layer_a: int = 1, layer_b: int = 2, d0: float = 14.0,
                    filter_logit: float = 40.0, recency_logit: float = 40.0, sink_a: float = 25.0,
                    gain_a: float = 1.0, marker: float = 1.5, mover_logit: float = 40.0,
                    match_logit: float = 16.0, marker_logit: float = 28.0, sink_b: float = 58.0,
                    space_penalty: float = 30.0, first_match: float = 24.0, first_gate: float = 60.0,
                    sink_first: float = 60.0, gain_b: float = 4.0, match_pairs: int = 7,
                    ridge: float = 0.3, seed: int = 7) -> Dict[str, object]:
    """Writes the four heads into KV head `kv_head` of layers `layer_a` and `layer_b` (the KV
    head's k / v rows, its query heads' q rows and their output columns; nothing else changes).
    calib_ids: a variable-tracking sequence starting with BOS, on which the input scales are
    measured. Logits are in units of attention scores (the `*_logit`, `sink_*` and gate
    arguments); `gain_*` scale what a head writes. Returns the measured scales."""
    c = model.config
    D, hd = c.n_embd, c.head_dim
    group = c.n_head // c.n_head_kv
    d_tok = (D - 1) // (n_gram + 1)
    u = d_tok                                   # the constant dimension of the embedding
    blk = lambda o: slice(d_tok + 1 + (o - 1) * d_tok, d_tok + 1 + o * d_tok)  # block o: token o back
    pair0 = hd // 2 - 2 - 3 * match_pairs       # first pair of the three-token match
    if n_gram < 4 or group < 2 or pair0 < 8 or c.n_layer <= layer_b or layer_a >= layer_b:
        raise ValueError("init_vt_circuit needs the four-token circuit, 2+ query heads per KV head, "
                         "head_dim 64 and a layer after the gather layer")
    missing = [s for s in NEEDED if s not in tok.tokens]
    if missing:
        raise ValueError(f"init_vt_circuit: the tokenizer lacks {missing}")
    E = _unit_ident(model, d_tok).cpu()  # [n_vocab, d_tok]
    tid = {s: tok.tokens.index(s) for s in NEEDED}
    bos = tok.bos_id
    letters = [tok.tokens.index(chr(65 + i)) for i in range(26) if chr(65 + i) in tok.tokens]
    from kvec_ref.model import rope_inv_freq
    om = rope_inv_freq(c).float()  # [hd / 2]
    gen = torch.Generator().manual_seed(seed)
    toks = torch.tensor(list(calib_ids))
    if int(toks[0]) != bos:
        raise ValueError("init_vt_circuit: the calibration sequence must start with BOS")
    sq = math.sqrt(hd)
    scales: Dict[str, object] = {}

    def proj_scale(z: torch.Tensor, sl: slice, offset: int, at: torch.Tensor = None) -> float:
        """Mean over positions (all, or the mask `at`) of <z[t, sl], E[token at t - offset]>:
        the size of a token in that part of the normalised input."""
        t = torch.arange(max(offset, 1), len(toks))
        if at is not None:
            t = t[at[t]]
        return float((z[t, sl] * E[toks[t - offset]]).sum(-1).mean())

    def row(parts, z: torch.Tensor = None, at: torch.Tensor = None) -> torch.Tensor:
        """A linear read-out of the normalised input [D] from (slice, direction) parts; scaled to
        mean 1 over the positions `at` of z when given."""
        r = torch.zeros(D)
        for sl, vec in parts:
            r[sl] += vec
        if z is not None:
            r /= float((z[at] @ r).mean())
        return r

    def install(layer: int, Wk, Wv, queries) -> None:
        """Writes k / v rows of KV head kv_head and (q rows, output columns) of its query heads,
        folding the layer's attn_norm weight into the rows."""
        a = model.layers[layer].attn
        w = model.layers[layer].attn_norm.weight.detach().float().cpu()
        kv = slice(kv_head * hd, (kv_head + 1) * hd)
        a.wk.weight[kv] = (Wk / w).to(a.wk.weight)
        a.wv.weight[kv] = (Wv / w).to(a.wv.weight)
        for g in range(group):
            qs = slice((kv_head * group + g) * hd, (kv_head * group + g + 1) * hd)
            Wq, Wo = queries[g] if g < len(queries) else (torch.zeros(hd, D), torch.zeros(D, hd))
            a.wq.weight[qs] = (Wq / w).to(a.wq.weight)
            a.wo.weight[:, qs] = Wo.to(a.wo.weight)

    every = torch.arange(1, len(toks))
    first = torch.tensor([0])
    emb_norm = float(model.tok_embd.weight.detach()[:, :d_tok].norm(dim=1).mean())

    # ---- gather head (layer_a): inputs are the embedding and layer 0's blocks -----------------
    z = _normed_inputs(model, toks.tolist())[layer_a].cpu()  # [T, D]
    s_id, s_b = proj_scale(z, slice(0, d_tok), 0), [proj_scale(z, blk(o), o) for o in range(1, 5)]
    one = row([(slice(u, u + 1), torch.ones(1))], z, every)           # 1 everywhere
    bos_f = row([(slice(0, d_tok), E[bos])], z, first)                  # 1 at BOS (position 0 only)
    scales.update(a_ident=s_id, a_blocks=s_b)
    after_dot = row([(blk(1), E[tid["."]] / s_b[0])])                   # 1 after a "."
    Wk, Wq, Wv = (torch.zeros(hd, D) for _ in range(3))
    Wk[hd - 2] = row([(blk(1), E[tid["AR"]] / s_b[0])])                 # previous token "AR"
    Wk[hd - 1] = row([(blk(3), E[tid["="]] / s_b[2])])                  # third token back "="
    Wk[hd - 4] = bos_f
    for i in range(len(RECENCY_W)):
        Wk[2 * i] = one - bos_f                                           # BOS gets no recency
    Wq[hd - 2] = filter_logit * sq * after_dot
    Wq[hd - 1] = -filter_logit * sq * after_dot
    Wq[hd - 4] = sink_a * sq * one
    for i, wgt in enumerate(RECENCY_W):
        ang = -d0 * float(om[i])
        Wq[2 * i] = recency_logit * wgt * sq * math.cos(ang) * after_dot
        Wq[2 * i + 1] = recency_logit * wgt * sq * math.sin(ang) * after_dot
    # value: the attended token's identity without its BOS part, and the marker (0 at BOS)
    Ba = torch.linalg.qr(torch.randn(d_tok, d_tok, generator=gen))[0]  # [d_tok, d_tok]
    Wv[:d_tok, :d_tok] = Ba.T @ (torch.eye(d_tok) - torch.outer(E[bos], E[bos])) / s_id
    Wv[d_tok] = one - bos_f
    # output: into block 1 (where "." is), the identity orthogonal to the marker direction, which
    # is itself orthogonal to "." and BOS
    m_hat = torch.linalg.qr(torch.stack([E[tid["."]], E[bos], torch.randn(d_tok, generator=gen)], 1))[0][:, 2]
    Wo = torch.zeros(D, hd)
    Wo[blk(1), :d_tok] = gain_a * emb_norm * ((torch.eye(d_tok) - torch.outer(m_hat, m_hat)) @ Ba)
    Wo[blk(1), d_tok] = marker * emb_norm * m_hat
    # value mover (second query head, same keys and values): at a ":" it attends 4 and 5 tokens
    # back (in "... the value 12345, they are:" the value's last two tokens) through the kernel
    # MOVER_K on pairs 0..6 and writes their identities into block 1 of the ":", orthogonal to
    # what the hop keys read there (marker, bare space), so the ":" never matches itself
    Wq_m = torch.zeros(hd, D)
    at_colon = row([(slice(0, d_tok), E[tid[":"]] / s_id)])
    for i, (a_cos, a_sin) in enumerate(MOVER_K):  # score = sum_i a_cos cos(w_i d) + a_sin sin(w_i d)
        Wq_m[2 * i] = mover_logit * sq * a_cos * at_colon
        Wq_m[2 * i + 1] = -mover_logit * sq * a_sin * at_colon
    Wq_m[hd - 4] = sink_a * sq * one
    Pk = torch.linalg.qr(torch.stack([m_hat, E[tid["Ġ"]], E[bos]], 1))[0]
    Wo_m = torch.zeros(D, hd)
    Wo_m[blk(1), :d_tok] = emb_norm * ((torch.eye(d_tok) - Pk @ Pk.T) @ Ba)
    install(layer_a, Wk, Wv, [(Wq, Wo), (Wq_m, Wo_m)])

    # ---- hop heads (layer_b) -----------------------------------------------------------------
    marked = torch.tensor([False] + [int(t) == tid["."] for t in toks[:-1]])  # after every "."
    z = _normed_inputs(model, toks.tolist())[layer_b].cpu()
    commas = toks == tid[","]
    s_k = [proj_scale(z, blk(o), o, marked) for o in range(1, 5)]   # at the keys
    s_q = [proj_scale(z, blk(o), o, commas) for o in range(1, 5)]   # at the hop queries
    scales.update(hop_keys=s_k, hop_queries=s_q)
    one = row([(slice(u, u + 1), torch.ones(1))], z, every)
    # keys: marker, BOS, "after a bare space", and blocks 2-4 through the letter maps
    Wk, Wq, Wv = (torch.zeros(hd, D) for _ in range(3))
    Wk[hd - 2] = row([(blk(1), m_hat)], z, marked)
    Wk[hd - 4] = row([(blk(1), E[bos])], z, first)  # BOS (and position 1): values zero there
    Wk[hd - 1] = row([(blk(1), E[tid["Ġ"]] / s_k[0])])               # after a bare space
    L = E[letters].T                                                   # [d_tok, n_letters]
    pinv = torch.linalg.solve(L.T @ L + ridge * torch.eye(len(letters)), L.T)  # [n_letters, d_tok]
    rows = lambda j: slice(2 * (pair0 + j * match_pairs), 2 * (pair0 + (j + 1) * match_pairs))
    maps = []
    for j in range(3):
        A = _frame(len(letters), 2 * match_pairs, gen) @ pinv         # [2 mp, d_tok]
        A /= float((A @ L).norm(dim=0).pow(2).mean().sqrt())           # |A e|^2 = 1 on letters
        maps.append(A)
        Wk[rows(j), blk(j + 2)] = A / s_k[j + 1]
    # hop query (first query head): the three tokens before the ',' against key blocks 2-4, the
    # marker, BOS as the sink, and a penalty for the "=" after a left-hand side (same match)
    for j in range(3):
        Wq[rows(j), blk(j + 1)] = match_logit * sq * maps[j] / s_q[j]
    comma_f = row([(slice(0, d_tok), E[tid[","]])], z, commas)          # 1 at a ',' (noisy here)
    Wq[hd - 2] = marker_logit * sq * comma_f
    Wq[hd - 4] = sink_b * sq * one
    Wq[hd - 1] = -space_penalty * sq * one
    # value: the gathered identity (block 1 without the marker, "." and BOS) -> token space
    Q = torch.linalg.qr(torch.stack([m_hat, E[tid["."]], E[bos]], 1))[0]
    Bv = torch.linalg.qr(torch.randn(d_tok, d_tok, generator=gen))[0]
    Wv[:d_tok, blk(1)] = Bv.T @ (torch.eye(d_tok) - Q @ Q.T) / (gain_a * s_k[0])
    Wo = torch.zeros(D, hd)
    Wo[:d_tok, :d_tok] = gain_b * emb_norm * Bv
    # first-name query (second query head): at a ":" after "they", the two value tokens the
    # mover put into block 1 against key blocks 2 and 3 (the tokens before the value statement's
    # "."), plus the marker
    colons = toks == tid[":"]
    s_mv = proj_scale(z, blk(1), 4, colons) / 2 + proj_scale(z, blk(1), 5, colons) / 2
    s_c = proj_scale(z, blk(2), 2, colons)
    scales.update(first_moved=s_mv, first_gate=s_c)
    Wq_f = torch.zeros(hd, D)
    no_are = torch.eye(d_tok) - torch.outer(E[tid["Ġare"]], E[tid["Ġare"]])  # block 1 also holds "are"
    for j in range(2):
        Wq_f[rows(j), blk(1)] = first_match * sq * (maps[j] @ no_are) / s_mv
    Wq_f[hd - 2] = first_gate * sq * row([(blk(2), E[tid["Ġthey"]] / s_c)])
    Wq_f[hd - 4] = sink_first * sq * one
    Wq_f[hd - 1] = -space_penalty * sq * one
    install(layer_b, Wk, Wv, [(Wq, Wo), (Wq_f, Wo)])
    return scales


@torch.no_grad()
def head_attention(model, ids: Sequence[int], layer: int, q_head: int) -> torch.Tensor:
    """The attention probabilities of one query head over one sequence, [T, T] (row = query),
    recomputed from the layer's normalised input (for tests and diagnostics)."""
    from kvec_ref.model import apply_rope, rope_cos_sin
    c = model.config
    hd, group = c.head_dim, c.n_head // c.n_head_kv
    z = _normed_inputs(model, ids)[layer]  # [T, D]
    a = model.layers[layer].attn
    T = z.shape[0]
    cos, sin = rope_cos_sin(c, torch.arange(T, device=z.device)[None], torch.float32)
    q = z @ a.wq.weight[q_head * hd:(q_head + 1) * hd].float().T                          # [T, hd]
    k = z @ a.wk.weight[(q_head // group) * hd:(q_head // group + 1) * hd].float().T      # [T, hd]
    q = apply_rope(q[None, None], cos, sin, c.rope_neox)[0, 0]
    k = apply_rope(k[None, None], cos, sin, c.rope_neox)[0, 0]
    s = (q @ k.T) / math.sqrt(hd)
    s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool, device=z.device), 1), float("-inf"))
    return torch.softmax(s, dim=-1)
