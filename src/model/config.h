// Hyper-parameters of a model of one of the supported families, read from GGUF metadata
// ({arch}.* keys).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/ops.h"

namespace kvec {

namespace gguf {
class File;
}

enum class Arch { Llama, Qwen2, Qwen3, Gemma3, Qwen3Moe, Qwen2Moe, Gemma2, Phi3, GptOss };

// The forward pass a model runs (src/model/arch/<family>.cpp): llama, qwen2, qwen3 and phi3 share
// the llama diagram (optional biases and Q/K norms; phi3's fused projections are split into row
// ranges when loaded); gemma3 and gemma2 the Gemma diagram (arch/gemma.cpp: post-norms, scaled
// embeddings, GELU); the mixture-of-experts models (qwen3moe, qwen2moe, llama with experts:
// Mixtral) share the MoE diagram (arch/moe.cpp); gpt-oss has its own (arch/gptoss.cpp: attention
// sinks, biased experts, the clamped SwiGLU).
enum class Family { Llama, Gemma, Moe, GptOss };

struct ModelConfig;

// What kvec knows of one GGUF architecture: one row of the table in config.cpp
// (architectures()), read by the configuration, the model loader, the random-model writer and
// the error messages. Adding an architecture is a row there, plus a forward pass in arch/ where
// its graph is none of the families'.
struct ArchTraits {
    enum class Experts { None, Optional, Always };    // Optional: experts when expert_count > 0 (llama: Mixtral)
    enum class QkvBias { Optional, Usual, Required };  // Usual: the random writer writes them
    enum class Output { TiedOrOwn, Own, Tied };        // Own: output.weight required; Tied: refused
    const char* name;           // general.architecture
    Arch arch;
    Family family;              // its forward pass (a file with experts runs Family::Moe)
    ops::RopeMode rope_mode;
    Experts experts;
    bool qk_norm;               // per-head attn_q_norm / attn_k_norm
    QkvBias qkv_bias;           // attn_q/k/v.bias
    bool fused_qkv;             // attn_qkv.weight accepted in place of attn_q/k/v.weight
    bool post_norms;            // post_attention_norm and post_ffw_norm around both blocks (Gemma)
    Output output;
    void (*read_keys)(const gguf::File&, ModelConfig&);  // its own metadata keys, or null
};

// Every architecture kvec runs, in the order messages list them.
const std::vector<ArchTraits>& architectures();
// The row of general.architecture `name`; null when kvec does not run it.
const ArchTraits* find_architecture(std::string_view name);
// The row of `arch`.
const ArchTraits& arch_traits(Arch arch);
// "llama, qwen2, qwen3, gemma3, ...": what error messages list.
const std::string& supported_architectures();
// "llama, qwen3moe, qwen2moe, gpt-oss": the architectures that can have experts (ArchTraits::experts).
const std::string& expert_architectures();

struct ModelConfig {
    std::string arch_name;     // general.architecture
    Arch arch = Arch::Llama;
    std::string name;          // general.name ("" if absent)
    int n_layer = 0;           // {arch}.block_count
    int n_embd = 0;            // {arch}.embedding_length
    int n_ff = 0;              // {arch}.feed_forward_length
    int n_head = 0;            // {arch}.attention.head_count
    int n_head_kv = 0;         // {arch}.attention.head_count_kv (default n_head)
    int head_dim = 0;          // {arch}.attention.key_length (default n_embd / n_head)
    int n_vocab = 0;           // rows of token_embd.weight (filled by the model loader)
    int n_ctx_train = 0;       // {arch}.context_length
    int n_rot = 0;             // {arch}.rope.dimension_count (default head_dim)
    float rope_freq_base = 10000.0f;   // {arch}.rope.freq_base
    float rope_freq_scale = 1.0f;      // 1 / {arch}.rope.scaling.factor for linear scaling
    std::string rope_scaling = "none";  // {arch}.rope.scaling.type ("none", "linear", "yarn")
    float rms_eps = 1e-5f;     // {arch}.attention.layer_norm_rms_epsilon
    ops::RopeMode rope_mode = ops::RopeMode::Norm;  // Norm for llama, Neox for qwen2/qwen3/gemma3
    Family family = Family::Llama;
    // Attention logits are q.k * attn_scale: 1/sqrt(head_dim) (gemma3 27B: 1/sqrt(n_embd / n_head),
    // as llama.cpp sets it).
    float attn_scale = 1.0f;
    // Sliding-window attention (gemma3): layer l is a sliding-window layer when swa_layers[l] != 0;
    // its queries see only keys at positions p - sliding_window < pos <= p, it rotates with
    // rope_freq_base_swa and no scaling, and its cache keeps only that window. Empty: none.
    int sliding_window = 0;               // {arch}.attention.sliding_window
    std::vector<uint8_t> swa_layers;      // [n_layer] or empty
    float rope_freq_base_swa = 10000.0f;  // {arch}.rope.freq_base_swa
    float final_logit_softcap = 0.0f;     // {arch}.final_logit_softcapping (0: none)
    // Mixture of experts (Family::Moe; read_moe_config in config.cpp): every layer's FFN is
    // n_expert_used of n_expert SwiGLU experts of size n_ff_exp, chosen per token by a router
    // (softmax over all experts, then the top n_expert_used; their weights renormalised to sum 1
    // when expert_weights_norm), plus, when n_ff_shexp > 0 (qwen2moe), a shared SwiGLU expert
    // of size n_ff_shexp scaled by sigmoid(x . ffn_gate_inp_shexp). 0 experts: a dense FFN.
    int n_expert = 0;                     // {arch}.expert_count
    int n_expert_used = 0;                // {arch}.expert_used_count
    int n_ff_exp = 0;                     // {arch}.expert_feed_forward_length (llama: n_ff)
    int n_ff_shexp = 0;                   // {arch}.expert_shared_feed_forward_length (qwen2moe)
    bool expert_weights_norm =
        false;  // qwen3moe, llama: true; qwen2moe, gpt-oss: false (as llama.cpp)
    // gpt-oss (llama.cpp's SOFTMAX_WEIGHT gating): the top n_expert_used by the router's logits
    // (plus its bias), their weights a softmax over those logits only.
    bool expert_softmax_selected = false;
    float rope_freq_scale_swa = 1.0f;     // sliding-window layers' RoPE scale (gemma3: 1; gemma2: rope_freq_scale)
    // gemma2: attention logits soft-capped before the softmax, s = cap * tanh(s / cap) (0: none).
    float attn_logit_softcap = 0.0f;      // {arch}.attn_logit_softcapping
    // LongRoPE (phi3): rope_factors_long.weight when the session's context exceeds n_ctx_orig,
    // else rope_factors_short.weight (as llama.cpp chooses); the rotated elements of q and k are
    // multiplied by rope_attn_factor (ggml's mscale; any architecture, as llama.cpp reads it).
    int n_ctx_orig = 0;                   // {arch}.rope.scaling.original_context_length (default n_ctx_train)
    float rope_attn_factor = 1.0f;        // {arch}.rope.scaling.attn_factor
    // YaRN (rope.scaling.type yarn; ops::YarnParams): rope_freq_scale = 1 / rope.scaling.factor,
    // the ramp's original context n_ctx_orig, llama.cpp's ext_factor 1, beta_fast 32, beta_slow 1
    // (the rope.scaling.yarn_* keys are not read for these architectures, as in llama.cpp).
    bool rope_yarn = false;

    bool is_swa(int layer) const { return !swa_layers.empty() && swa_layers[static_cast<size_t>(layer)] != 0; }
    bool has_swa() const { return !swa_layers.empty(); }
    bool has_moe() const { return n_expert > 0; }
    const ArchTraits& traits() const { return arch_traits(arch); }

    int n_group() const { return n_head / n_head_kv; }  // query heads per KV head
    int q_dim() const { return n_head * head_dim; }
    int kv_dim() const { return n_head_kv * head_dim; }
};

// Reads and checks the hyper-parameters. Throws kvec::Error naming the file and the key for a
// missing/invalid key, and listing the supported architectures for an unknown one.
ModelConfig read_model_config(const gguf::File& file);

}  // namespace kvec
