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
    const int64_t E = c.n_embd;
    const moe::Routing routing{c.n_expert, c.n_expert_used, c.expert_weights_norm,
                               c.expert_softmax_selected};

    ops::get_rows(W.token_embd, tokens, T, x_.data());  // x [T, E]
    for (int l = 0; l < c.n_layer; ++l) {
        const LayerWeights& L = W.layers[static_cast<size_t>(l)];
        const ops::RopeParams& rope = c.is_swa(l) ? rope_swa_ : rope_;
        // Attention block (sinks inside Session::attention).
        attention_block(l, rope, positions, T, step, final_chunk);  // proj [T, E]
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
