// Element-wise and row-wise tensor operations of the forward pass. All buffers are row-major
// float32; shapes are given as [rows, cols]. The functions here are the production versions
// (vectorisable loops, OpenMP over rows where the work is large enough); reference.h holds
// straightforward scalar references in double precision that the tests compare against.
#pragma once

#include <cstdint>

#include "tensor/weight.h"

namespace kvec::ops {

// y[n, d] = x[n, d] / sqrt(mean(x_row^2) + eps) * w[d]. y may alias x.
void rms_norm(const float* x, const float* w, float* y, int64_t n, int64_t d, float eps);

// Rotary position embedding, in place, on x [n_tokens, n_heads, head_dim].
//   Norm: rotates adjacent pairs (x[2i], x[2i+1])        (GGUF `llama`)
//   Neox: rotates halves (x[i], x[i + n_rot/2])          (GGUF `qwen2`, `qwen3`)
// For pair i < n_rot/2 at position p the angle is
//   theta = freq_scale * p * freq_base^(-2i/n_rot) / freq_factors[i]
// (freq_scale = 1/factor for linear scaling; freq_factors from `rope_freqs.weight` for
// llama3-style scaling, or LongRoPE's long/short factors, or null). Each rotated pair is also
// multiplied by attn_factor (ggml's mscale: LongRoPE's attention factor; 1 otherwise). Elements
// at or past n_rot are left unchanged.
enum class RopeMode { Norm, Neox };

struct RopeParams {
    RopeMode mode = RopeMode::Norm;
    int n_rot = 0;                        // rotated dimensions (even, <= head_dim)
    float freq_base = 10000.0f;
    float freq_scale = 1.0f;
    const float* freq_factors = nullptr;  // [n_rot / 2] or null
    float attn_factor = 1.0f;             // scale of the rotated elements
};

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions,
          const RopeParams& params);

// out[n] = silu(gate[n]) * up[n], silu(g) = g / (1 + exp(-g)). out may alias gate or up.
void swiglu(const float* gate, const float* up, float* out, int64_t n);

// out[n] = gelu(gate[n]) * up[n], GELU in its tanh form:
// gelu(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))). out may alias gate or up.
void geglu(const float* gate, const float* up, float* out, int64_t n);

// In place: x[n] = exp(x - max) / sum. n >= 1.
void softmax(float* x, int64_t n);

// Soft-capping in place (gemma2's attention and final logits): x[n] = cap * tanh(scale * x / cap),
// cap > 0. One thread (called per attention row, inside the callers' parallel regions).
void softcap(float* x, int64_t n, float scale, float cap);

// y[n, d] += b[d]
void add_bias(float* y, const float* b, int64_t n, int64_t d);

// y[n] += x[n]
void add(float* y, const float* x, int64_t n);

// out[n, w.n_in] = rows ids[0..n) of the embedding matrix w, dequantised.
// Throws kvec::Error for an id outside [0, w.n_out).
void get_rows(const WeightView& w, const int32_t* ids, int64_t n, float* out);

// dst[n] = the n elements of row r of w, dequantised (dst may be any buffer of w.n_in floats).
void dequantize_weight_row(const WeightView& w, int64_t r, float* dst);

}  // namespace kvec::ops
