// A loaded model: hyper-parameters and weights of a GGUF file. Weight matrices are views into the
// file's memory mapping (no copies); small vectors (norm weights, biases, RoPE frequency factors)
// are dequantised into float at load time.
//
// Loading checks everything the forward pass relies on: a supported architecture, every tensor
// present (one error lists ALL missing tensors), every shape as the hyper-parameters imply (the
// error names the tensor, its shape and the expected one), and weight rows that are whole blocks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/config.h"
#include "tensor/weight.h"

namespace kvec {

// phi3 / gemma2 files may hold Q, K and V fused in one attn_qkv.weight [n_embd] -> [q_dim + 2
// kv_dim] (and phi3 the gate and up projections in one ffn_up.weight [n_embd] -> [2 n_ff], gate
// first, as llama.cpp's swiglu splits it): wq, wk, wv (w_gate, w_up) are then views of its row
// ranges, so every family's forward pass reads separate projections.
struct LayerWeights {
    std::vector<float> attn_norm;  // [n_embd]
    WeightView wq;                 // [n_embd] -> [n_head * head_dim]
    WeightView wk;                 // [n_embd] -> [n_head_kv * head_dim]
    WeightView wv;                 // [n_embd] -> [n_head_kv * head_dim]
    WeightView wo;                 // [n_head * head_dim] -> [n_embd]
    std::vector<float> bo;         // [n_embd] or empty (gpt-oss: attn_output.bias)
    // gpt-oss: attn_sinks.weight, one logit per query head that joins the softmax's denominator.
    std::vector<float> attn_sinks;        // [n_head] or empty
    std::vector<float> bq, bk, bv;        // [q_dim], [kv_dim], [kv_dim] or empty (qwen2: present; phi3, gemma2: optional)
    std::vector<float> q_norm, k_norm;    // [head_dim] or empty (qwen3, gemma3: present)
    std::vector<float> attn_post_norm;    // [n_embd] or empty (gemma3, gemma2: post_attention_norm)
    std::vector<float>
        ffn_norm;  // [n_embd] (gpt-oss: post_attention_norm.weight, its FFN's pre-norm)
    WeightView w_gate;             // [n_embd] -> [n_ff]
    WeightView w_up;               // [n_embd] -> [n_ff]
    WeightView w_down;             // [n_ff] -> [n_embd]
    std::vector<float> ffn_post_norm;     // [n_embd] or empty (gemma3, gemma2: post_ffw_norm)
    // Mixture of experts (ModelConfig::has_moe(); w_gate, w_up, w_down then empty). The 3-D GGUF
    // tensors [n_in, n_out, n_expert] are held as views of n_expert * n_out rows: expert e owns
    // rows [e * n_out, (e + 1) * n_out), a contiguous matrix (expert_matrix in moe.h).
    WeightView ffn_gate_inp;       // router [n_embd] -> [n_expert] (ffn_gate_inp.weight)
    WeightView gate_exps;          // n_expert x ([n_embd] -> [n_ff_exp]) (ffn_gate_exps.weight)
    WeightView up_exps;            // n_expert x ([n_embd] -> [n_ff_exp]) (ffn_up_exps.weight)
    WeightView down_exps;          // n_expert x ([n_ff_exp] -> [n_embd]) (ffn_down_exps.weight)
    // gpt-oss's biases (else empty): the router's [n_expert], and per expert e the gate's and
    // up's [n_ff_exp] and the down's [n_embd] at e * n_ff_exp and e * n_embd (2-D GGUF tensors).
    std::vector<float> gate_inp_b;   // [n_expert]
    std::vector<float> gate_exps_b;  // [n_expert, n_ff_exp]
    std::vector<float> up_exps_b;    // [n_expert, n_ff_exp]
    std::vector<float> down_exps_b;  // [n_expert, n_embd]
    // The shared expert (qwen2moe; ModelConfig::n_ff_shexp > 0), else empty.
    std::vector<float> gate_inp_shexp;  // [n_embd]: its gate is sigmoid(x . gate_inp_shexp)
    WeightView gate_shexp;         // [n_embd] -> [n_ff_shexp]
    WeightView up_shexp;           // [n_embd] -> [n_ff_shexp]
    WeightView down_shexp;         // [n_ff_shexp] -> [n_embd]
};

struct ModelWeights {
    WeightView token_embd;           // [n_embd] x n_vocab rows
    std::vector<float> output_norm;  // [n_embd]
    WeightView output;               // [n_embd] -> [n_vocab]; = token_embd when tied
    bool tied_output = false;        // output.weight absent
    std::vector<float> rope_freqs;   // [n_rot / 2] per-frequency divisors, or empty
    // LongRoPE (phi3): rope_factors_long.weight / rope_factors_short.weight, [n_rot / 2] divisors
    // each, or empty; rope_params() picks one by the session's context (ModelConfig::n_ctx_orig).
    std::vector<float> rope_long, rope_short;
    // YaRN (ModelConfig::rope_yarn): its angles as per-pair divisors [n_rot / 2] for the global
    // and the sliding-window layers' bases (ops::yarn_freq_factors, with rope_freqs when present),
    // used with freq_scale 1 (rope_params); empty without YaRN.
    std::vector<float> rope_yarn, rope_yarn_swa;
    std::vector<LayerWeights> layers;
};

class Model {
public:
    // Opens and validates the file, and maps it or copies it into huge pages (LoadMode; Auto
    // copies where transparent huge pages are on and the model takes at most half of the
    // available memory). Where the CPU has AVX-512 VNNI, a mapped file's Q8_0, Q4_K and Q6_K matrices
    // are repacked into panels in 2 MiB pages (repacked_bytes(); Auto maps a file that has such
    // matrices for this, and copies its other matrices beside them where it would have copied the
    // file; KVEC_REPACK=0 switches it off): decode reads 16 rows in one stream and prefill packs
    // nothing (Q8_0) or only splits the bits (Q4_K, Q6_K) per step. Where it has AVX2 alone, the
    // Q4_0, Q4_1, Q5_0 and Q5_1 matrices are repacked so instead, as rows for the AVX2 decode
    // kernels (int8::decode::repack_rows). Throws kvec::Error.
    static std::unique_ptr<Model> load(const std::string& path, LoadMode mode = LoadMode::Auto);

