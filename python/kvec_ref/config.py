"""Model hyper-parameters: `ModelConfig`, reading them from GGUF metadata and writing them back.
numpy only (no torch), so that `kvec_ref.cli info` starts fast.

GGUF keys (llama.cpp's names, `{arch}` = general.architecture): block_count, embedding_length,
feed_forward_length, attention.head_count, attention.head_count_kv, attention.key_length
(head dim; default n_embd / n_head), attention.value_length, rope.freq_base,
rope.dimension_count, attention.layer_norm_rms_epsilon, context_length, rope.scaling.type +
rope.scaling.factor (linear; the older rope.scale_linear is read too), vocab_size; the vocabulary
size is the number of rows of token_embd.weight; the tensor `rope_freqs.weight` carries Llama 3.1
"llama3" per-frequency divisors.

gemma3 (as llama.cpp reads it): attention.sliding_window (0 / absent: every layer global),
attention.sliding_window_pattern (period n: layer l is a sliding-window layer iff l % n < n - 1,
default 6; or a per-layer array), rope.freq_base_swa (default 10000; those layers rotate without
the linear scaling), final_logit_softcapping (optional); 62-layer models scale attention by
1 / sqrt(n_embd / n_head), all others by 1 / sqrt(head_dim).

Mixture of experts (as llama.cpp reads it): qwen3moe, qwen2moe, and llama with expert_count > 0
(Mixtral): expert_count, expert_used_count, expert_feed_forward_length (default
feed_forward_length / expert_used_count; llama: feed_forward_length), qwen2moe's
expert_shared_feed_forward_length (default feed_forward_length); the selected experts' weights
are renormalised for qwen3moe and llama, not for qwen2moe.

gemma2 (as llama.cpp reads it): attention.sliding_window (default 4096) on the layers of
attention.sliding_window_pattern (default period 2: the even layers), which rotate with
rope.freq_base_swa (default rope.freq_base) and the global scaling; attn_logit_softcapping
(default 50) and final_logit_softcapping (default 30), both always applied; 46-layer models scale
attention by 1 / sqrt(n_embd / n_head).

phi3 (as llama.cpp reads it): attention.sliding_window is ignored (llama.cpp switches Phi's
sliding window off); LongRoPE: the tensors rope_factors_long / rope_factors_short (divisors
[rope_dim / 2]), the long ones when the context exceeds rope.scaling.original_context_length
(default context_length), and rope.scaling.attn_factor multiplying the rotated elements of q and
k (ggml's mscale; read for every architecture). The context the reference runs with is
`n_ctx` (default context_length; the C++ side uses its session's context).

gpt-oss (as llama.cpp reads it, src/models/openai-moe.cpp): attention.sliding_window (required)
on the even layers (pattern period 2 unless attention.sliding_window_pattern says otherwise),
which rotate with rope.freq_base_swa (default rope.freq_base) and the global scaling; YaRN RoPE
(rope.scaling.type yarn: freq_scale 1 / rope.scaling.factor, original context
rope.scaling.original_context_length, llama.cpp's ext_factor 1, beta_fast 32, beta_slow 1);
attn_sinks (one logit per query head in the softmax's denominator); biases on q/k/v (optional),
the attention output, the router and every expert; routing by the top expert_used_count logits
with a softmax over those logits; the clamped SwiGLU (alpha 1.702, limit 7); post_attention_norm
is the FFN's input norm. expert_count, expert_used_count, expert_feed_forward_length (required).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Optional

import numpy as np

from .gguf import GGUFError, GGUFReader, GGUFValue, ValueType

SUPPORTED_ARCHS = ("llama", "qwen2", "qwen3", "gemma3", "gemma2", "phi3", "qwen3moe", "qwen2moe", "gpt-oss")
_NEOX_ARCHS = ("qwen2", "qwen3", "gemma3", "gemma2", "phi3", "qwen3moe", "qwen2moe", "gpt-oss")
_MOE_ARCHS = ("qwen3moe", "qwen2moe", "gpt-oss")


# =============================================================================================
# Configuration


@dataclass
class ModelConfig:
    """Hyper-parameters. Zero / None fields take their default in __post_init__."""

    arch: str = "llama"
    n_vocab: int = 256
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 0              # 0 -> n_head (no GQA)
    head_dim: int = 0               # 0 -> n_embd // n_head
    n_ff: int = 0                   # 0 -> 4 * n_embd
    rope_theta: float = 10000.0     # rope.freq_base
    rope_dim: int = 0               # rope.dimension_count; 0 -> head_dim
    rope_scaling_type: str = "none"  # "none" | "linear" | "yarn"
    rope_scaling_factor: float = 1.0
    rope_freqs: Optional[list] = None  # llama3 per-frequency divisors, rope_dim / 2 values
    norm_eps: float = 1e-5
    context_length: int = 2048
    qkv_bias: Optional[bool] = None  # None -> True for qwen2
    qk_norm: Optional[bool] = None   # None -> True for qwen3
    tied_output: bool = False
    # gemma3
    sliding_window: int = 0          # 0: no sliding-window layers
    swa_layers: Optional[list] = None  # [n_layer] bools; None -> pattern of 6 when sliding_window > 0
    rope_theta_swa: float = 10000.0  # RoPE base of the sliding-window layers (no scaling)
    attn_scale: float = 0.0          # 0 -> 1 / sqrt(head_dim) (gemma3 27B: 1 / sqrt(n_embd / n_head))
    final_logit_softcap: float = 0.0  # 0: none
    # mixture of experts (qwen3moe, qwen2moe; llama with n_expert > 0)
    n_expert: int = 0                # 0: a dense FFN
    n_expert_used: int = 0
    n_ff_exp: int = 0                # 0 -> n_ff
    n_ff_shexp: int = 0              # qwen2moe's shared expert; 0 -> n_ff (qwen2moe), none otherwise
    expert_weights_norm: Optional[bool] = None  # None -> True except for qwen2moe
    # gemma2
    attn_softcap: float = 0.0        # attention logits cap * tanh(s / cap) before the softmax; 0: none
    rope_scale_swa: float = 1.0      # frequency scale of the sliding-window layers (gemma2: the global one)
    # phi3 (LongRoPE)
    rope_long: Optional[list] = None   # rope_dim / 2 divisors used when n_ctx > n_ctx_orig
    rope_short: Optional[list] = None  # ... otherwise
    n_ctx_orig: int = 0              # 0 -> context_length
    rope_attn_factor: float = 1.0    # rope.scaling.attn_factor
    n_ctx: int = 0                   # context the model runs with; 0 -> context_length
    # execution (not stored in GGUF)
    attn_chunk: int = 256           # queries per attention block (bounds the score buffer)
    attn_checkpoint: bool = True    # recompute attention blocks in backward (saves memory)

    def __post_init__(self) -> None:
        if self.arch not in SUPPORTED_ARCHS:
            raise ValueError(f"unsupported architecture '{self.arch}' (supported: {', '.join(SUPPORTED_ARCHS)})")
        if self.n_head_kv == 0:
            self.n_head_kv = self.n_head
        if self.head_dim == 0:
            if self.n_head <= 0 or self.n_embd % self.n_head != 0:
                raise ValueError(f"n_embd {self.n_embd} is not a multiple of n_head {self.n_head}")
            self.head_dim = self.n_embd // self.n_head
        if self.n_ff == 0:
            self.n_ff = 4 * self.n_embd
        if self.rope_dim == 0:
            self.rope_dim = self.head_dim
        if self.qkv_bias is None:
            self.qkv_bias = self.arch in ("qwen2", "qwen2moe", "gpt-oss")
        if self.qk_norm is None:
            self.qk_norm = self.arch in ("qwen3", "gemma3", "qwen3moe")
        if self.arch in _MOE_ARCHS and self.n_expert <= 0:
            raise ValueError(f"{self.arch} needs n_expert > 0")
        if self.n_expert > 0:
            if self.arch not in ("llama",) + _MOE_ARCHS:
                raise ValueError(f"a {self.arch} model has no experts")
            if not 0 < self.n_expert_used <= self.n_expert:
                raise ValueError(f"n_expert_used {self.n_expert_used} must be in [1, n_expert = {self.n_expert}]")
            if self.n_ff_exp == 0:
                self.n_ff_exp = self.n_ff
            if self.arch == "qwen2moe" and self.n_ff_shexp == 0:
                self.n_ff_shexp = self.n_ff
            if self.expert_weights_norm is None:
                self.expert_weights_norm = self.arch not in ("qwen2moe", "gpt-oss")
        if self.attn_scale == 0.0:
            self.attn_scale = 1.0 / math.sqrt(self.head_dim)
        if self.n_ctx_orig == 0:
            self.n_ctx_orig = self.context_length
        if self.n_ctx == 0:
            self.n_ctx = self.context_length
        if self.sliding_window > 0 and self.swa_layers is None:
            period = 2 if self.arch in ("gemma2", "gpt-oss") else 6
            self.swa_layers = [l % period < period - 1 for l in range(self.n_layer)]
        if self.sliding_window <= 0:
            self.swa_layers = None
        if self.swa_layers is not None:
            self.swa_layers = [bool(x) for x in self.swa_layers]
            if len(self.swa_layers) != self.n_layer:
                raise ValueError(f"swa_layers has {len(self.swa_layers)} values for {self.n_layer} layers")
        for name in ("n_vocab", "n_embd", "n_layer", "n_head", "n_head_kv", "head_dim", "n_ff", "attn_chunk"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"{name} must be positive, is {getattr(self, name)}")
        if self.n_head % self.n_head_kv != 0:
            raise ValueError(f"n_head {self.n_head} is not a multiple of n_head_kv {self.n_head_kv}")
        if self.head_dim % 2 != 0 or self.rope_dim % 2 != 0 or self.rope_dim > self.head_dim:
            raise ValueError(f"rope_dim {self.rope_dim} must be even and at most head_dim {self.head_dim} (even)")
        if self.rope_scaling_type not in ("none", "linear", "yarn"):
            raise ValueError(f"unsupported rope scaling type '{self.rope_scaling_type}' (supported: none, linear, yarn)")
        if not self.rope_scaling_factor > 0:
            raise ValueError(f"rope scaling factor must be positive, is {self.rope_scaling_factor}")
        if not self.rope_theta > 0:
            raise ValueError(f"rope_theta must be positive, is {self.rope_theta}")
        if not self.norm_eps > 0:
            raise ValueError(f"norm_eps must be positive, is {self.norm_eps}")
        if self.rope_freqs is not None:
            self.rope_freqs = [float(f) for f in np.asarray(self.rope_freqs, dtype=np.float64).reshape(-1)]
            if len(self.rope_freqs) != self.rope_dim // 2:
                raise ValueError(f"rope_freqs has {len(self.rope_freqs)} values, expected rope_dim / 2 = {self.rope_dim // 2}")
            if not all(f > 0 and math.isfinite(f) for f in self.rope_freqs):
                raise ValueError("rope_freqs values must be positive and finite")

    @property
    def rope_neox(self) -> bool:
        """True: rotate (i, i + rope_dim/2) (NEOX); False: rotate (2i, 2i + 1) (NORM)."""
        return self.arch in _NEOX_ARCHS

    @property
    def gemma(self) -> bool:
        """gemma3 and gemma2: embedding scaled by sqrt(n_embd), post-norms, GELU-tanh FFN."""
        return self.arch in ("gemma3", "gemma2")

    @property
    def rope_factors(self) -> Optional[list]:
        """Per-frequency divisors of the global layers: rope_freqs, else LongRoPE's long factors
        when n_ctx > n_ctx_orig, else its short ones (llama.cpp's get_rope_factors)."""
        if self.rope_freqs is not None:
            return self.rope_freqs
        return self.rope_long if self.n_ctx > self.n_ctx_orig else self.rope_short

    def is_swa(self, layer: int) -> bool:
        return self.swa_layers is not None and self.swa_layers[layer]

    @property
    def n_rep(self) -> int:
        """Query heads per KV head (GQA group size)."""
        return self.n_head // self.n_head_kv

    @property
    def freq_scale(self) -> float:
        return 1.0 / self.rope_scaling_factor if self.rope_scaling_type in ("linear", "yarn") else 1.0

    @property
    def gptoss(self) -> bool:
        """gpt-oss: sinks, the attention output's and the experts' biases, top-k-logit routing
        with a softmax over the chosen, the clamped SwiGLU, post_attention_norm as the FFN norm."""
        return self.arch == "gpt-oss"

    def to_dict(self) -> dict:
        return asdict(self)


def llama3_rope_freqs(rope_dim: int, theta: float, factor: float, low_freq_factor: float,
                      high_freq_factor: float, original_context: int) -> list:
    """The `rope_freqs` divisors of Llama 3.1 "llama3" scaling, as llama.cpp's converter writes
    them: 1 for high frequencies (wavelength < original_context / high_freq_factor), `factor` for
    low ones (wavelength > original_context / low_freq_factor), and in between
    1 / ((1 - s) / factor + s) with s = (original_context / wavelength - low) / (high - low).
    """
    out = []
    low_wl = original_context / low_freq_factor
    high_wl = original_context / high_freq_factor
    for i in range(rope_dim // 2):
        freq = theta ** (-2.0 * i / rope_dim)
        wl = 2 * math.pi / freq
        if wl < high_wl:
            out.append(1.0)
        elif wl > low_wl:
            out.append(float(factor))
        else:
            s = (original_context / wl - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append(1.0 / ((1 - s) / factor + s))
    return out



def config_from_gguf(reader: GGUFReader) -> ModelConfig:
    """Hyper-parameters from GGUF metadata (keys `{arch}.*`) and tensor shapes."""
    md = reader.metadata
    path = reader.path
    arch = md.get("general.architecture")
    if arch is None:
        raise GGUFError(f"{path}: missing general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise GGUFError(f"{path}: unsupported architecture '{arch}' (supported: {', '.join(SUPPORTED_ARCHS)})")

    def key(name: str, default: Any = None, required: bool = False):
        k = f"{arch}.{name}"
        if k in md:
            v = md[k]
            if isinstance(v, np.ndarray):
                # per-layer arrays (e.g. head_count_kv) must be uniform here
                if v.size == 0 or (v != v.flat[0]).any():
                    raise GGUFError(f"{path}: {k} varies per layer ({list(v)}), which is not supported")
                v = v.flat[0].item()
            return v
        if required:
            raise GGUFError(f"{path}: missing metadata key {k}")
        return default

    if "token_embd.weight" not in reader.tensors:
        raise GGUFError(f"{path}: missing tensor token_embd.weight")
    emb = reader.tensors["token_embd.weight"]
    n_embd = int(key("embedding_length", required=True))
    n_head = int(key("attention.head_count", required=True))
    if len(emb.ne) != 2 or emb.ne[0] != n_embd:
        raise GGUFError(f"{path}: token_embd.weight has dims {list(emb.ne)}, expected [{n_embd}, n_vocab]")
    n_vocab = int(emb.ne[1])
    if key("vocab_size") is not None and int(key("vocab_size")) != n_vocab:
        raise GGUFError(f"{path}: {arch}.vocab_size {key('vocab_size')} differs from token_embd rows {n_vocab}")
    head_dim = int(key("attention.key_length", 0) or (n_embd // n_head if n_head else 0))
    v_len = key("attention.value_length")
    if v_len is not None and int(v_len) != head_dim:
        raise GGUFError(f"{path}: key_length {head_dim} != value_length {v_len} is not supported")

    scaling = key("rope.scaling.type", "none") or "none"
    factor = float(key("rope.scaling.factor", 0.0) or 0.0)
    if scaling == "none" and key("rope.scale_linear") is not None:  # older key for linear scaling
        scaling, factor = "linear", float(key("rope.scale_linear"))
    if scaling == "linear" and factor == 0.0:
        factor = 1.0
    if scaling == "longrope" and arch == "phi3":  # LongRoPE: the factor tensors, no frequency scale
        scaling = "none"
    if scaling == "yarn" and factor == 0.0:
        factor = 1.0
    if scaling not in ("none", "linear", "yarn"):
        raise GGUFError(f"{path}: rope scaling type '{scaling}' is not supported (none, linear, yarn)")

    rope_freqs = None
    if "rope_freqs.weight" in reader.tensors:
        rope_freqs = reader.tensor_f32("rope_freqs.weight").reshape(-1).astype(np.float64).tolist()

    gemma: dict = {}

    def alternating_swa_layers() -> list:
        # attention.sliding_window_pattern: per-layer flags, or a period (default 2: the even layers).
        n_layer = int(key("block_count", required=True))
        pat = md.get(f"{arch}.attention.sliding_window_pattern")
        if isinstance(pat, np.ndarray):
            return [bool(x) for x in pat.reshape(-1)]
        n = 2 if pat is None else int(pat)
        return [n == 0 or l % n < n - 1 for l in range(n_layer)]

    if arch == "gemma2":
        n_layer = int(key("block_count", required=True))
        gemma["sliding_window"] = int(key("attention.sliding_window", 4096))
        gemma["swa_layers"] = alternating_swa_layers()
        gemma["rope_theta_swa"] = float(key("rope.freq_base_swa", key("rope.freq_base", 10000.0)))
        gemma["rope_scale_swa"] = (1.0 / factor) if scaling == "linear" and factor else 1.0
        gemma["attn_softcap"] = float(key("attn_logit_softcapping", 50.0))
        gemma["final_logit_softcap"] = float(key("final_logit_softcapping", 30.0))
        if n_layer == 46:
            gemma["attn_scale"] = 1.0 / math.sqrt(n_embd // n_head)
    if arch == "gpt-oss":
        gemma["sliding_window"] = int(key("attention.sliding_window", required=True))
        gemma["swa_layers"] = alternating_swa_layers()
        gemma["rope_theta_swa"] = float(key("rope.freq_base_swa", key("rope.freq_base", 10000.0)))
        gemma["rope_scale_swa"] = (1.0 / factor) if scaling in ("linear", "yarn") and factor else 1.0
    if arch == "phi3":
        for name, field in (("rope_factors_long.weight", "rope_long"), ("rope_factors_short.weight", "rope_short")):
            if name in reader.tensors:
                gemma[field] = reader.tensor_f32(name).reshape(-1).astype(np.float64).tolist()
    if key("rope.scaling.original_context_length") is not None:
        gemma["n_ctx_orig"] = int(key("rope.scaling.original_context_length"))
    gemma["rope_attn_factor"] = float(key("rope.scaling.attn_factor", 1.0))
    if arch == "gemma3":
        window = int(key("attention.sliding_window", 0) or 0)
        gemma["sliding_window"] = window
        if window > 0:
            pat = md.get("gemma3.attention.sliding_window_pattern")
            n_layer = int(key("block_count", required=True))
            if isinstance(pat, np.ndarray):
                gemma["swa_layers"] = [bool(x) for x in pat.reshape(-1)]
            else:
                n = 6 if pat is None else int(pat)
                gemma["swa_layers"] = [n == 0 or l % n < n - 1 for l in range(n_layer)]
            gemma["rope_theta_swa"] = float(key("rope.freq_base_swa", 10000.0))
        gemma["final_logit_softcap"] = float(key("final_logit_softcapping", 0.0) or 0.0)
        if int(key("block_count", required=True)) == 62:
            gemma["attn_scale"] = 1.0 / math.sqrt(n_embd // n_head)

    moe: dict = {}
    n_expert = int(key("expert_count", 0) or 0)
    if arch in _MOE_ARCHS or (arch == "llama" and n_expert > 0):
        n_used = int(key("expert_used_count", required=True))
        n_ff = int(key("feed_forward_length", 0) or 0)
        n_ff_exp = (n_ff if arch == "llama" else int(key("expert_feed_forward_length", required=True)) if arch == "gpt-oss"
                    else int(key("expert_feed_forward_length", 0) or n_ff // max(n_used, 1)))
        moe = {"n_expert": n_expert, "n_expert_used": n_used, "n_ff_exp": n_ff_exp}
        if arch == "qwen2moe":
            moe["n_ff_shexp"] = int(key("expert_shared_feed_forward_length", 0) or n_ff)
    elif n_expert > 0:
        raise GGUFError(f"{path}: {arch}.expert_count = {n_expert}: a {arch} model has no experts")

    try:
        return ModelConfig(
            arch=arch,
            n_vocab=n_vocab,
            n_embd=n_embd,
            n_layer=int(key("block_count", required=True)),
            n_head=n_head,
            n_head_kv=int(key("attention.head_count_kv", n_head)),
            head_dim=head_dim,
            n_ff=int(key("feed_forward_length", required=not moe) or moe.get("n_ff_exp", 0)),
            rope_theta=float(key("rope.freq_base", 10000.0)),
            rope_dim=int(key("rope.dimension_count", head_dim)),
            rope_scaling_type=scaling,
            rope_scaling_factor=factor if scaling in ("linear", "yarn") else 1.0,
            rope_freqs=rope_freqs,
            norm_eps=float(key("attention.layer_norm_rms_epsilon", required=True)),
            context_length=int(key("context_length", 2048)),
            qkv_bias="blk.0.attn_q.bias" in reader.tensors or "blk.0.attn_qkv.bias" in reader.tensors,
            qk_norm="blk.0.attn_q_norm.weight" in reader.tensors,
            tied_output="output.weight" not in reader.tensors,
            **gemma,
            **moe,
        )
    except ValueError as e:
        raise GGUFError(f"{path}: {e}") from None



def model_metadata(config: ModelConfig) -> dict[str, GGUFValue]:
    """The architecture keys llama.cpp reads, with the types it expects."""
    a = config.arch
    u32 = lambda v: GGUFValue(ValueType.UINT32, int(v))  # noqa: E731
    f32 = lambda v: GGUFValue(ValueType.FLOAT32, float(v))  # noqa: E731
    md = {
        "general.architecture": GGUFValue(ValueType.STRING, a),
        f"{a}.vocab_size": u32(config.n_vocab),
        f"{a}.context_length": u32(config.context_length),
        f"{a}.embedding_length": u32(config.n_embd),
        f"{a}.block_count": u32(config.n_layer),
        f"{a}.feed_forward_length": u32(config.n_ff),
        f"{a}.attention.head_count": u32(config.n_head),
        f"{a}.attention.head_count_kv": u32(config.n_head_kv),
        f"{a}.attention.key_length": u32(config.head_dim),
        f"{a}.attention.value_length": u32(config.head_dim),
        f"{a}.attention.layer_norm_rms_epsilon": f32(config.norm_eps),
        f"{a}.rope.dimension_count": u32(config.rope_dim),
        f"{a}.rope.freq_base": f32(config.rope_theta),
    }
    if config.rope_scaling_type == "linear":
        md[f"{a}.rope.scaling.type"] = GGUFValue(ValueType.STRING, "linear")
        md[f"{a}.rope.scaling.factor"] = f32(config.rope_scaling_factor)
    if config.gemma and config.sliding_window > 0:
        md[f"{a}.attention.sliding_window"] = u32(config.sliding_window)
        md[f"{a}.attention.sliding_window_pattern"] = GGUFValue(ValueType.ARRAY, np.array(config.swa_layers, dtype=bool),
                                                               ValueType.BOOL)
        md[f"{a}.rope.freq_base_swa"] = f32(config.rope_theta_swa)
    if config.n_expert > 0:
        md[f"{a}.expert_count"] = u32(config.n_expert)
        md[f"{a}.expert_used_count"] = u32(config.n_expert_used)
        if a != "llama":
            md[f"{a}.expert_feed_forward_length"] = u32(config.n_ff_exp)
        if config.n_ff_shexp > 0:
            md[f"{a}.expert_shared_feed_forward_length"] = u32(config.n_ff_shexp)
    if config.gemma and config.final_logit_softcap > 0:
        md[f"{a}.final_logit_softcapping"] = f32(config.final_logit_softcap)
    if config.arch == "gemma2":
        md[f"{a}.attn_logit_softcapping"] = f32(config.attn_softcap)
    return md


