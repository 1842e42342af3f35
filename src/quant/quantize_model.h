// Whole-model quantisation: reads a GGUF model, converts its weight matrices to a target type
// (optionally with a llama.cpp-style "_M" mix) and writes a new GGUF file.
//
// Which tensors change (after llama.cpp's llama-quantize):
//   - 2-D (and 3-D/4-D) tensors whose name ends in "weight", except norms ("_norm.weight"),
//     MoE routers ("ffn_gate_inp.weight") and position / token-type embeddings, go to the
//     target type. If ne[0] is not a multiple of the target's block size, a fallback is used
//     (q2_K/q3_K -> q4_0, q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0, iq4_xs -> iq4_nl; then f16).
//   - Unless `pure`: output.weight (or token_embd.weight when the model has no output.weight,
//     i.e. tied embeddings) goes to q6_K for every quantised target except q8_0 (q8_0 if ne[0]
//     is not a multiple of 256).
//   - With `mixed` (q3_K_M / q4_K_M / q5_K_M): attn_v.weight and ffn_down.weight of some layers
//     get more bits (q4_K_M / q5_K_M: q6_K on the first and last eighth of the layers and every
//     third layer between; q3_K_M: see quantize_model.cpp).
//   - 1-D tensors (norms, biases) are stored as f32; other tensors are copied unchanged.
// Metadata is copied; general.file_type is set (llama_ftype numbering) and, for quantised
// targets, general.quantization_version = 2.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/ggml_type.h"
#include "gguf/gguf.h"

namespace kvec::quant {

struct QuantizeOptions {
    bool mixed = false;             // "_M" mix; valid for q3_K, q4_K, q5_K targets
    bool pure = false;              // every eligible weight gets exactly the target type
    bool allow_requantize = false;  // accept inputs whose weights are already quantised
    int n_threads = 0;              // OpenMP threads for the conversion; 0: OpenMP's default
    std::function<void(const std::string&)> log;  // one line per tensor; empty: silent
};

// A user-facing target name, as llama-quantize spells them (case-insensitive): "f32", "f16",
// "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k_s", "q3_k_m", "q4_k_s",
// "q4_k_m", "q5_k_s", "q5_k_m", "q6_k"; "q3_k", "q4_k", "q5_k" alone mean the "_m" mix, as in
// llama.cpp. std::nullopt if unknown.
struct QuantizeTarget {
    GgmlType type;
    bool mixed;
};
std::optional<QuantizeTarget> parse_quantize_target(std::string_view name);

// llama.cpp's general.file_type (llama_ftype) for a target: e.g. q4_K mixed -> 15 (Q4_K_M).
uint32_t llama_file_type(GgmlType type, bool mixed);

// The type chosen for each tensor of `src` (in file order), without converting anything.
struct TensorPlan {
    std::string name;
    GgmlType from;
    GgmlType to;
};
std::vector<TensorPlan> plan_quantization(const gguf::File& src, GgmlType type,
                                          const QuantizeOptions& opts = {});

// Quantises the model at `in` into `out` (written atomically; `out` must not be `in`).
// Throws kvec::Error on a bad input file, an unsupported target, or a write failure.
void quantize_gguf(const std::string& in, const std::string& out, GgmlType type,
                   const QuantizeOptions& opts = {});

}  // namespace kvec::quant
