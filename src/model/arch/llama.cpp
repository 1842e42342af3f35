// The llama family's forward pass (GGUF `llama`, `qwen2`, `qwen3`, `phi3`):
//
//   x = embed(tokens)                                              [T, n_embd]
//   for each layer:
//     h = rms_norm(x) * attn_norm
//     q, k, v = h . Wq, h . Wk, h . Wv   (+ biases: qwen2)           [T, q_dim], [T, kv_dim] x 2
//     q, k = rms_norm(q) * q_norm, rms_norm(k) * k_norm per head   (qwen3)
//     q, k = RoPE(q, k)                  (llama: adjacent pairs; qwen, phi3: halves; phi3: LongRoPE
//                                         factors and attention factor, Session::rope_)
//     a = attention over the budgeted cache (Session::attention)   [T, q_dim]
//     x += a . Wo
//     h = rms_norm(x) * ffn_norm
//     x += (silu(h . W_gate) * (h . W_up)) . W_down                 (SwiGLU)
//
// phi3 is this diagram: its fused attn_qkv.weight and ffn_up.weight (gate rows, then up rows)
// are read as the row ranges Wq, Wk, Wv and W_gate, W_up (model.h), and its sliding window is off
// as in llama.cpp. The output head (final norm, output matrix) is shared (Session::forward).
#include "model/session.h"
#include "tensor/matmul.h"
#include "tensor/ops.h"

namespace kvec {

void Session::forward_llama(const int32_t* tokens, const int32_t* positions, int32_t T, Step step,
                            bool final_chunk) {
    const ModelConfig& c = model_.config();
    const ModelWeights& W = model_.weights();
    const int64_t E = c.n_embd, F = c.n_ff;

    ops::get_rows(W.token_embd, tokens, T, x_.data());  // x [T, E]
    for (int l = 0; l < c.n_layer; ++l) {
        const LayerWeights& L = W.layers[static_cast<size_t>(l)];
        // Attention block.
        attention_block(l, rope_, positions, T, step, final_chunk);  // proj [T, E]
        ops::add(x_.data(), proj_.data(), T * E);
        // Feed-forward block (SwiGLU).
        ops::rms_norm(x_.data(), L.ffn_norm.data(), xn_.data(), T, E, c.rms_eps);
        const MatmulOut gate_up[] = {{&L.w_gate, gate_.data()}, {&L.w_up, up_.data()}};
        matmul_group(xn_.data(), T, gate_up);  // gate [T, F], up [T, F]
        ops::swiglu(gate_.data(), up_.data(), gate_.data(), T * F);
        matmul(gate_.data(), T, L.w_down, proj_.data());  // [T, E]
        ops::add(x_.data(), proj_.data(), T * E);
    }
}

}  // namespace kvec
