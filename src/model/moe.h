// The mixture-of-experts FFN shared by the MoE families (arch/moe.cpp: qwen3moe, qwen2moe,
// llama with experts), as llama.cpp computes it (src/llama-graph.cpp, build_moe_ffn, with
// softmax gating and no weight scale):
//
//   logits = x . W_router                                [T, n_expert]
//   p = softmax(logits) over every expert                [T, n_expert]
//   the n_used experts of largest p per token, their p as weights; renormalised to sum 1
//   (divided by max(sum, 6.103515625e-5)) when Routing::norm_weights
//   out = sum over the selected e of weight_e * (silu(x . G_e) * (x . U_e)) . D_e   [T, n_embd]
//
// gpt-oss (llama.cpp's SOFTMAX_WEIGHT gating, LLM_FFN_SWIGLU_OAI_MOE): the router's logits get
// its bias, the n_used experts of largest logit are chosen and their weights are a softmax over
// those logits only (Routing::softmax_selected); each expert's gate, up and down outputs get
// their biases, and the activation is the clamped swiglu_oai (ops.h) instead of SwiGLU.
//
// The experts' 3-D tensors are views of n_expert * n_out rows (LayerWeights); expert e is the
// contiguous 2-D matrix of rows [e * n_out, (e + 1) * n_out) (expert_matrix), so the ordinary
// matmul kernels run on it and only the selected experts' rows are read. A chunk's tokens are
// grouped by expert: each selected expert's matrices are read once per chunk, for all of its
// tokens (prefill: one expert after another, each matmul parallel over its rows; up to 16 tokens:
// the experts spread over the threads, each expert's matmuls on one thread, one parallel region
// per layer). Every token adds its experts' outputs in increasing expert order, so a token's
// result does not depend on the other tokens of its chunk (prefill and decode agree).
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/weight.h"

namespace kvec::moe {

struct Routing {
    int n_expert = 0;           // experts of the layer
    int n_used = 0;             // experts per token
    bool norm_weights = false;  // renormalise the selected weights to sum 1
    bool softmax_selected = false;  // gpt-oss: top n_used by logit, softmax over the chosen logits
};

// Expert e of a 3-D expert tensor held as n_expert * n_out rows: rows [e * n_out, (e + 1) * n_out).
WeightView expert_matrix(const WeightView& w, int e, int64_t n_out);

// Scalar reference of the routing of one token: probabilities p = softmax(logits) in double,
// the n_used experts of largest p (descending; equal p: lower index first) in experts[n_used],
// their p in weights[n_used], divided by their sum (at least 6.103515625e-5) when
// r.norm_weights. With r.softmax_selected: the n_used experts of largest logit, their weights
// the softmax of their logits.
void route(const float* logits, const Routing& r, int32_t* experts, float* weights);

// One layer's experts: the router [n_embd] -> [n_expert] and the experts' gate and up
// ([n_embd] -> [n_ff_exp] each) and down ([n_ff_exp] -> [n_embd]) matrices, 3-D as above.
struct Experts {
    const WeightView* router = nullptr;
    const WeightView* gate = nullptr;
    const WeightView* up = nullptr;
    const WeightView* down = nullptr;
    int64_t n_ff_exp = 0;
    // gpt-oss: biases (null: none) and the clamped activation.
    const float* router_b = nullptr;  // [n_expert]
    const float* gate_b = nullptr;    // [n_expert, n_ff_exp]
    const float* up_b = nullptr;      // [n_expert, n_ff_exp]
    const float* down_b = nullptr;    // [n_expert, n_embd]
    bool swiglu_oai = false;  // ops::swiglu_oai (alpha 1.702, limit 7) instead of ops::swiglu
};

// Buffers of ffn(), grown on first use and kept between calls.
struct Scratch {
    std::vector<float> logits;     // [T, n_expert] router logits
    std::vector<int32_t> experts;  // [T, n_used] selected experts per token
    std::vector<float> weights;    // [T, n_used] their weights
    std::vector<int32_t> start;    // [n_expert + 1] first entry of each expert in `slots`
    std::vector<int32_t> slots;    // [T * n_used] token * n_used + slot, grouped by expert
    std::vector<int32_t> active;   // [<= n_expert] the experts some token selected
    std::vector<float> xg;         // [T, n_embd] the inputs of one expert's tokens
    std::vector<float> g;          // [T, n_ff_exp] gate, then silu(gate) * up
    std::vector<float> u;          // [T, n_ff_exp] up
    std::vector<float> y;          // [T * n_used, n_embd] every selected expert's output, in `slots` order
};

// out[T, n_embd] = the routed experts' weighted sum for the inputs x[T, n_embd] (above).
// The routing (experts, weights) is left in s.experts / s.weights.
void ffn(const float* x, int64_t T, const Experts& w, const Routing& r, Scratch& s, float* out);

}  // namespace kvec::moe
