"""Decoder of the supported families (llama, qwen2, qwen3; gemma3) in PyTorch, reading and writing
GGUF files.

The model follows llama.cpp's graphs (src/models/llama.cpp, qwen2.cpp, qwen3.cpp) and GGUF's
conventions, and is also the training model of the project's bundled model:

    x = token_embd[tokens]                                  [B, T, n_embd]
    for each layer:
        h = x + attn(attn_norm(x))                          RMSNorm, then self-attention
        x = h + ffn_down(silu(ffn_gate(n)) * ffn_up(n)),    n = ffn_norm(h)   (SwiGLU)
    logits = output(output_norm(x))                         [B, T, n_vocab]

    attn: q = attn_q(n) (+ bias: qwen2), k = attn_k(n), v = attn_v(n), split in heads of head_dim;
          qwen3: RMSNorm over head_dim of every q and k head (attn_q_norm / attn_k_norm), before RoPE;
          RoPE on q and k; softmax(q k^T / sqrt(head_dim) + causal mask) v, with GQA (query head h
          uses KV head h // (n_head / n_head_kv)); attn_output of the concatenated heads.

gemma3 (llama.cpp's src/models/gemma3.cpp): x = token_embd[tokens] * sqrt(n_embd); q and k
RMSNorm per head; attention logits scaled by config.attn_scale; the attention output and the FFN
output each pass an RMSNorm (post_attention_norm, post_ffw_norm) before joining the residual;
FFN down(gelu_tanh(gate(n)) * up(n)); sliding-window layers (config.is_swa) let query i see keys
j with i - window < j <= i (sequence indices, = positions here) and rotate with rope_theta_swa
and no scaling; the GGUF's norm weights hold Gemma's (1 + w) already, so RMSNorm multiplies by
them as they are; optional final soft-capping cap * tanh(logits / cap).

Mixture of experts (llama.cpp's src/models/qwen3moe.cpp, qwen2moe.cpp, llama.cpp with experts, and
build_moe_ffn in src/llama-graph.cpp): the FFN of every layer is `MoEFeedForward`: router logits
x . ffn_gate_inp, p = softmax over every expert, the n_expert_used experts of largest p with p as
weights (divided by their sum for qwen3moe and llama; not for qwen2moe), out = sum of
weight_e * down_e(silu(gate_e(x)) * up_e(x)) over the selected experts; qwen2moe adds a shared
expert down(silu(gate(x)) * up(x)) scaled by sigmoid(x . ffn_gate_inp_shexp). The experts' GGUF
tensors are 3-D [n_in, n_out, n_expert] (numpy [n_expert, n_out, n_in]).

gemma2 (src/models/gemma2.cpp): gemma3's layer without the q / k norms, attention logits
soft-capped (config.attn_softcap) before the softmax, the even layers sliding-window (rotating
with rope_theta_swa and the global scaling), final soft-capping always.

phi3 (src/models/phi3.cpp): the llama layer with NEOX RoPE; attn_qkv.weight and ffn_up.weight
(gate rows first) are split when loaded (_fused_parts); LongRoPE divisors (config.rope_factors)
and the attention factor (cos and sin times config.rope_attn_factor); no sliding window.

gpt-oss (src/models/openai-moe.cpp, build_attn with sinks, build_moe_ffn with SOFTMAX_WEIGHT
gating and SWIGLU_OAI_MOE): the llama layer with biases on q / k / v and the attention output,
each query head's sink logit (attn_sinks) joining the softmax's denominator only (a column of
the softmax that is dropped afterwards), post_attention_norm as the FFN's input norm, and the
MoE FFN with router and expert biases, the experts chosen by their logits' top k with a softmax
over those logits as weights, and swiglu_oai(g, u) = min(g, 7) * sigmoid(1.702 min(g, 7)) *
(clamp(u, -7, 7) + 1); YaRN RoPE (rope_inv_freq: the interpolated and extrapolated angles mixed
by a linear ramp over the pairs, cos and sin times 1 + 0.1 ln(factor)); the even layers
sliding-window.

Conventions relied on (sources: llama.cpp `llama_model_rope_type()` in src/llama-model.cpp,
ggml's rope kernel `ggml_rope_cache_init` / `rope_yarn`, the GGUF spec's llama
`tensor_data_layout` permute, and llama.cpp's converter):
  * RoPE type by architecture: `llama` uses LLAMA_ROPE_TYPE_NORM, "operating on pairs of
    consecutive head values" (x[2i], x[2i+1]); `qwen2`/`qwen3` use LLAMA_ROPE_TYPE_NEOX, "pairs of
    head values offset by n_rot/2" (x[i], x[i + n_rot/2]). NORM works for llama because the
    converter permutes the rows of attn_q / attn_k (reshape(n_head, 2, d/2, n_in).swapaxes(1, 2)),
    which turns HF's rotate-half pairs into adjacent pairs.
  * Angle of pair i at position p: p * freq_scale * base^(-2i / n_rot) / ff[i], where
    freq_scale = 1 / rope.scaling.factor for linear scaling and ff = the `rope_freqs.weight`
    tensor (Llama 3.1 "llama3" scaling: per-frequency divisors) or 1. Only the first n_rot
    (rope.dimension_count) values of a head rotate; the rest pass through.
  * Missing output.weight means the output matrix is token_embd.weight (tied).
  * GGUF dims: ne[0] is the input dimension, so a tensor read as numpy [ne1, ne0] is a torch
    Linear weight [out, in] as is.
  * RMSNorm: x / sqrt(mean(x^2) + eps) * weight, eps = attention.layer_norm_rms_epsilon.

Angles are computed in float64 and then cast, so the reference's RoPE is exact to float32
rounding; everything else runs in the parameters' dtype (float32 by default; float64 works via
`model.double()`; bfloat16 autocast works for training, with RMSNorm, RoPE and softmax in float32).
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

from .config import SUPPORTED_ARCHS, ModelConfig, config_from_gguf, llama3_rope_freqs, model_metadata
from .gguf import GGUFError, GGUFReader, GGUFValue, GGUFWriter, ValueType, infer_value
from .ggml_types import GGMLType, TYPE_TRAITS

# re-exported: callers import the whole API from kvec_ref.model
__all__ = ["SUPPORTED_ARCHS", "ModelConfig", "config_from_gguf", "llama3_rope_freqs", "model_metadata",
           "RMSNorm", "rope_inv_freq", "rope_cos_sin", "apply_rope", "KVCache", "AttnStats", "attention_core",
           "Attention", "FeedForward", "Block", "Transformer", "check_kv_visible", "load_gguf", "save_gguf",
           "logits", "generate", "attention_stats"]

# =============================================================================================
# Building blocks


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, device=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., dim] -> [..., dim]
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (y * self.weight.to(y.dtype)).to(x.dtype)


def yarn_ramp(config: ModelConfig, base: float) -> torch.Tensor:
    """YaRN's extrapolation share of each rotated pair, float64 [rope_dim / 2] (the YaRN paper's
    ramp with llama.cpp's corrections): the pair whose wavelength turns b times within the
    original context is dim(b) = rope_dim * ln(n_ctx_orig / (2 pi b)) / (2 ln base); pairs below
    floor(dim(32)) keep their angle (share 1), pairs above ceil(dim(1)) are interpolated (share
    0), linearly in between."""
    d = config.rope_dim

    def dim(turns: float) -> float:
        return d * math.log(config.n_ctx_orig / (turns * 2 * math.pi)) / (2 * math.log(base))

    low, high = max(0.0, math.floor(dim(32.0))), min(d - 1.0, math.ceil(dim(1.0)))
    i = torch.arange(d // 2, dtype=torch.float64)
    return 1.0 - ((i - low) / max(0.001, high - low)).clamp(0.0, 1.0)


def rope_inv_freq(config: ModelConfig, swa: bool = False) -> torch.Tensor:
    """Angle per unit position of each rotated pair, float64 [rope_dim / 2]:
    freq_scale * base^(-2i / rope_dim) / factors[i] (factors: rope_freqs or LongRoPE's,
    config.rope_factors); sliding-window layers: rope_theta_swa, scale rope_scale_swa, no
    factors. YaRN: the unscaled and the scaled angle mixed by yarn_ramp."""
    i = torch.arange(config.rope_dim // 2, dtype=torch.float64)
    base, scale = (config.rope_theta_swa, config.rope_scale_swa) if swa else (config.rope_theta, config.freq_scale)
    extrap = base ** (-2.0 * i / config.rope_dim)
    if not swa and config.rope_factors is not None:
        extrap = extrap / torch.tensor(config.rope_factors, dtype=torch.float64)
    if config.rope_scaling_type == "yarn":
        ramp = yarn_ramp(config, base)
        return extrap * scale * (1.0 - ramp) + extrap * ramp
    return extrap * scale


def rope_magnitude(config: ModelConfig, swa: bool = False) -> float:
    """The factor on the rotated elements: rope_attn_factor, and YaRN's 1 + 0.1 ln(1 / scale)."""
    m = config.rope_attn_factor
    if config.rope_scaling_type == "yarn":
        scale = config.rope_scale_swa if swa else config.freq_scale
        m *= 1.0 + 0.1 * math.log(1.0 / scale)
    return m


