// Hyper-parameters of a Llama-family model, read from GGUF metadata ({arch}.* keys).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/ops.h"

namespace kvec {

namespace gguf {
class File;
}

enum class Arch { Llama, Qwen2, Qwen3 };

// "llama, qwen2, qwen3": what error messages list.
const char* supported_architectures();

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
    std::string rope_scaling = "none"; // {arch}.rope.scaling.type ("none", "linear")
    float rms_eps = 1e-5f;     // {arch}.attention.layer_norm_rms_epsilon
    ops::RopeMode rope_mode = ops::RopeMode::Norm;  // Norm for llama, Neox for qwen2/qwen3

    int n_group() const { return n_head / n_head_kv; }  // query heads per KV head
    int q_dim() const { return n_head * head_dim; }
    int kv_dim() const { return n_head_kv * head_dim; }
};

// Reads and checks the hyper-parameters. Throws kvec::Error naming the file and the key for a
// missing/invalid key, and listing the supported architectures for an unknown one.
ModelConfig read_model_config(const gguf::File& file);

}  // namespace kvec