    const ModelConfig& config() const { return config_; }
    const ModelWeights& weights() const { return weights_; }
    const gguf::File& file() const { return *file_; }
    const std::string& path() const { return file_->path(); }

    int64_t n_params() const;   // elements of all tensors
    size_t n_bytes() const;     // bytes of all tensor data
    // The most common weight type of the matrices, as llama.cpp names it ("q8_0").
    std::string weight_type_name() const;
    // One line: "llama 22 layers, 2048 embd, 32/4 heads, ff 5632, vocab 32000, q8_0, 1.09 GiB".
    std::string summary() const;
    // How the weights are held, and how much of them is in 2 MiB pages now: "copied into
    // anonymous memory, 2099 of 2099 MiB in 2 MiB pages", "mapped from the file, 1108 of 2099 MiB
    // in 2 MiB pages" (a mapping's pages come as they are first read).
    std::string residency() const;
    // Bytes of the matrices repacked at load (panels or rows), and of those copied beside them
    // (0: none; see load()).
    size_t repacked_bytes() const { return panels_.size(); }

private:
    explicit Model(std::unique_ptr<gguf::File> file);
    // Every Q8_0, Q4_K and Q6_K matrix into panels (WeightView::panels) or every Q4_0..Q5_1 matrix
    // into decode rows (decode_rows), as the CPU has VNNI or not, and with copy_rest every other
    // matrix copied as it is (WeightView::data repointed), all in panels_; the mapped rows they
    // replace are given back to the page cache.
    void repack(bool copy_rest);

    std::unique_ptr<gguf::File> file_;
    HugeBuffer panels_;  // [repacked_bytes()] the matrices' panels, repacked rows or copies, one after another
    bool copied_rest_ = false;
    ModelConfig config_;
    ModelWeights weights_;
};

}  // namespace kvec