def rope_cos_sin(config: ModelConfig, positions: torch.Tensor, dtype: torch.dtype,
                 swa: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """positions [B, T] (int) -> cos, sin [B, 1, T, rope_dim / 2] (angles in float64, then cast),
    both times rope_attn_factor (ggml's mscale), so that the rotated elements carry it."""
    ang = positions.to(torch.float64)[..., None] * rope_inv_freq(config, swa).to(positions.device)  # [B, T, rd/2]
    m = rope_magnitude(config, swa)
    return (m * torch.cos(ang))[:, None].to(dtype), (m * torch.sin(ang))[:, None].to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, neox: bool) -> torch.Tensor:
    """Rotates the first rope_dim values of every head.

    x [B, H, T, head_dim]; cos, sin [B, 1, T, rope_dim / 2].
    NORM (neox=False): pair i = (x[2i], x[2i+1]); NEOX: pair i = (x[i], x[i + rope_dim/2]).
    Each pair (a, b) becomes (a cos - b sin, a sin + b cos).
    """
    rd = cos.shape[-1] * 2
    xr, rest = x[..., :rd], x[..., rd:]
    compute = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    xr = xr.to(compute)
    cos, sin = cos.to(compute), sin.to(compute)
    if neox:
        a, b = xr[..., : rd // 2], xr[..., rd // 2:]
        out = torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    else:
        a, b = xr[..., 0::2], xr[..., 1::2]
        out = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    return torch.cat([out.to(x.dtype), rest], dim=-1)


class KVCache:
    """Post-RoPE keys and values of every layer, for incremental decoding.
    k[l], v[l]: [B, n_head_kv, T_past, head_dim]."""

    def __init__(self, n_layer: int):
        self.k: list[Optional[torch.Tensor]] = [None] * n_layer
        self.v: list[Optional[torch.Tensor]] = [None] * n_layer

    @property
    def length(self) -> int:
        return 0 if self.k[0] is None else int(self.k[0].shape[2])


class AttnStats:
    """Accumulates, per query head, statistics of the attention probabilities of one layer
    (used by `attention_stats`): column sums over all queries, the sum of the rows of the last
    `window` queries, and the last query's row. Arrays [B, n_head, T], float64."""

    def __init__(self, batch: int, n_head: int, n_tokens: int, window: int):
        self.n_tokens = n_tokens
        self.window = max(1, min(window, n_tokens))
        self.col_sum = torch.zeros(batch, n_head, n_tokens, dtype=torch.float64)
        self.win_sum = torch.zeros(batch, n_head, n_tokens, dtype=torch.float64)
        self.last = torch.zeros(batch, n_head, n_tokens, dtype=torch.float64)

    def add(self, probs: torch.Tensor, q0: int) -> None:
        """probs [B, n_head, Tc, S] of queries q0 .. q0 + Tc - 1 over keys 0 .. S - 1."""
        p = probs.detach().to(torch.float64)
        tc, s = p.shape[2], p.shape[3]
        self.col_sum[..., :s] += p.sum(dim=2)
        first_win = self.n_tokens - self.window
        lo = max(first_win - q0, 0)
        if lo < tc:
            self.win_sum[..., :s] += p[:, :, lo:].sum(dim=2)
        if q0 + tc == self.n_tokens:
            self.last[..., :s] = p[:, :, -1]


def attention_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_start: int,
                   visible: Optional[torch.Tensor], chunk: int, checkpoint: bool,
                   stats: Optional[AttnStats] = None, scale: Optional[float] = None,
                   window: int = 0, softcap: float = 0.0, sinks: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Causal grouped-query attention, computed in blocks of `chunk` queries.

    q [B, H_kv, G, T, D] (query t has sequence index q_start + t); k, v [B, H_kv, S, D] with
    S = q_start + T (keys of sequence indices 0 .. S - 1).
    visible: optional int [H_kv, S]: key j is visible to query i iff j <= i < visible[h, j].
    scale: logit scale (default 1 / sqrt(D)); window > 0: key j is visible to query i only if
    i - j < window (sliding-window layers); softcap > 0: scaled logits s become
    softcap * tanh(s / softcap) before the mask and the softmax (gemma2); sinks [H_kv, G]: query
    head (h, g)'s sink logit joins the softmax as an extra column that is then dropped (gpt-oss).
    Returns [B, H_kv, G, T, D]. The score buffer of one block is [B * H_kv, G * chunk, S'] where
    S' = keys up to the block's last query; the G query heads of a KV head share one matmul
    against that head's keys, so K and V are never repeated per query head.
    """
    B, Hkv, G, T, D = q.shape
    if (q.is_cuda and visible is None and stats is None and q_start == 0 and window == 0 and scale is None
            and softcap == 0.0 and sinks is None):
        return causal_sdpa(q, k, v)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    outs = []
    for t0 in range(0, T, chunk):
        t1 = min(T, t0 + chunk)
        tc = t1 - t0
        n_keys = q_start + t1  # later keys are never visible to this block

        # additive mask: 0 where key j is visible to query i, -inf elsewhere
        q_idx = torch.arange(q_start + t0, q_start + t1, device=q.device)  # [tc]
        k_idx = torch.arange(n_keys, device=q.device)                       # [S']
        allowed = k_idx[None, :] <= q_idx[:, None]                          # [tc, S']
        if window > 0:
            allowed = allowed & (q_idx[:, None] - k_idx[None, :] < window)
        if visible is not None:
            allowed = allowed[None] & (q_idx[None, :, None] < visible[:, None, :n_keys])  # [H_kv, tc, S']
        bias = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device).masked_fill_(~allowed, float("-inf"))
        if visible is None:
            bias = bias.repeat(G, 1)                                        # [G*tc, S']
        else:
            bias = bias[None, :, None].expand(B, Hkv, G, tc, n_keys).reshape(B * Hkv, G * tc, n_keys)

        def block(qc: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, bias=bias, t0=t0, tc=tc, n_keys=n_keys) -> torch.Tensor:
            # scores = bias + scale * q k^T, one batched GEMM per block (soft-capped: the cap first)
            if softcap > 0.0:
                s = torch.bmm(qc.reshape(B * Hkv, G * tc, D), kc.reshape(B * Hkv, n_keys, D).transpose(1, 2)) * scale
                scores = softcap * torch.tanh(s / softcap) + bias.to(qc.dtype)
            else:
                scores = torch.baddbmm(bias.to(qc.dtype), qc.reshape(B * Hkv, G * tc, D),
                                       kc.reshape(B * Hkv, n_keys, D).transpose(1, 2), beta=1.0, alpha=scale)
            if scores.dtype in (torch.float16, torch.bfloat16):
                scores = scores.float()
            if sinks is not None:  # row (h, g * tc + t) gets sinks[h, g] as a last column
                col = sinks.to(scores.dtype).view(1, Hkv, G, 1, 1).expand(B, Hkv, G, tc, 1).reshape(B * Hkv, G * tc, 1)
                probs = torch.softmax(torch.cat([scores, col], dim=-1), dim=-1)[..., :-1]  # [B*H_kv, G*tc, S']
            else:
                probs = torch.softmax(scores, dim=-1)  # [B*H_kv, G*tc, S']
            if stats is not None:
                stats.add(probs.view(B, Hkv * G, tc, n_keys), q_start + t0)
            out = torch.bmm(probs.to(vc.dtype), vc.reshape(B * Hkv, n_keys, D))  # [B*H_kv, G*tc, D]
            return out.view(B, Hkv, G, tc, D)

        qc = q[:, :, :, t0:t1]
        kc, vc = k[:, :, :n_keys], v[:, :, :n_keys]
        if (checkpoint and stats is None and torch.is_grad_enabled()
                and (qc.requires_grad or kc.requires_grad or vc.requires_grad)):
            outs.append(torch.utils.checkpoint.checkpoint(block, qc, kc, vc, use_reentrant=False))
        else:
            outs.append(block(qc, kc, vc))
    return torch.cat(outs, dim=3)


def causal_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """attention_core for a whole causal sequence (no cache, no eviction mask, no statistics)
    through torch's fused attention, which training on a GPU uses.
    q [B, H_kv, G, T, D]; k, v [B, H_kv, T, D] -> [B, H_kv, G, T, D]."""
    B, Hkv, G, T, D = q.shape
    kx = k[:, :, None].expand(B, Hkv, G, T, D).reshape(B, Hkv * G, T, D)  # [B, H, T, D]
    vx = v[:, :, None].expand(B, Hkv, G, T, D).reshape(B, Hkv * G, T, D)  # [B, H, T, D]
    o = F.scaled_dot_product_attention(q.reshape(B, Hkv * G, T, D), kx, vx, is_causal=True)
    return o.reshape(B, Hkv, G, T, D)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, device=None):
        super().__init__()
        c = config
        self.config = c
        self.wq = nn.Linear(c.n_embd, c.n_head * c.head_dim, bias=c.qkv_bias, device=device)     # attn_q
        self.wk = nn.Linear(c.n_embd, c.n_head_kv * c.head_dim, bias=c.qkv_bias, device=device)  # attn_k
        self.wv = nn.Linear(c.n_embd, c.n_head_kv * c.head_dim, bias=c.qkv_bias, device=device)  # attn_v
        self.wo = nn.Linear(c.n_head * c.head_dim, c.n_embd, bias=c.gptoss, device=device)      # attn_output
        # attn_sinks (gpt-oss): [n_head], query head h = kv * n_rep + g
        self.sinks = nn.Parameter(torch.zeros(c.n_head, device=device)) if c.gptoss else None
        if c.qk_norm:
            self.q_norm = RMSNorm(c.head_dim, c.norm_eps, device=device)  # attn_q_norm
            self.k_norm = RMSNorm(c.head_dim, c.norm_eps, device=device)  # attn_k_norm
        else:
            self.q_norm = None
            self.k_norm = None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layer: int,
                visible: Optional[torch.Tensor], cache: Optional[KVCache],
                stats: Optional[AttnStats]) -> torch.Tensor:
        """x [B, T, n_embd] -> [B, T, n_embd]."""
        c = self.config
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, c.n_head, c.head_dim)      # [B, T, H, D]
        k = self.wk(x).view(B, T, c.n_head_kv, c.head_dim)   # [B, T, H_kv, D]
        v = self.wv(x).view(B, T, c.n_head_kv, c.head_dim)   # [B, T, H_kv, D]
        if self.q_norm is not None:
            q = self.q_norm(q)
            k = self.k_norm(k)
        q = apply_rope(q.transpose(1, 2), cos, sin, c.rope_neox)  # [B, H, T, D]
        k = apply_rope(k.transpose(1, 2), cos, sin, c.rope_neox)  # [B, H_kv, T, D]
        v = v.transpose(1, 2)                                      # [B, H_kv, T, D]

        q_start = 0
        if cache is not None:
            if cache.k[layer] is not None:
                q_start = int(cache.k[layer].shape[2])
                k = torch.cat([cache.k[layer], k], dim=2)  # [B, H_kv, S, D]
                v = torch.cat([cache.v[layer], v], dim=2)
            cache.k[layer], cache.v[layer] = k, v

        q = q.reshape(B, c.n_head_kv, c.n_rep, T, c.head_dim)  # head h = kv * n_rep + g
        if k.dtype != q.dtype:  # autocast may leave q / k / v in different dtypes
            k = k.to(q.dtype)
        if v.dtype != q.dtype:
            v = v.to(q.dtype)
        o = attention_core(q, k, v, q_start, visible, c.attn_chunk, c.attn_checkpoint and self.training, stats,
                           scale=c.attn_scale, window=c.sliding_window if c.is_swa(layer) else 0,
                           softcap=c.attn_softcap,
                           sinks=None if self.sinks is None else self.sinks.view(c.n_head_kv, c.n_rep))
        o = o.permute(0, 3, 1, 2, 4).reshape(B, T, c.n_head * c.head_dim)  # heads concatenated in order
        return self.wo(o)


class FeedForward(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x)); gemma3: down(gelu_tanh(gate(x)) * up(x))."""

    def __init__(self, config: ModelConfig, device=None, n_ff: Optional[int] = None):
        super().__init__()
        self.gelu = config.gemma
        n_ff = config.n_ff if n_ff is None else n_ff
        self.gate = nn.Linear(config.n_embd, n_ff, bias=False, device=device)  # ffn_gate
        self.up = nn.Linear(config.n_embd, n_ff, bias=False, device=device)    # ffn_up
        self.down = nn.Linear(n_ff, config.n_embd, bias=False, device=device)  # ffn_down

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = F.gelu(self.gate(x), approximate="tanh") if self.gelu else F.silu(self.gate(x))
        return self.down(act * self.up(x))


def swiglu_oai(g: torch.Tensor, u: torch.Tensor, alpha: float = 1.702, limit: float = 7.0) -> torch.Tensor:
    """gpt-oss's clamped SwiGLU: g' = min(g, limit), u' = clamp(u, -limit, limit),
    g' * sigmoid(alpha g') * (u' + 1)."""
    g = g.clamp(max=limit)
    return g * torch.sigmoid(alpha * g) * (u.clamp(-limit, limit) + 1.0)


class MoEFeedForward(nn.Module):
    """Mixture of experts: the router picks n_expert_used of n_expert SwiGLU experts per token
    (softmax over all, top k, optionally renormalised); qwen2moe adds a gated shared expert;
    gpt-oss: biases on the router and the experts, top k by logit with a softmax over the chosen
    logits, swiglu_oai."""

    def __init__(self, config: ModelConfig, device=None):
        super().__init__()
        c = config
        self.k = c.n_expert_used
        self.norm = bool(c.expert_weights_norm)
        self.oai = c.gptoss
        self.router = nn.Linear(c.n_embd, c.n_expert, bias=c.gptoss, device=device)                 # ffn_gate_inp
        self.gate_exps = nn.Parameter(torch.empty(c.n_expert, c.n_ff_exp, c.n_embd, device=device))  # ffn_gate_exps
        self.up_exps = nn.Parameter(torch.empty(c.n_expert, c.n_ff_exp, c.n_embd, device=device))    # ffn_up_exps
        self.down_exps = nn.Parameter(torch.empty(c.n_expert, c.n_embd, c.n_ff_exp, device=device))  # ffn_down_exps
        if c.gptoss:  # ffn_{gate,up,down}_exps.bias: [n_expert, n_ff_exp], [n_expert, n_ff_exp], [n_expert, n_embd]
            self.gate_exps_b = nn.Parameter(torch.empty(c.n_expert, c.n_ff_exp, device=device))
            self.up_exps_b = nn.Parameter(torch.empty(c.n_expert, c.n_ff_exp, device=device))
            self.down_exps_b = nn.Parameter(torch.empty(c.n_expert, c.n_embd, device=device))
        if c.n_ff_shexp > 0:
            self.shexp = FeedForward(c, device=device, n_ff=c.n_ff_shexp)                         # ffn_*_shexp
            self.shexp_gate = nn.Parameter(torch.empty(c.n_embd, device=device))                  # ffn_gate_inp_shexp
        else:
            self.shexp = None
            self.shexp_gate = None

    def routing(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [N, n_embd] -> experts [N, k] (descending probability), weights [N, k]."""
        if self.oai:  # top k by logit, then a softmax over the chosen logits
            top, experts = torch.topk(self.router(x), self.k, dim=-1)
            return experts, torch.softmax(top, dim=-1)
        probs = torch.softmax(self.router(x), dim=-1)  # [N, n_expert]
        weights, experts = torch.topk(probs, self.k, dim=-1)
        if self.norm:
            weights = weights / weights.sum(dim=-1, keepdim=True).clamp_min(6.103515625e-5)
        return experts, weights

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        xf = x.reshape(-1, shape[-1])  # [N, n_embd]
        experts, weights = self.routing(xf)
        out = torch.zeros_like(xf)
        for e in range(self.gate_exps.shape[0]):
            hit = experts == e                           # [N, k]
            rows = hit.any(dim=-1).nonzero().squeeze(-1)  # tokens that chose expert e
            if rows.numel() == 0:
                continue
            w = (weights * hit).sum(dim=-1)[rows]        # [n]
            h = xf[rows]
            if self.oai:
                g, u = h @ self.gate_exps[e].T + self.gate_exps_b[e], h @ self.up_exps[e].T + self.up_exps_b[e]
                y = swiglu_oai(g, u) @ self.down_exps[e].T + self.down_exps_b[e]
            else:
                y = (F.silu(h @ self.gate_exps[e].T) * (h @ self.up_exps[e].T)) @ self.down_exps[e].T
            out[rows] += w[:, None] * y
        if self.shexp is not None:
            out = out + torch.sigmoid(xf @ self.shexp_gate)[:, None] * self.shexp(xf)
        return out.reshape(shape)


class Block(nn.Module):
    def __init__(self, config: ModelConfig, device=None):
        super().__init__()
        self.attn_norm = RMSNorm(config.n_embd, config.norm_eps, device=device)
        self.attn = Attention(config, device=device)
        self.ffn_norm = RMSNorm(config.n_embd, config.norm_eps, device=device)
        self.ffn = MoEFeedForward(config, device=device) if config.n_expert > 0 else FeedForward(config, device=device)
        if config.gemma:
            self.attn_post_norm = RMSNorm(config.n_embd, config.norm_eps, device=device)  # post_attention_norm
            self.ffn_post_norm = RMSNorm(config.n_embd, config.norm_eps, device=device)   # post_ffw_norm
        else:
            self.attn_post_norm = None
            self.ffn_post_norm = None

    def forward(self, x, cos, sin, layer, visible, cache, stats):
        a = self.attn(self.attn_norm(x), cos, sin, layer, visible, cache, stats)
        if self.attn_post_norm is not None:
            a = self.attn_post_norm(a)
        h = x + a
        f = self.ffn(self.ffn_norm(h))
        if self.ffn_post_norm is not None:
            f = self.ffn_post_norm(f)
        return h + f


# =============================================================================================
# The model


class Transformer(nn.Module):
    def __init__(self, config: ModelConfig, device=None):
        super().__init__()
        self.config = config
        c = config
        self.tok_embd = nn.Embedding(c.n_vocab, c.n_embd, device=device)  # weight [n_vocab, n_embd]
        self.layers = nn.ModuleList([Block(c, device=device) for _ in range(c.n_layer)])
        self.output_norm = RMSNorm(c.n_embd, c.norm_eps, device=device)
        self.output = None if c.tied_output else nn.Linear(c.n_embd, c.n_vocab, bias=False, device=device)
        if device is None or torch.device(device).type != "meta":
            self.reset_parameters()

    def reset_parameters(self, std: float = 0.02) -> None:
        """Training initialisation: N(0, std) for matrices and the embedding, with the residual
        projections (attn_output, ffn_down) scaled by 1/sqrt(2 n_layer); norms 1, biases 0."""
        resid_std = std / math.sqrt(2 * self.config.n_layer)
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                nn.init.ones_(p)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)
            elif name.endswith("wo.weight") or name.endswith("down.weight"):
                nn.init.normal_(p, 0.0, resid_std)
            else:
                nn.init.normal_(p, 0.0, std)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def output_weight(self) -> torch.Tensor:
        """[n_vocab, n_embd]: output.weight, or token_embd.weight when tied."""
        return self.tok_embd.weight if self.output is None else self.output.weight

    def forward(self, tokens: torch.Tensor, positions: Optional[torch.Tensor] = None,
                kv_visible=None, cache: Optional[KVCache] = None,
                stats: Optional[Sequence[AttnStats]] = None) -> torch.Tensor:
        """tokens [B, T] (or [T]) -> logits [B, T, n_vocab] (float32, or float64 for a double model).

        Same arguments as `hidden`; the logits are output(hidden(...)).
        """
        x = self.hidden(tokens, positions, kv_visible, cache, stats)  # [B, T, n_embd]
        logits = F.linear(x, self.output_weight())  # [B, T, n_vocab]
        cap = self.config.final_logit_softcap
        if cap > 0:
            logits = cap * torch.tanh(logits / cap)
        return logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits

    def hidden(self, tokens: torch.Tensor, positions: Optional[torch.Tensor] = None,
               kv_visible=None, cache: Optional[KVCache] = None,
               stats: Optional[Sequence[AttnStats]] = None) -> torch.Tensor:
        """tokens [B, T] (or [T]) -> final hidden states [B, T, n_embd] after output_norm, i.e. the
        input of the output projection (training computes logits only where the loss needs them).

        positions: RoPE positions [B, T] or [T]; default 0 .. T-1 (after the cache's length).
        kv_visible: eviction mask, int [n_layer, n_head_kv, T] (numpy or torch): key j of KV head
            h in layer l is visible to query i iff j <= i < kv_visible[l, h, j] (indices are
            sequence indices; T or more = never evicted). Not combinable with a cache.
        cache: KVCache, extended in place (incremental decoding).
        stats: one AttnStats per layer to fill (see attention_stats).
        """
        c = self.config
        if tokens.dim() == 1:
            tokens = tokens[None]
        if tokens.dim() != 2 or tokens.shape[1] == 0:
            raise ValueError(f"tokens must be [B, T] with T > 0, got shape {list(tokens.shape)}")
        if tokens.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"tokens must be integers, got {tokens.dtype}")
        tokens = tokens.long()
        B, T = tokens.shape
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi >= c.n_vocab:
            bad = lo if lo < 0 else hi
            raise ValueError(f"token id {bad} is out of range (vocabulary has {c.n_vocab} tokens)")

        past = cache.length if cache is not None else 0
        if positions is None:
            positions = torch.arange(past, past + T, device=tokens.device)[None].expand(B, T)
        else:
            positions = torch.as_tensor(positions, device=tokens.device)
            if positions.dim() == 1:
                positions = positions[None].expand(B, -1)
            if positions.shape != (B, T):
                raise ValueError(f"positions must be [T] or [B, T] = [{B}, {T}], got {list(positions.shape)}")
        visible = None
        if kv_visible is not None:
            if cache is not None:
                raise ValueError("kv_visible cannot be combined with a KV cache")
            visible = check_kv_visible(kv_visible, c, T).to(tokens.device)
        if stats is not None and len(stats) != c.n_layer:
            raise ValueError(f"stats needs one AttnStats per layer ({c.n_layer})")

        x = self.tok_embd(tokens)  # [B, T, n_embd]
        if c.gemma:
            x = x * math.sqrt(c.n_embd)
        dtype = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
        cos, sin = rope_cos_sin(c, positions, dtype)  # [B, 1, T, rope_dim / 2]
        cos_swa, sin_swa = rope_cos_sin(c, positions, dtype, swa=True) if c.swa_layers is not None else (cos, sin)
        for l, layer in enumerate(self.layers):
            cs, sn = (cos_swa, sin_swa) if c.is_swa(l) else (cos, sin)
            x = layer(x, cs, sn, l, None if visible is None else visible[l], cache,
                      None if stats is None else stats[l])
        return self.output_norm(x)  # [B, T, n_embd]


def check_kv_visible(kv_visible, config: ModelConfig, n_tokens: int) -> torch.Tensor:
    """Validates an eviction mask and returns it as int64 [n_layer, n_head_kv, T]."""
    vis = kv_visible if isinstance(kv_visible, torch.Tensor) else torch.from_numpy(np.array(kv_visible))
    want = (config.n_layer, config.n_head_kv, n_tokens)
    if tuple(vis.shape) != want:
        raise ValueError(f"kv_visible must have shape [n_layer, n_head_kv, T] = {list(want)}, got {list(vis.shape)}")
    if vis.dtype.is_floating_point or vis.dtype == torch.bool:
        raise ValueError(f"kv_visible must hold integers, got {vis.dtype}")
    vis = vis.long()
    own = torch.arange(n_tokens)
    bad = (vis <= own).nonzero()
    if bad.numel():
        l, h, j = (int(x) for x in bad[0])
        raise ValueError(f"kv_visible[{l}, {h}, {j}] = {int(vis[l, h, j])}: a key must stay visible at least "
                         f"to its own query (value > {j})")
    return vis


# =============================================================================================
# GGUF import / export


def _tensor_map(config: ModelConfig) -> dict[str, str]:
    """GGUF tensor name -> state_dict name."""
    m = {"token_embd.weight": "tok_embd.weight", "output_norm.weight": "output_norm.weight"}
    if not config.tied_output:
        m["output.weight"] = "output.weight"
    for i in range(config.n_layer):
        b, p = f"blk.{i}.", f"layers.{i}."
        m[b + "attn_norm.weight"] = p + "attn_norm.weight"
        for g, t in (("q", "wq"), ("k", "wk"), ("v", "wv")):
            m[b + f"attn_{g}.weight"] = p + f"attn.{t}.weight"
            if config.qkv_bias:
                m[b + f"attn_{g}.bias"] = p + f"attn.{t}.bias"
        m[b + "attn_output.weight"] = p + "attn.wo.weight"
        if config.gptoss:
            m[b + "attn_output.bias"] = p + "attn.wo.bias"
            m[b + "attn_sinks.weight"] = p + "attn.sinks"
        if config.qk_norm:
            m[b + "attn_q_norm.weight"] = p + "attn.q_norm.weight"
            m[b + "attn_k_norm.weight"] = p + "attn.k_norm.weight"
        # gpt-oss normalises the FFN's input with post_attention_norm (no ffn_norm)
        m[b + ("post_attention_norm.weight" if config.gptoss else "ffn_norm.weight")] = p + "ffn_norm.weight"
        if config.n_expert > 0:
            m[b + "ffn_gate_inp.weight"] = p + "ffn.router.weight"
            for t in ("gate", "up", "down"):
                m[b + f"ffn_{t}_exps.weight"] = p + f"ffn.{t}_exps"
                if config.gptoss:
                    m[b + f"ffn_{t}_exps.bias"] = p + f"ffn.{t}_exps_b"
            if config.gptoss:
                m[b + "ffn_gate_inp.bias"] = p + "ffn.router.bias"
            if config.n_ff_shexp > 0:
                m[b + "ffn_gate_inp_shexp.weight"] = p + "ffn.shexp_gate"
                for t in ("gate", "up", "down"):
                    m[b + f"ffn_{t}_shexp.weight"] = p + f"ffn.shexp.{t}.weight"
            continue
        m[b + "ffn_gate.weight"] = p + "ffn.gate.weight"
        m[b + "ffn_up.weight"] = p + "ffn.up.weight"
        m[b + "ffn_down.weight"] = p + "ffn.down.weight"
        if config.gemma:
            m[b + "post_attention_norm.weight"] = p + "attn_post_norm.weight"
            m[b + "post_ffw_norm.weight"] = p + "ffn_post_norm.weight"
    return m


def _fused_parts(config: ModelConfig, reader: GGUFReader) -> dict[str, tuple[str, int, int]]:
    """phi3's fused tensors as llama.cpp reads them: separate name -> (fused name, first row, rows).
    attn_qkv.weight / .bias hold Q, K, V (when present; else attn_q/k/v are separate); ffn_up.weight
    holds 2 n_ff rows, the gate's first (ggml_swiglu's split)."""
    out: dict[str, tuple[str, int, int]] = {}
    if config.arch != "phi3":
        return out
    Q, KV, Fd = config.n_head * config.head_dim, config.n_head_kv * config.head_dim, config.n_ff
    for i in range(config.n_layer):
        b = f"blk.{i}."
        for kind in ("weight", "bias"):
            if b + f"attn_qkv.{kind}" in reader.tensors:
                for g, first, n in (("q", 0, Q), ("k", Q, KV), ("v", Q + KV, KV)):
                    out[b + f"attn_{g}.{kind}"] = (b + f"attn_qkv.{kind}", first, n)
        out[b + "ffn_gate.weight"] = (b + "ffn_up.weight", 0, Fd)
        out[b + "ffn_up.weight"] = (b + "ffn_up.weight", Fd, Fd)
    return out


def load_gguf(path: str | Path, dtype: torch.dtype = torch.float32):
    """Reads a GGUF model, dequantising every tensor. Returns (Transformer, ModelConfig, metadata)."""
    reader = GGUFReader(path)
    config = config_from_gguf(reader)
    if config.arch in ("qwen3", "gemma3", "qwen3moe") and not config.qk_norm:
        raise GGUFError(f"{reader.path}: {config.arch} model without blk.0.attn_q_norm.weight")
    model = Transformer(config, device="meta")
    model.to_empty(device="cpu")
    params = dict(model.named_parameters())
    names = _tensor_map(config)
    fused = _fused_parts(config, reader)
    missing = [g for g in names if g not in reader.tensors and g not in fused]

    def read(gname: str) -> np.ndarray:
        if gname not in fused:
            return reader.tensor_f32(gname)
        src, first, n = fused[gname]
        return reader.tensor_f32(src)[first:first + n]
    if missing:
        raise GGUFError(f"{reader.path}: missing tensors: {', '.join(missing[:8])}"
                        + (f" and {len(missing) - 8} more" if len(missing) > 8 else ""))
    with torch.no_grad():
        for gname, pname in names.items():
            p = params[pname]
            arr = read(gname)
            if p.dim() == 1 and arr.size == p.numel():  # e.g. ffn_gate_inp_shexp stored as [n_embd, 1]
                arr = arr.reshape(-1)
            if tuple(arr.shape) != tuple(p.shape):
                raise GGUFError(f"{reader.path}: tensor {gname} has numpy shape {list(arr.shape)}, "
                                f"expected {list(p.shape)} for this configuration")
            p.copy_(torch.from_numpy(arr))
    known = set(names) | {"rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"}
    known |= {src for src, _, _ in fused.values()}
    model.unused_tensors = [n for n in reader.tensors if n not in known]
    if model.unused_tensors:
        warnings.warn(f"{reader.path}: ignored tensors: {', '.join(model.unused_tensors[:8])}")
    model.to(dtype)
    model.eval()
    return model, config, dict(reader.metadata)


# Types llama.cpp expects for the standard tokenizer keys (plain values are stored with these).
_TOKENIZER_KEY_TYPES = {
    "tokenizer.ggml.model": (ValueType.STRING, None),
    "tokenizer.ggml.pre": (ValueType.STRING, None),
    "tokenizer.ggml.tokens": (ValueType.ARRAY, ValueType.STRING),
    "tokenizer.ggml.scores": (ValueType.ARRAY, ValueType.FLOAT32),
    "tokenizer.ggml.token_type": (ValueType.ARRAY, ValueType.INT32),
    "tokenizer.ggml.merges": (ValueType.ARRAY, ValueType.STRING),
    "tokenizer.ggml.bos_token_id": (ValueType.UINT32, None),
    "tokenizer.ggml.eos_token_id": (ValueType.UINT32, None),
    "tokenizer.ggml.unknown_token_id": (ValueType.UINT32, None),
    "tokenizer.ggml.padding_token_id": (ValueType.UINT32, None),
    "tokenizer.ggml.seperator_token_id": (ValueType.UINT32, None),
    "tokenizer.ggml.eot_token_id": (ValueType.UINT32, None),
    "tokenizer.ggml.add_bos_token": (ValueType.BOOL, None),
    "tokenizer.ggml.add_eos_token": (ValueType.BOOL, None),
    "tokenizer.ggml.add_space_prefix": (ValueType.BOOL, None),
    "tokenizer.chat_template": (ValueType.STRING, None),
}

# dtype option -> (matrix type, general.file_type of llama.cpp's llama_ftype enum)
_SAVE_TYPES = {
    "f32": (GGMLType.F32, 0),   # LLAMA_FTYPE_ALL_F32
    "f16": (GGMLType.F16, 1),   # LLAMA_FTYPE_MOSTLY_F16
    "q8_0": (GGMLType.Q8_0, 7),  # LLAMA_FTYPE_MOSTLY_Q8_0
    "bf16": (GGMLType.BF16, 32),  # LLAMA_FTYPE_MOSTLY_BF16
}


def save_gguf(model: Transformer, config: ModelConfig, path: str | Path, tokenizer_metadata: dict,
              dtype: str = "f32", name: str = "kvec", extra_metadata: Optional[dict] = None) -> None:
    """Writes the model as an ordinary GGUF file of its architecture.

    dtype: "f32", "f16", "bf16" or "q8_0" for the matrices (token_embd, output, attention and
    FFN weights); norms, biases and rope_freqs stay F32 as in llama.cpp's files. A matrix whose
    rows do not fit the Q8_0 block size (32) is written as F16.
    tokenizer_metadata: tokenizer keys (plain values or GGUFValue); standard tokenizer keys get
    the types llama.cpp expects. extra_metadata: more keys (same rules).
    """
    if dtype not in _SAVE_TYPES:
        raise ValueError(f"dtype must be one of {', '.join(_SAVE_TYPES)}, got '{dtype}'")
    if config.arch in ("phi3", "gpt-oss"):  # their fused tensors / YaRN and sinks are read, not written here
        raise ValueError(f"save_gguf does not write {config.arch} files (kvec gen-model --arch {config.arch} does)")
    mat_type, file_type = _SAVE_TYPES[dtype]
    w = GGUFWriter(path)
    md = model_metadata(config)
    md["general.name"] = GGUFValue(ValueType.STRING, name)
    md["general.file_type"] = GGUFValue(ValueType.UINT32, file_type)
    if mat_type == GGMLType.Q8_0:
        md["general.quantization_version"] = GGUFValue(ValueType.UINT32, 2)
    for src in (tokenizer_metadata or {}), (extra_metadata or {}):
        for k, v in src.items():
            if k in md:
                raise ValueError(f"metadata key '{k}' is written by save_gguf itself")
            if not isinstance(v, GGUFValue) and k in _TOKENIZER_KEY_TYPES:
                vt, et = _TOKENIZER_KEY_TYPES[k]
                v = infer_value(v, vt, et)
            md[k] = infer_value(v)
    for k, v in md.items():
        w.add(k, v)

    state = model.state_dict()
    for gname, pname in _tensor_map(config).items():
        t = state[pname].detach().to(torch.float32).cpu().numpy()
        tt = GGMLType.F32 if t.ndim == 1 or gname.endswith("ffn_gate_inp.weight") else mat_type
        if tt == GGMLType.Q8_0 and t.shape[-1] % TYPE_TRAITS[GGMLType.Q8_0].block_elems != 0:
            tt = GGMLType.F16
        w.add_tensor(gname, t, tt)
    if config.rope_freqs is not None:
        w.add_tensor("rope_freqs.weight", np.asarray(config.rope_freqs, dtype=np.float32), GGMLType.F32)
    w.write()


# =============================================================================================
# Convenience: logits, greedy generation, attention statistics


def _as_tokens(tokens) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(tokens, dtype=np.int64) if not isinstance(tokens, torch.Tensor) else tokens)
    if t.dim() == 1:
        t = t[None]
    return t.long()


@torch.no_grad()
def logits(model: Transformer, tokens, kv_visible=None) -> np.ndarray:
    """Logits [T, n_vocab] (float32 numpy) of one token sequence."""
    model.eval()
    return model(_as_tokens(tokens), kv_visible=kv_visible)[0].float().numpy()


@torch.no_grad()
def generate(model: Transformer, tokens, n_new: int, eos_id: Optional[int] = None) -> list:
    """Greedy continuation: the n_new next token ids (fewer if eos_id is produced; it is included)."""
    model.eval()
    if n_new < 0:
        raise ValueError("n_new must be >= 0")
    cache = KVCache(model.config.n_layer)
    out: list = []
    x = _as_tokens(tokens)
    for _ in range(n_new):
        lg = model(x, cache=cache)[0, -1]
        nxt = int(torch.argmax(lg))  # first maximum on ties
        out.append(nxt)
        if eos_id is not None and nxt == eos_id:
            break
        x = torch.tensor([[nxt]], dtype=torch.long)
    return out


@torch.no_grad()
def attention_stats(model: Transformer, tokens, window: int, kv_visible=None) -> dict:
    """Attention-probability statistics per layer and query head, for one sequence of T tokens.

    Returns float64 numpy arrays [n_layer, n_head, T]:
      "h2o":    column sums of the causal attention probabilities over all T queries (H2O score);
      "window": mean over the last min(window, T) queries of their probability rows (SnapKV
                window score before pooling and group reduction);
      "last":   the probability row of the last query (TOVA score).
    kv_visible (optional) applies an eviction mask, as in forward.
    """
    model.eval()
    if window <= 0:
        raise ValueError("window must be positive")
    x = _as_tokens(tokens)
    if x.shape[0] != 1:
        raise ValueError("attention_stats takes a single sequence")
    c = model.config
    T = x.shape[1]
    stats = [AttnStats(1, c.n_head, T, window) for _ in range(c.n_layer)]
    model(x, kv_visible=kv_visible, stats=stats)
    w = stats[0].window
    return {
        "h2o": torch.stack([s.col_sum[0] for s in stats]).numpy(),
        "window": torch.stack([s.win_sum[0] / w for s in stats]).numpy(),
        "last": torch.stack([s.last[0] for s in stats]).numpy(),
    }
