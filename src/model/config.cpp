#include "model/config.h"

#include <algorithm>
#include <cmath>

#include "gguf/gguf.h"
#include "util/error.h"

namespace kvec {

namespace {

int positive_int(const gguf::File& f, const std::string& key, int64_t max = 1 << 24) {
    const gguf::Value* v = f.find(key);
    if (v == nullptr) fail("'{}': missing metadata key '{}'", f.path(), key);
    if (v->type == gguf::ValueType::ARRAY) {
        fail("'{}': metadata key '{}' is an array (per-layer values are not supported)", f.path(), key);
    }
    const int64_t x = static_cast<int64_t>(f.get_uint(key));
    if (x <= 0 || x > max) fail("'{}': metadata key '{}' = {} is out of range", f.path(), key, x);
    return static_cast<int>(x);
}

int optional_int(const gguf::File& f, const std::string& key, int fallback) {
    return f.has(key) ? positive_int(f, key) : fallback;
}

// The sliding-window layers (as llama.cpp's load_swa_pattern): {arch}.attention.sliding_window_pattern
// as a per-layer array, or a period n (layer l slides iff n == 0 or l % n < n - 1; default
// `period`).
void read_swa_layers(const gguf::File& f, ModelConfig& c, int64_t period) {
    const std::string k_pattern = c.arch_name + ".attention.sliding_window_pattern";
    c.swa_layers.assign(static_cast<size_t>(c.n_layer), 0);
    const gguf::Value* pattern = f.find(k_pattern);
    if (pattern != nullptr && pattern->type == gguf::ValueType::ARRAY) {
        if (pattern->ints.size() != static_cast<size_t>(c.n_layer)) {
            fail("'{}': {} holds {} values for {} layers", f.path(), k_pattern, pattern->array_size(), c.n_layer);
        }
        for (int l = 0; l < c.n_layer; ++l) c.swa_layers[static_cast<size_t>(l)] = pattern->ints[static_cast<size_t>(l)] != 0;
    } else {
        const uint64_t period_read = pattern != nullptr ? f.get_uint(k_pattern) : static_cast<uint64_t>(period);
        if (period_read > (uint64_t{1} << 24)) {
            fail("'{}': {} = {} is out of range (a period of at most 2^24 layers)", f.path(), k_pattern, period_read);
        }
        const auto n = static_cast<int64_t>(period_read);
        for (int l = 0; l < c.n_layer; ++l) c.swa_layers[static_cast<size_t>(l)] = n == 0 || l % n < n - 1;
    }
}

// A sliding window of at most 2^30 positions (0 allowed: no window), refused above.
int window_size(const gguf::File& f, const std::string& key) {
    const uint64_t w = f.get_uint(key);
    if (w > (uint64_t{1} << 30)) fail("'{}': {} = {} is out of range (at most 2^30 positions)", f.path(), key, w);
    return static_cast<int>(w);
}

// {arch}.rope.freq_base_swa (the sliding-window layers' RoPE base) as a finite number > 1, or
// `fallback` when absent.
float read_freq_base_swa(const gguf::File& f, const ModelConfig& c, double fallback) {
    const std::string key = c.arch_name + ".rope.freq_base_swa";
    const auto base = static_cast<float>(f.get_float(key, fallback));
    if (!(base > 1.0f) || !std::isfinite(base))
        fail("'{}': {} = {} must be a finite number > 1", f.path(), key, base);
    return base;
}

// {arch}.KEY as a finite float >= 0 (> 0 when `positive`), or `fallback` when absent.
float read_nonnegative(const gguf::File& f, const std::string& key, double fallback, bool positive = false) {
    const auto v = static_cast<float>(f.get_float(key, fallback));
    if (!std::isfinite(v) || v < 0.0f || (positive && v == 0.0f)) {
        fail("'{}': {} = {} must be a finite number {} 0", f.path(), key, v, positive ? ">" : ">=");
    }
    return v;
}

// Gemma 3 (as llama.cpp reads it): sliding-window layers when gemma3.attention.sliding_window > 0,
// every layer but each 6th (il % 6 < 5) unless gemma3.attention.sliding_window_pattern gives the
// period or a per-layer array; their RoPE base from gemma3.rope.freq_base_swa (default 10000);
// the 62-layer (27B) shape scales attention by 1/sqrt(n_embd / n_head).
void read_gemma3(const gguf::File& f, ModelConfig& c) {
    const std::string a = c.arch_name + ".";
    const std::string k_window = a + "attention.sliding_window";
    c.sliding_window = f.has(k_window) ? window_size(f, k_window) : 0;
    if (c.sliding_window > 0) {
        read_swa_layers(f, c, 6);
        c.rope_freq_base_swa = read_freq_base_swa(f, c, 10000.0);
    }
    c.final_logit_softcap = read_nonnegative(f, a + "final_logit_softcapping", 0.0);
    if (c.n_layer == 62) c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.n_embd / c.n_head));
}

