"""kvec_ref: independent PyTorch reference of kvec's model code, reading the same GGUF files.

Modules: gguf (GGUF reader/writer), dequant ((de)quantisation), config (ModelConfig and its GGUF
keys) -- numpy only; model (torch Transformer, load_gguf / save_gguf, attention_stats); cli.
Names are re-exported lazily, so `import kvec_ref.gguf` does not import torch.
"""

_MODEL_NAMES = {
    "ModelConfig", "Transformer", "KVCache", "AttnStats", "load_gguf", "save_gguf",
    "attention_stats", "generate", "logits", "config_from_gguf", "llama3_rope_freqs",
    "apply_rope", "rope_cos_sin", "rope_inv_freq", "check_kv_visible",
}

__all__ = sorted(_MODEL_NAMES | {"GGUFReader", "GGUFWriter", "GGUFError", "GGUFValue", "ValueType",
                                 "GGMLType", "dequantize", "quantize"})


def __getattr__(name):
    if name in ("ModelConfig", "config_from_gguf", "llama3_rope_freqs"):
        from . import config
        return getattr(config, name)
    if name in _MODEL_NAMES:
        from . import model
        return getattr(model, name)
    if name in ("GGUFReader", "GGUFWriter", "GGUFError", "GGUFValue", "ValueType"):
        from . import gguf
        return getattr(gguf, name)
    if name == "GGMLType":
        from .ggml_types import GGMLType
        return GGMLType
    if name in ("dequantize", "quantize"):
        from . import dequant
        return getattr(dequant, name)
    raise AttributeError(f"module 'kvec_ref' has no attribute '{name}'")
