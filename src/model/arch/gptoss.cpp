// The gpt-oss forward pass (GGUF `gpt-oss`: OpenAI gpt-oss-20b/120b), as llama.cpp runs it
// (src/models/openai-moe.cpp, build_attn with sinks, build_moe_ffn with SOFTMAX_WEIGHT gating and
// SWIGLU_OAI_MOE):
//
//   x = embed(tokens)                                              [T, n_embd]
//   for each layer (sliding-window when l % 2 == 0, ModelConfig::is_swa; else global):
//     h = rms_norm(x) * attn_norm
//     q, k, v = h . Wq + bq, h . Wk + bk, h . Wv + bv   (attn_qkv's row ranges when fused)
//     q, k = RoPE(q, k), halves (NEOX), YaRN (rope_params: its divisors and magnitude)
//     a = attention, logits q.k / sqrt(head_dim), each query head's sink logit in the softmax's
//         denominator (Session::attention; sliding-window layers see only the last
//         sliding_window positions)                                 [T, q_dim]
//     x += a . Wo + bo
//     h = rms_norm(x) * post_attention_norm
//     x += moe::ffn(h): router logits h . W_r + b_r, the top n_expert_used by logit, weights the
//          softmax of those logits; each expert swiglu_oai(h . G_e + bg_e, h . U_e + bu_e) . D_e
//          + bd_e (model/moe.h)                                     [T, n_embd]
//
// The output head (final norm, output matrix) is shared (Session::forward).
#include "model/session.h"
#include "tensor/matmul.h"
#include "tensor/ops.h"

namespace kvec {

void Session::forward_gptoss(const int32_t* tokens, const int32_t* positions, int32_t T, Step step,
                             bool final_chunk) {
    const ModelConfig& c = model_.config();
    const ModelWeights& W = model_.weights();
    const int64_t E = c.n_embd, Q = c.q_dim(), KV = c.kv_dim(), D = c.head_dim;
    const moe::Routing routing{c.n_expert, c.n_expert_used, c.expert_weights_norm,
                               c.expert_softmax_selected};

    ops::get_rows(W.token_embd, tokens, T, x_.data());  // x [T, E]
    for (int l = 0; l < c.n_layer; ++l) {
        const LayerWeights& L = W.layers[static_cast<size_t>(l)];
        const ops::RopeParams& rope = c.is_swa(l) ? rope_swa_ : rope_;
        // Attention block (sinks inside Session::attention).
        ops::rms_norm(x_.data(), L.attn_norm.data(), xn_.data(), T, E, c.rms_eps);  // [T, E]
        matmul(xn_.data(), T, L.wq, q_.data());                                     // [T, Q]
        matmul(xn_.data(), T, L.wk, k_.data());                                     // [T, KV]
        matmul(xn_.data(), T, L.wv, v_.data());                                     // [T, KV]
        if (!L.bq.empty()) ops::add_bias(q_.data(), L.bq.data(), T, Q);
        if (!L.bk.empty()) ops::add_bias(k_.data(), L.bk.data(), T, KV);
        if (!L.bv.empty()) ops::add_bias(v_.data(), L.bv.data(), T, KV);
        remember_prerope_queries(l, T, positions, step);
        ops::rope(q_.data(), T, c.n_head, D, positions, rope);     // [T, n_head, D]
        ops::rope(k_.data(), T, c.n_head_kv, D, positions, rope);  // [T, n_head_kv, D]
        attention(l, T, positions, step, final_chunk);             // att [T, Q]
        matmul(att_.data(), T, L.wo, proj_.data());                // [T, E]
        ops::add_bias(proj_.data(), L.bo.data(), T, E);
        ops::add(x_.data(), proj_.data(), T * E);
        // Feed-forward block: the routed, biased experts with the clamped SwiGLU.
        ops::rms_norm(x_.data(), L.ffn_norm.data(), xn_.data(), T, E,
                      c.rms_eps);  // post_attention_norm
        moe::Experts experts{&L.ffn_gate_inp, &L.gate_exps, &L.up_exps, &L.down_exps, c.n_ff_exp};
        experts.router_b = L.gate_inp_b.data();
        experts.gate_b = L.gate_exps_b.data();
        experts.up_b = L.up_exps_b.data();
        experts.down_b = L.down_exps_b.data();
        experts.swiglu_oai = true;
        moe::ffn(xn_.data(), T, experts, routing, moe_, proj_.data());  // [T, E]
        ops::add(x_.data(), proj_.data(), T * E);
    }
}

}  // namespace kvec
