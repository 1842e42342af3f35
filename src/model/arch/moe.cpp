// The mixture-of-experts forward pass (GGUF `qwen3moe`, `qwen2moe`, and `llama` with
// llama.expert_count > 0: Mixtral), as llama.cpp runs it (src/models/qwen3moe.cpp, qwen2moe.cpp,
// llama.cpp):
//
//   x = embed(tokens)                                              [T, n_embd]
//   for each layer:
//     h = rms_norm(x) * attn_norm
//     q, k, v = h . Wq, h . Wk, h . Wv   (+ biases: qwen2moe)        [T, q_dim], [T, kv_dim] x 2
//     q, k = rms_norm(q) * q_norm, rms_norm(k) * k_norm per head   (qwen3moe)
//     q, k = RoPE(q, k)                  (llama: adjacent pairs; qwen: halves)
//     a = attention over the budgeted cache (Session::attention)   [T, q_dim]
//     x += a . Wo
//     h = rms_norm(x) * ffn_norm
//     x += moe::ffn(h): the router picks n_expert_used experts per token, their SwiGLUs
//          weighted by the routing (model/moe.h)                    [T, n_embd]
//     x += sigmoid(h . gate_inp_shexp) * (silu(h . G_sh) * (h . U_sh)) . D_sh   (qwen2moe:
//          the shared expert)
//
// The output head (final norm, output matrix) is shared (Session::forward).
#include <cmath>

#include "model/session.h"
#include "tensor/matmul.h"
#include "tensor/ops.h"

namespace kvec {

void Session::forward_moe(const int32_t* tokens, const int32_t* positions, int32_t T, Step step,
                          bool final_chunk) {
    const ModelConfig& c = model_.config();
    const ModelWeights& W = model_.weights();
    const int64_t E = c.n_embd, FS = c.n_ff_shexp;
    const moe::Routing routing{c.n_expert, c.n_expert_used, c.expert_weights_norm};

    ops::get_rows(W.token_embd, tokens, T, x_.data());  // x [T, E]
    for (int l = 0; l < c.n_layer; ++l) {
        const LayerWeights& L = W.layers[static_cast<size_t>(l)];
        // Attention block.
        attention_block(l, rope_, positions, T, step, final_chunk);  // proj [T, E]
        ops::add(x_.data(), proj_.data(), T * E);
        // Feed-forward block: the routed experts, then the shared expert (qwen2moe).
        ops::rms_norm(x_.data(), L.ffn_norm.data(), xn_.data(), T, E, c.rms_eps);
        const moe::Experts experts{&L.ffn_gate_inp, &L.gate_exps, &L.up_exps, &L.down_exps,
                                   c.n_ff_exp};
        moe::ffn(xn_.data(), T, experts, routing, moe_, proj_.data());  // [T, E]
        ops::add(x_.data(), proj_.data(), T * E);
        if (FS > 0) {
            for (int64_t t = 0; t < T; ++t) {  // gate [T] = sigmoid(h . gate_inp_shexp)
                float dot = 0.0f;
                for (int64_t j = 0; j < E; ++j)
                    dot += xn_[static_cast<size_t>(t * E + j)] *
                           L.gate_inp_shexp[static_cast<size_t>(j)];
                shexp_gate_[static_cast<size_t>(t)] = 1.0f / (1.0f + std::exp(-dot));
            }
            const MatmulOut gate_up[] = {{&L.gate_shexp, gate_.data()}, {&L.up_shexp, up_.data()}};
            matmul_group(xn_.data(), T, gate_up);  // gate [T, FS], up [T, FS]
            ops::swiglu(gate_.data(), up_.data(), gate_.data(), T * FS);
            matmul(gate_.data(), T, L.down_shexp, proj_.data());  // [T, E]
            for (int64_t t = 0; t < T; ++t) {
                const float g = shexp_gate_[static_cast<size_t>(t)];
                for (int64_t j = 0; j < E; ++j)
                    x_[static_cast<size_t>(t * E + j)] += g * proj_[static_cast<size_t>(t * E + j)];
            }
        }
    }
}

}  // namespace kvec
