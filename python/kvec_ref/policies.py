"""Scores of the query-agnostic eviction policies (Knorm, LagKV, Expected Attention, KVzip), written
from the papers and NVIDIA kvpress's descriptions as docs/policies.md states them, not from the
engine's code. The engine's tests compare its scores and kept entries with these.

Every function scores one prompt of T tokens and returns float64 numpy [n_layer, n_head_kv, T]
(cache order = positions 0 .. T-1); a higher score means "keep". Entries a method always keeps
(sinks, LagKV's tail) get the same conventional values as the engine: +inf for sinks,
2 + (i + 1) / T for LagKV's tail.

    knorm_scores(model, tokens)
    lagkv_scores(model, tokens, sinks=4, lag=128, cross=False)
    expected_attention_scores(model, tokens, sinks=4, n_queries=128, n_future=512,
                              covariance=True, vnorm=True)
    kvzip_scores(model, tokens, first, later, suffix, overlap=8, chunk=2048, sinks=4)

Conventions of the methods (see docs/policies.md for the reasons):
  * Knorm: minus the L2 norm of each post-RoPE key (RoPE keeps norms).
  * LagKV: after `sinks` entries, partitions of `lag`; partition p is scored when p + 1 is complete.
    Each key (and value) is min-max normalised per channel by partition p + 1 (a channel of zero
    range gives 0), its standard deviation over channels (unbiased) is soft-maxed over the
    partition; keys and values averaged. Without `cross`, the score is the rank in the partition:
    (lag - 1 - r) / lag, r = 0 for the best (ties: lower index first).
  * Expected Attention: the mean and covariance (divided by the count) of the layer's last
    n_queries queries before RoPE whose position is >= sinks, per query head; both pushed through
    the RoPE rotation averaged over positions T .. T + n_future - 1; logits
    z = mu.k / sqrt(d) + k^T S k / (2 d) over the entries past the sinks, softmax, mean over the
    query heads of the KV head, times ||v||.
  * KVzip: after the prompt, for each chunk [cs, ce) of `chunk` prompt tokens, the model runs over
    (first if cs == 0 else later + prompt[cs - overlap:cs]) + suffix + prompt[cs:ce] at positions
    T, T + 1, ... with the prompt's cache; each query's attention, restricted and renormalised to
    the entries j < min(sinks, cs), cs <= j < ce and the reconstruction's own entries, gives the
    chunk's entries a score; the maximum over those queries and over the query heads of the KV
    head is the entry's score. The reconstruction's entries are dropped after each chunk.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .model import KVCache, Transformer, rope_inv_freq


def _prompt_pass(model: Transformer, tokens, capture_queries: bool = False):
    """Runs the prompt with a cache. Returns (cache, queries) where queries[l] is the layer's
    pre-RoPE queries [T, n_head, head_dim] (after the biases and the Q norm) when asked for."""
    c = model.config
    cache = KVCache(c.n_layer)
    queries = [None] * c.n_layer
    hooks = []
    if capture_queries:
        def make_hook(l):
            def hook(module, args):
                x = args[0]  # [1, T, n_embd], the normalised input of the attention
                q = module.wq(x).view(x.shape[0], x.shape[1], c.n_head, c.head_dim)
                if module.q_norm is not None:
                    q = module.q_norm(q)
                queries[l] = q[0].detach().double()
            return hook
        for l, layer in enumerate(model.layers):
            hooks.append(layer.attn.register_forward_pre_hook(make_hook(l)))
    try:
        with torch.no_grad():
            model(torch.tensor([list(tokens)], dtype=torch.long), cache=cache)
    finally:
        for h in hooks:
            h.remove()
    return cache, queries


def knorm_scores(model: Transformer, tokens) -> np.ndarray:
    cache, _ = _prompt_pass(model, tokens)
    return np.stack([-cache.k[l][0].double().norm(dim=-1).numpy() for l in range(model.config.n_layer)])


def _lag_partition_scores(x: torch.Tensor, lag: int) -> torch.Tensor:
    """x [H, P * lag, d] (P >= 2 complete partitions) -> softmax-normalised scores of the first
    P - 1 partitions [H, P - 1, lag]."""
    H, n, d = x.shape
    parts = x.reshape(H, n // lag, lag, d)
    ref = parts[:, 1:]
    lo = ref.min(dim=2, keepdim=True).values
    hi = ref.max(dim=2, keepdim=True).values
    rng = hi - lo
    norm = torch.where(rng > 0, (parts[:, :-1] - lo) / torch.where(rng > 0, rng, torch.ones_like(rng)),
                       torch.zeros_like(parts[:, :-1]))
    return torch.softmax(norm.std(dim=-1, unbiased=True), dim=-1)


def lagkv_from_states(k: torch.Tensor, v: torch.Tensor, sinks: int, lag: int, cross: bool) -> np.ndarray:
    """LagKV's scores of one layer from its keys and values [H_kv, T, d] -> [H_kv, T]."""
    H, T, _ = k.shape
    k, v = k.double(), v.double()
    out = np.zeros((H, T))
    full = (T - sinks) // lag if T > sinks else 0
    scored = max(0, full - 1)
    if scored > 0:
        end = sinks + full * lag
        s = (_lag_partition_scores(k[:, sinks:end], lag) + _lag_partition_scores(v[:, sinks:end], lag)) / 2
        if not cross:
            # rank within the partition, best first, ties: lower index first
            order = torch.sort(-s, dim=-1, stable=True).indices       # [H, P-1, lag]
            rank = torch.empty_like(order)
            rank.scatter_(-1, order, torch.arange(lag).expand_as(order).contiguous())
            s = (lag - 1 - rank).double() / lag
        out[:, sinks:sinks + scored * lag] = s.reshape(H, -1).numpy()
    out[:, :min(sinks, T)] = math.inf
    for i in range(max(sinks, sinks + scored * lag), T):
        out[:, i] = 2.0 + (i + 1) / T
    return out


