// Random-weight models of any supported architecture and tensor type, written with the project's
// GGUF writer. Used by the tests (parity with the Python reference, engine tests) and by
// `kvec gen-model` (e.g. the exact TinyLlama shape for speed comparisons with llama.cpp).
//
// Weights are drawn with a gain of about 1 per projection (std 1/sqrt(n_in)), norms near 1, so
// every layer contributes and logits have a standard deviation of about 3: non-degenerate
// distributions, stable greedy choices. The draw depends only on the seed and the tensor name.
// The tokenizer (tokenizer.* metadata) is copied from a vocabulary GGUF; a smaller --vocab
// truncates it (control and byte tokens come first in SentencePiece vocabularies, so the
// truncated tokenizer still encodes any text through byte fallback).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/ggml_type.h"

namespace kvec {

struct RandomModelSpec {
    std::string arch =
        "llama";  // llama | qwen2 | qwen3 | gemma3 | gemma2 | phi3 | qwen3moe | qwen2moe | gpt-oss
    std::string name;            // general.name ("" -> "kvec-random-<arch>")
    int n_layer = 2;
    int n_embd = 256;
    int n_head = 4;
    int n_head_kv = 2;
    int n_ff = 512;
    int head_dim = 0;            // 0: n_embd / n_head
    int n_vocab = 0;             // 0: the vocabulary file's size (required without one)
    int n_ctx = 2048;
    float rope_base = 10000.0f;
    std::string rope_scaling = "none";  // none | linear | llama3 | yarn
    float rope_factor = 0.0f;           // 0: 4 for linear, 8 for llama3, 32 for yarn
    // yarn: rope.scaling.original_context_length is n_ctx_orig (0: n_ctx / factor).
    float rms_eps = 1e-5f;
    bool tied = false;           // no output.weight: the output shares token_embd
    // gemma3: sliding window (0: none), one global layer every swa_pattern layers (il % n < n - 1
    // are sliding-window layers), the sliding-window layers' RoPE base.
    int sliding_window = 0;
    int swa_pattern = 6;
    float rope_base_swa = 10000.0f;
    // Mixture of experts (qwen3moe, qwen2moe; llama with n_expert > 0: Mixtral): n_expert experts
    // (qwen*moe: 0 -> 8) of which n_expert_used (0 -> 2) run per token, each a SwiGLU of size
    // n_ff_exp (0 -> n_ff; llama: always n_ff, as llama.cpp reads it); qwen2moe's shared expert
    // of size n_ff_shexp (0 -> n_ff). The routers are F32, as llama.cpp's converter and
    // llama-quantize keep them; the experts' 3-D tensors take `type`.
    int n_expert = 0;
    int n_expert_used = 0;
    int n_ff_exp = 0;
    int n_ff_shexp = 0;
    // gemma2: attention and final logit soft-capping (attn_logit_softcapping,
    // final_logit_softcapping; Gemma 2 uses 50 and 30); its sliding window (sliding_window above,
    // 0: 4096) covers every other layer (il % 2 == 0), as llama.cpp reads it.
    float attn_softcap = 50.0f;
    float final_softcap = 30.0f;
    // phi3: rotated dimensions (0: head_dim; Phi-4-mini rotates 96 of 128), LongRoPE factors
    // (rope_factors_long/short.weight, and rope.scaling.attn_factor as the converter computes it)
    // with original context n_ctx_orig (0: none), Q/K/V fused in attn_qkv.weight (or separate,
    // which llama.cpp also reads); gate and up are always fused in ffn_up.weight [2 n_ff rows].
    // sliding_window is written as Phi-3's converter writes it (llama.cpp switches it off).
    int n_rot = 0;
    int n_ctx_orig = 0;
    bool fused_qkv = true;
    // gpt-oss (as its converter writes it): separate Q/K/V with biases, attn_output.bias, the
    // sinks attn_sinks.weight [n_head], post_attention_norm as the FFN's norm, biases on the
    // router and every expert (2-D [n_ff_exp | n_embd, n_expert], F32), YaRN RoPE; sliding-window
    // layers il % 2 == 0 with window sliding_window (0: 128).
    GgmlType type = GgmlType::F32;  // type of every weight matrix (vectors stay F32)
    // The experts' 3-D tensors' type (gpt-oss files hold MXFP4 experts); none: `type`.
    std::optional<GgmlType> expert_type;
    uint64_t seed = 1;
    // Vocabulary GGUF whose tokenizer.* keys are copied; "" = default_vocab_path(); "none" = none.
    std::string vocab_from;
};

// data/tokenizer-vectors/ggml-vocab-llama-spm.gguf of the source tree.
std::string default_vocab_path();

// Named shapes: "tinyllama-1.1b", "gemma3-test" (small, window 32), "gemma3-4b", "gemma2-test"
// (small, window 32, soft-capping that acts), "phi3-test" (small, LongRoPE, partial rotary),
// "phi4-mini", "qwen3moe-test", "qwen2moe-test", "mixtral-test" (small MoE shapes),
// "qwen3-30b-a3b" (full size), "gpt-oss-test" (small: 2 layers, sinks, YaRN, 8 experts),
// "gpt-oss-20b" (full size, MXFP4 experts). Throws kvec::Error listing the known names.
RandomModelSpec random_model_preset(std::string_view name);
std::vector<std::string> random_model_presets();

// Checks the spec (throws kvec::Error naming the problem) and writes the model to path.
void write_random_model(const RandomModelSpec& spec, const std::string& path);

// The llama3 RoPE frequency factors (as llama.cpp's converter computes them for rope_freqs.weight):
// [n_rot / 2], for scaling factor `factor`, low/high frequency factors 1 and 4 and an original
// context of 8192.
std::vector<float> llama3_rope_factors(int n_rot, float freq_base, float factor);

// Synthetic LongRoPE divisors [n_rot / 2] (Phi-3's are fitted; these have their shape): 1 for the
// highest frequency rising geometrically to `top` for the lowest.
std::vector<float> longrope_factors(int n_rot, float top);

}  // namespace kvec
