// The Gemma forward pass (GGUF `gemma3`, text only, and `gemma2`), as llama.cpp runs them
// (src/models/gemma3.cpp, gemma2.cpp):
//
//   x = embed(tokens) * sqrt(n_embd)                               [T, n_embd]
//   for each layer (sliding-window or global, ModelConfig::is_swa; gemma2: l % 2 == 0 slides):
//     h = rms_norm(x) * attn_norm          (the GGUF's norm weights already hold Gemma's 1 + w)
//     q, k, v = h . Wq, h . Wk, h . Wv                              [T, q_dim], [T, kv_dim] x 2
//               (gemma2: attn_qkv.weight's row ranges when fused; + optional biases)
//     q, k = rms_norm(q) * q_norm, rms_norm(k) * k_norm per head    (gemma3 only)
//     q, k = RoPE(q, k), halves (NEOX); gemma3's sliding-window layers: base rope.freq_base_swa,
//            no scaling, its global layers: rope.freq_base and its linear scaling; gemma2: one
//            base and scaling for every layer unless the file gives rope.freq_base_swa
//     a = attention, logits q.k * attn_scale, gemma2's soft-capped:
//         attn_softcap * tanh(q.k * attn_scale / attn_softcap) (Session::attention;
//         sliding-window layers see only the last sliding_window positions)  [T, q_dim]
//     x += rms_norm(a . Wo) * post_attention_norm
//     h = rms_norm(x) * ffn_norm
//     x += rms_norm((gelu_tanh(h . W_gate) * (h . W_up)) . W_down) * post_ffw_norm
//
// What differs between the two is configuration (ModelConfig: the Q/K norms' weights, soft-capping,
// the sliding-window pattern and RoPE), read by config.cpp. The output head (final norm, tied
// output, final soft-capping: gemma2's 30 unless the file says otherwise, gemma3's optional) is
// shared (Session::forward).
#include <cmath>

#include "model/session.h"
#include "tensor/matmul.h"
#include "tensor/ops.h"

namespace kvec {

void Session::forward_gemma(const int32_t* tokens, const int32_t* positions, int32_t T, Step step,
                            bool final_chunk) {
    const ModelConfig& c = model_.config();
    const ModelWeights& W = model_.weights();
    const int64_t E = c.n_embd, F = c.n_ff;

    ops::get_rows(W.token_embd, tokens, T, x_.data());  // x [T, E]
    const float embd_scale = std::sqrt(static_cast<float>(E));
    for (int64_t i = 0; i < T * E; ++i) x_[static_cast<size_t>(i)] *= embd_scale;
    for (int l = 0; l < c.n_layer; ++l) {
        const LayerWeights& L = W.layers[static_cast<size_t>(l)];
        const ops::RopeParams& rope = c.is_swa(l) ? rope_swa_ : rope_;
        // Attention block.
        attention_block(l, rope, positions, T, step, final_chunk);  // proj [T, E]
        ops::rms_norm(proj_.data(), L.attn_post_norm.data(), proj_.data(), T, E, c.rms_eps);
        ops::add(x_.data(), proj_.data(), T * E);
        // Feed-forward block (GELU-tanh gated).
        ops::rms_norm(x_.data(), L.ffn_norm.data(), xn_.data(), T, E, c.rms_eps);
        const MatmulOut gate_up[] = {{&L.w_gate, gate_.data()}, {&L.w_up, up_.data()}};
        matmul_group(xn_.data(), T, gate_up);  // gate [T, F], up [T, F]
        ops::geglu(gate_.data(), up_.data(), gate_.data(), T * F);
        matmul(gate_.data(), T, L.w_down, proj_.data());  // [T, E]
        ops::rms_norm(proj_.data(), L.ffn_post_norm.data(), proj_.data(), T, E, c.rms_eps);
        ops::add(x_.data(), proj_.data(), T * E);
    }
}

}  // namespace kvec