// Mixture of experts, as llama.cpp reads it (src/llama-model.cpp, src/models/qwen3moe.cpp,
// qwen2moe.cpp, llama.cpp): {arch}.expert_count and {arch}.expert_used_count (one number each;
// per-layer arrays are refused); the experts' size from {arch}.expert_feed_forward_length,
// default feed_forward_length / expert_used_count (llama: feed_forward_length); qwen2moe's shared
// expert from {arch}.expert_shared_feed_forward_length, default feed_forward_length. The
// routing is llama.cpp's per architecture: softmax over every expert, the top expert_used_count
// by probability, their probabilities as weights, renormalised to sum 1 for qwen3moe and llama
// (Mixtral), not for qwen2moe. {arch}.expert_weights_scale and expert_weights_norm are not read
// for these architectures (llama.cpp ignores them there too).
void read_moe_config(const gguf::File& f, ModelConfig& c) {
    const std::string a = c.arch_name + ".";
    if (c.family == Family::Llama) c.family = Family::Moe;
    c.n_expert = positive_int(f, a + "expert_count", 1024);
    c.n_expert_used = positive_int(f, a + "expert_used_count", 1024);
    if (c.n_expert_used > c.n_expert) {
        fail("'{}': {}expert_used_count = {} is more than the {} experts ({}expert_count)",
             f.path(), a, c.n_expert_used, c.n_expert, a);
    }
    if (c.arch == Arch::Llama) {
        c.n_ff_exp = c.n_ff;
    } else if (c.arch == Arch::GptOss) {  // llama.cpp requires the key for gpt-oss
        c.n_ff_exp = positive_int(f, a + "expert_feed_forward_length");
    } else {
        const std::string k_exp = a + "expert_feed_forward_length";
        if (!f.has(k_exp) && c.n_ff / c.n_expert_used <= 0) {
            fail("'{}': {} is absent and {}feed_forward_length = {} gives no expert size", f.path(),
                 k_exp, a, c.n_ff);
        }
        c.n_ff_exp = f.has(k_exp) ? positive_int(f, k_exp) : c.n_ff / c.n_expert_used;
    }
    c.expert_weights_norm = c.arch != Arch::Qwen2Moe && c.arch != Arch::GptOss;
    c.expert_softmax_selected = c.arch == Arch::GptOss;
    if (c.arch == Arch::Qwen2Moe) {
        const std::string k_sh = a + "expert_shared_feed_forward_length";
        if (!f.has(k_sh) && c.n_ff <= 0)
            fail("'{}': {} and {}feed_forward_length are absent", f.path(), k_sh, a);
        c.n_ff_shexp = f.has(k_sh) ? positive_int(f, k_sh) : c.n_ff;
    }
}

