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
void swiglu(const float* gate, const float* up, float* out, int64_t n);
void geglu(const float* gate, const float* up, float* out, int64_t n);
void softmax(float* x, int64_t n);
void softcap(float* x, int64_t n, float scale, float cap);
// y[n, w.n_out] = x[n, w.n_in] . W^T, one dequantised row and one double dot at a time.
void matmul(const float* x, int64_t n, const WeightView& w, float* y);
// The contract of kvec::attention (attention.h; nullptr out: attention_probs), one query row and
// one entry at a time: scores (soft-capped when softcap > 0), softmax and weighted sums in double.
void attention(const float* q, int64_t nq, int64_t ldq, const KvHeadData& kv, int32_t n_vis, float scale,
               float* p, int64_t ldp, float* out, int64_t ldo, float softcap = 0.0f);

}  // namespace kvec::ref