def lagkv_scores(model: Transformer, tokens, sinks: int = 4, lag: int = 128, cross: bool = False) -> np.ndarray:
    cache, _ = _prompt_pass(model, tokens)
    return np.stack([lagkv_from_states(cache.k[l][0], cache.v[l][0], sinks, lag, cross)
                     for l in range(model.config.n_layer)])


def _averaged_rotation(model: Transformer, first: int, n_future: int) -> torch.Tensor:
    """The mean of RoPE's rotation matrices at positions first .. first + n_future - 1, [d, d] float64."""
    c = model.config
    d = c.head_dim
    pos = torch.arange(first, first + n_future, dtype=torch.float64)
    ang = pos[:, None] * rope_inv_freq(c)[None, :]  # [n_future, rope_dim / 2]
    mc, ms = torch.cos(ang).mean(dim=0), torch.sin(ang).mean(dim=0)
    R = torch.eye(d, dtype=torch.float64)
    half = c.rope_dim // 2
    for i in range(half):
        a, b = (i, i + half) if c.rope_neox else (2 * i, 2 * i + 1)
        R[a, a], R[a, b], R[b, a], R[b, b] = mc[i], -ms[i], ms[i], mc[i]
    return R


def expected_attention_scores(model: Transformer, tokens, sinks: int = 4, n_queries: int = 128,
                              n_future: int = 512, covariance: bool = True, vnorm: bool = True) -> np.ndarray:
    c = model.config
    T, d, G = len(tokens), c.head_dim, c.n_rep
    cache, queries = _prompt_pass(model, tokens, capture_queries=True)
    R = _averaged_rotation(model, T, n_future)
    first = max(T - n_queries, sinks)  # the recent queries whose position is >= sinks
    s = min(sinks, T)
    out = np.zeros((c.n_layer, c.n_head_kv, T))
    for l in range(c.n_layer):
        q = queries[l][first:]                    # [m, n_head, d]
        k = cache.k[l][0].double()[:, s:]         # [H_kv, T - s, d]
        v = cache.v[l][0].double()[:, s:]
        for h in range(c.n_head_kv):
            probs = torch.zeros(T - s, dtype=torch.float64)
            for g in range(G):
                x = q[:, h * G + g]               # [m, d]
                if x.shape[0] > 0:
                    mu = x.mean(dim=0)
                    cov = (x - mu).T @ (x - mu) / x.shape[0]
                else:
                    mu, cov = torch.zeros(d, dtype=torch.float64), torch.zeros(d, d, dtype=torch.float64)
                mu, cov = R @ mu, R @ cov @ R.T
                z = k[h] @ mu / math.sqrt(d)
                if covariance:
                    z = z + ((k[h] @ cov) * k[h]).sum(dim=-1) / (2 * d)
                probs += torch.softmax(z, dim=0) / G
            if vnorm:
                probs = probs * v[h].norm(dim=-1)
            out[l, h, s:] = probs.numpy()
            out[l, h, :s] = math.inf
    return out


class _ReconStats:
    """Receives the reconstruction's attention probabilities of one layer (the model's `stats`
    hook) and keeps, per query head, the largest renormalised probability of each chunk entry."""

    def __init__(self, score: torch.Tensor, n_context: int, begin: int, end: int, sinks: int):
        self.score, self.n, self.begin, self.end, self.sinks = score, n_context, begin, end, sinks

    def add(self, probs: torch.Tensor, q0: int) -> None:
        p = probs[0].double()                      # [n_head, tc, S]
        keep = torch.zeros(p.shape[-1], dtype=torch.bool)
        keep[:self.sinks] = True
        keep[self.begin:self.end] = True
        keep[self.n:] = True
        mass = (p * keep).sum(dim=-1, keepdim=True)  # [n_head, tc, 1]
        sub = p[..., self.begin:self.end] / mass
        self.score[:, self.begin:self.end] = torch.maximum(self.score[:, self.begin:self.end], sub.amax(dim=1))


def kvzip_scores(model: Transformer, tokens, first, later, suffix, overlap: int = 8, chunk: int = 2048,
                 sinks: int = 4) -> np.ndarray:
    c = model.config
    tokens = list(tokens)
    T = len(tokens)
    cache, _ = _prompt_pass(model, tokens)
    score = [torch.zeros(c.n_head, T, dtype=torch.float64) for _ in range(c.n_layer)]  # per query head
    for cs in range(0, T, chunk):
        ce = min(T, cs + chunk)
        ids = (list(first) if cs == 0 else list(later) + tokens[max(0, cs - overlap):cs]) + list(suffix) + tokens[cs:ce]
        stats = [_ReconStats(score[l], T, cs, ce, min(sinks, cs)) for l in range(c.n_layer)]
        with torch.no_grad():
            model(torch.tensor([ids], dtype=torch.long), cache=cache, stats=stats)
        for l in range(c.n_layer):  # drop the reconstruction's entries
            cache.k[l], cache.v[l] = cache.k[l][:, :, :T], cache.v[l][:, :, :T]
    out = np.stack([s.view(c.n_head_kv, c.n_rep, T).amax(dim=1).numpy() for s in score])
    out[:, :, :min(sinks, T)] = math.inf
    return out