// Gemma 2 (as llama.cpp reads it): every layer with il % 2 == 0 slides (pattern period 2 unless
// gemma2.attention.sliding_window_pattern says otherwise), window gemma2.attention.sliding_window
// (default 4096); those layers rotate with the global base and scaling unless
// gemma2.rope.freq_base_swa is given; attention logits soft-capped at
// gemma2.attn_logit_softcapping (default 50), the output's at gemma2.final_logit_softcapping
// (default 30): llama.cpp applies both always; the 46-layer (27B) shape scales attention by
// 1/sqrt(n_embd / n_head) (query_pre_attn_scalar), the others by 1/sqrt(head_dim).
void read_gemma2(const gguf::File& f, ModelConfig& c) {
    const std::string a = c.arch_name + ".";
    const std::string k_window = a + "attention.sliding_window";
    c.sliding_window = f.has(k_window) ? window_size(f, k_window) : 4096;
    if (c.sliding_window <= 0) fail("'{}': {} = 0 (gemma2 needs a window)", f.path(), k_window);
    read_swa_layers(f, c, 2);
    c.rope_freq_base_swa = read_freq_base_swa(f, c, c.rope_freq_base);
    c.rope_freq_scale_swa = c.rope_freq_scale;
    c.attn_logit_softcap = read_nonnegative(f, a + "attn_logit_softcapping", 50.0, true);
    c.final_logit_softcap = read_nonnegative(f, a + "final_logit_softcapping", 30.0, true);
    if (c.n_layer == 46) c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.n_embd / c.n_head));
}

// gpt-oss (as llama.cpp reads it, src/models/openai-moe.cpp): gpt-oss.attention.sliding_window
// required; every layer with il % 2 == 0 slides (pattern period 2 unless
// attention.sliding_window_pattern says otherwise); those layers rotate with the global base
// unless gpt-oss.rope.freq_base_swa is given, and with the global scaling (YaRN included);
// attention scaled by 1/sqrt(head_dim); the MoE keys as read_moe_config reads them.
void read_gptoss(const gguf::File& f, ModelConfig& c) {
    const std::string a = c.arch_name + ".";
    c.sliding_window = positive_int(f, a + "attention.sliding_window", 1 << 30);
    read_swa_layers(f, c, 2);
    c.rope_freq_base_swa = read_freq_base_swa(f, c, c.rope_freq_base);
    c.rope_freq_scale_swa = c.rope_freq_scale;
    if (c.n_rot != c.head_dim) {  // llama.cpp sizes the heads by n_rot for gpt-oss
        fail(
            "'{}': {}rope.dimension_count = {} differs from the head size {} (gpt-oss rotates "
            "whole heads)",
            f.path(), a, c.n_rot, c.head_dim);
    }
}

// One row per architecture (ArchTraits in config.h).
using E = ArchTraits::Experts;
using B = ArchTraits::QkvBias;
using O = ArchTraits::Output;
constexpr auto kNorm = ops::RopeMode::Norm, kNeox = ops::RopeMode::Neox;
// phi3.attention.sliding_window is read by llama.cpp and then switched off ("Phi SWA is currently
// disabled"): every phi3 layer attends globally here too.
const std::vector<ArchTraits> kArchitectures = {
    // name        arch            family          rope   experts      qk_norm  qkv_bias     fused  post   output        own keys
    {"llama",      Arch::Llama,    Family::Llama,  kNorm, E::Optional, false,   B::Optional, false, false, O::TiedOrOwn, nullptr},
    {"qwen2",      Arch::Qwen2,    Family::Llama,  kNeox, E::None,     false,   B::Required, false, false, O::TiedOrOwn, nullptr},
    {"qwen3",      Arch::Qwen3,    Family::Llama,  kNeox, E::None,     true,    B::Optional, false, false, O::TiedOrOwn, nullptr},
    {"gemma3",     Arch::Gemma3,   Family::Gemma,  kNeox, E::None,     true,    B::Optional, false, true,  O::TiedOrOwn, read_gemma3},
    {"gemma2",     Arch::Gemma2,   Family::Gemma,  kNeox, E::None,     false,   B::Optional, true,  true,  O::Tied,      read_gemma2},
    {"phi3",       Arch::Phi3,     Family::Llama,  kNeox, E::None,     false,   B::Optional, true,  false, O::TiedOrOwn, nullptr},
    {"qwen3moe",   Arch::Qwen3Moe, Family::Moe,    kNeox, E::Always,   true,    B::Optional, false, false, O::TiedOrOwn, nullptr},
    {"qwen2moe",   Arch::Qwen2Moe, Family::Moe,    kNeox, E::Always,   false,   B::Usual,    false, false, O::Own,       nullptr},
    {"gpt-oss",    Arch::GptOss,   Family::GptOss, kNeox, E::Always,   false,   B::Usual,    true,  false, O::Own,       read_gptoss},
};

