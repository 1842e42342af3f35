// Scalar references of the tensor operations: written for clarity, accumulating in double.
// Tests compare the production ops (ops.h, matmul.h) against these.
#pragma once

#include <cstdint>

#include "tensor/attention.h"
#include "tensor/ops.h"
#include "tensor/weight.h"

namespace kvec::ref {

void rms_norm(const float* x, const float* w, float* y, int64_t n, int64_t d, float eps);
void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions,
          const ops::RopeParams& params);
// YaRN as ggml writes it (ops.h YarnParams): yarn.freq_scale and p.freq_factors give the
// interpolated angle, the ramp mixes it with the extrapolated one, and the rotated elements are
// scaled by p.attn_factor * (1 + 0.1 ln(1 / freq_scale)) when ext_factor != 0. In double.
void rope_yarn(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
               const int32_t* positions, const ops::RopeParams& p, const ops::YarnParams& yarn);
void swiglu(const float* gate, const float* up, float* out, int64_t n);
void geglu(const float* gate, const float* up, float* out, int64_t n);
void swiglu_oai(const float* gate, const float* up, float* out, int64_t n, float alpha,
                float limit);
void softmax(float* x, int64_t n, float sink = -INFINITY);
void softcap(float* x, int64_t n, float scale, float cap);
// y[n, w.n_out] = x[n, w.n_in] . W^T, one dequantised row and one double dot at a time.
void matmul(const float* x, int64_t n, const WeightView& w, float* y);
// The contract of kvec::attention (attention.h; nullptr out: attention_probs), one query row and
// one entry at a time: scores (soft-capped when softcap > 0), softmax (row i's sink logit
// sinks[i] in the denominator when sinks is not null) and weighted sums in double.
void attention(const float* q, int64_t nq, int64_t ldq, const KvHeadData& kv, int32_t n_vis,
               float scale, float* p, int64_t ldp, float* out, int64_t ldo, float softcap = 0.0f,
               const float* sinks = nullptr);

}  // namespace kvec::ref