// The table's names, comma-separated; only those that can have experts where experts_only.
std::string architecture_names(bool experts_only) {
    std::string s;
    for (const ArchTraits& t : kArchitectures) {
        if (experts_only && t.experts == ArchTraits::Experts::None) continue;
        s += (s.empty() ? "" : ", ") + std::string(t.name);
    }
    return s;
}

}  // namespace

const std::vector<ArchTraits>& architectures() { return kArchitectures; }

const ArchTraits* find_architecture(std::string_view name) {
    for (const ArchTraits& t : kArchitectures) {
        if (name == t.name) return &t;
    }
    return nullptr;
}

const ArchTraits& arch_traits(Arch arch) {
    for (const ArchTraits& t : kArchitectures) {
        if (t.arch == arch) return t;
    }
    fail("architecture {} has no row in the architecture table", static_cast<int>(arch));
}

const std::string& supported_architectures() {
    static const std::string list = architecture_names(false);
    return list;
}

const std::string& expert_architectures() {
    static const std::string list = architecture_names(true);
    return list;
}

ModelConfig read_model_config(const gguf::File& f) {
    ModelConfig c;
    c.arch_name = f.get_string("general.architecture");
    const ArchTraits* t = find_architecture(c.arch_name);
    if (t == nullptr) {
        fail("'{}': unsupported architecture '{}' (supported: {})", f.path(), c.arch_name, supported_architectures());
    }
    c.arch = t->arch;
    c.family = t->family;
    c.rope_mode = t->rope_mode;
    c.name = f.get_string("general.name", "");
    const std::string a = c.arch_name + ".";
    // Experts: always (qwen3moe, qwen2moe, gpt-oss), or when {arch}.expert_count > 0 (llama: Mixtral).
    const bool has_experts = f.has(a + "expert_count") && f.get_uint(a + "expert_count") > 0;
    const bool moe = t->experts == ArchTraits::Experts::Always ||
                     (t->experts == ArchTraits::Experts::Optional && has_experts);
    if (!moe && has_experts) {
        fail("'{}': {}expert_count = {}: a {} model has no experts (mixture-of-experts architectures: {})",
             f.path(), a, f.get_uint(a + "expert_count"), c.arch_name, expert_architectures());
    }
    c.n_layer = positive_int(f, a + "block_count", 4096);
    c.n_embd = positive_int(f, a + "embedding_length");
    // The MoE architectures need feed_forward_length only as a default for the experts' sizes.
    c.n_ff = moe && c.arch != Arch::Llama ? optional_int(f, a + "feed_forward_length", 0)
                                          : positive_int(f, a + "feed_forward_length");
    c.n_head = positive_int(f, a + "attention.head_count", 65536);
    c.n_head_kv = optional_int(f, a + "attention.head_count_kv", c.n_head);
    if (c.n_head % c.n_head_kv != 0) {
        fail("'{}': {} attention heads are not a multiple of {} KV heads", f.path(), c.n_head, c.n_head_kv);
    }
    if (!f.has(a + "attention.key_length") && c.n_embd % c.n_head != 0) {
        fail("'{}': embedding length {} is not a multiple of {} heads and {}attention.key_length "
             "is absent", f.path(), c.n_embd, c.n_head, a);
    }
    c.head_dim = optional_int(f, a + "attention.key_length", c.n_embd / c.n_head);
    const int v_dim = optional_int(f, a + "attention.value_length", c.head_dim);
    if (v_dim != c.head_dim) {
        fail("'{}': key length {} differs from value length {} (not supported)", f.path(), c.head_dim, v_dim);
    }
    if (int64_t{c.n_head} * c.head_dim > (1 << 24)) {
        fail("'{}': {} heads of size {} are out of range (at most 2^24 query features)", f.path(), c.n_head,
             c.head_dim);
    }
    c.n_ctx_train = positive_int(f, a + "context_length", 1 << 30);
    c.n_rot = optional_int(f, a + "rope.dimension_count", c.head_dim);
    if (c.n_rot % 2 != 0 || c.n_rot > c.head_dim) {
        fail("'{}': {}rope.dimension_count = {} must be even and at most the head size {}", f.path(),
             a, c.n_rot, c.head_dim);
    }
    c.rope_freq_base = static_cast<float>(f.get_float(a + "rope.freq_base", 10000.0));
    if (!(c.rope_freq_base > 1.0f) || !std::isfinite(c.rope_freq_base)) {
        fail("'{}': {}rope.freq_base = {} must be a finite number > 1", f.path(), a, c.rope_freq_base);
    }
    const std::string k_eps = a + "attention.layer_norm_rms_epsilon";
    c.rms_eps = static_cast<float>(f.get_float(k_eps));
    if (!(c.rms_eps > 0.0f) || c.rms_eps > 1.0f) fail("'{}': {} = {} is out of range", f.path(), k_eps, c.rms_eps);

    // RoPE scaling: linear (position interpolation) through the factor; llama3-style scaling comes
    // as per-frequency factors in the rope_freqs.weight tensor (read by the model loader).
    c.rope_scaling = f.get_string(a + "rope.scaling.type", "");
    double factor = f.get_float(a + "rope.scaling.factor", 0.0);
    if (factor == 0.0) factor = f.get_float(a + "rope.scale_linear", 0.0);
    if (c.rope_scaling.empty()) c.rope_scaling = factor != 0.0 && factor != 1.0 ? "linear" : "none";
    if (c.rope_scaling == "linear") {
        if (!(factor > 0.0) || !std::isfinite(factor) || !std::isfinite(1.0f / static_cast<float>(factor))) {
            fail("'{}': linear RoPE scaling needs a finite {}rope.scaling.factor > 0, got {}", f.path(), a, factor);
        }
        c.rope_freq_scale = static_cast<float>(1.0 / factor);
    } else if (c.rope_scaling == "yarn") {
        // llama.cpp: freq_scale = 1 / factor (no factor: 1), YaRN's ramp and magnitude on top.
        if (factor < 0.0 || !std::isfinite(factor) ||
            (factor > 0.0 && !std::isfinite(1.0f / static_cast<float>(factor)))) {
            fail("'{}': YaRN RoPE scaling needs a finite {}rope.scaling.factor > 0, got {}",
                 f.path(), a, factor);
        }
        c.rope_freq_scale = factor == 0.0 ? 1.0f : static_cast<float>(1.0 / factor);
        c.rope_yarn = true;
    } else if (c.rope_scaling == "longrope" && c.arch == Arch::Phi3) {
        c.rope_scaling = "none";  // LongRoPE: the rope_factors_long/short tensors (no frequency scale)
    } else if (c.rope_scaling != "none") {
        fail(
            "'{}': RoPE scaling type '{}' is not supported (supported: none, linear, yarn, and "
            "llama3-style rope_freqs.weight)",
            f.path(), c.rope_scaling);
    }
    const std::string k_orig = a + "rope.scaling.original_context_length";
    c.n_ctx_orig = f.has(k_orig) ? positive_int(f, k_orig, 1 << 30) : c.n_ctx_train;
    c.rope_attn_factor = read_nonnegative(f, a + "rope.scaling.attn_factor", 1.0, true);
    c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    if (moe) read_moe_config(f, c);
    if (t->read_keys != nullptr) t->read_keys(f, c);
    return c;
}

}  // namespace kvec
