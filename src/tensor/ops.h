// Element-wise and row-wise tensor operations of the forward pass. All buffers are row-major
// float32; shapes are given as [rows, cols]. The functions here are the production versions
// (vectorisable loops, OpenMP over rows where the work is large enough); reference.h holds
// straightforward scalar references in double precision that the tests compare against.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

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

// YaRN (rope.scaling.type yarn), as ggml's rope computes it (ggml-cpu/ops.cpp rope_yarn,
// ggml_rope_yarn_corr_dims): pair i's angle mixes the interpolated theta * freq_scale and the
// extrapolated theta by ramp_i = ext_factor * (1 - clamp((i - low) / max(0.001, high - low), 0,
// 1)), with low = max(0, floor(corr(beta_fast))), high = min(n_rot - 1, ceil(corr(beta_slow))),
// corr(b) = n_rot * ln(n_ctx_orig / (2 pi b)) / (2 ln freq_base); every rotated element is scaled
// by 1 + 0.1 ln(1 / freq_scale) (yarn_mscale). Both angles are linear in the position, so YaRN is
// the plain rotation with per-pair divisors: yarn_freq_factors returns [n_rot / 2] divisors
// freq_factors[i] / (freq_scale (1 - ramp_i) + ramp_i) (freq_factors: null or the file's), to be
// used with freq_scale = 1 (session.h's rope_params); ref::rope_yarn is the direct formula.
struct YarnParams {
    float freq_scale = 1.0f;  // 1 / rope.scaling.factor
    int n_ctx_orig = 0;       // rope.scaling.original_context_length
    float ext_factor = 1.0f;  // llama.cpp: 1 for yarn
    float beta_fast = 32.0f;  // llama.cpp's defaults
    float beta_slow = 1.0f;
};
std::vector<float> yarn_freq_factors(int n_rot, float freq_base, const YarnParams& yarn,
                                     const float* freq_factors);
float yarn_mscale(const YarnParams& yarn);

// out[n] = silu(gate[n]) * up[n], silu(g) = g / (1 + exp(-g)). out may alias gate or up.
void swiglu(const float* gate, const float* up, float* out, int64_t n);

// gpt-oss's clamped SwiGLU (ggml's swiglu_oai, alpha 1.702, limit 7): with g = min(gate, limit)
// and u = clamp(up, -limit, limit), out[n] = g / (1 + exp(-alpha g)) * (u + 1). out may alias
// gate or up.
constexpr float kSwigluOaiAlpha = 1.702f;
constexpr float kSwigluOaiLimit = 7.0f;
void swiglu_oai(const float* gate, const float* up, float* out, int64_t n,
                float alpha = kSwigluOaiAlpha, float limit = kSwigluOaiLimit);

// out[n] = gelu(gate[n]) * up[n], GELU in its tanh form:
// gelu(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))). out may alias gate or up.
void geglu(const float* gate, const float* up, float* out, int64_t n);

// In place: x[n] = exp(x - m) / (sum_j exp(x_j - m) + exp(sink - m)), m = max(max x, sink). n >= 1.
// sink: an attention sink logit (gpt-oss's attn_sinks, one per query head) that joins the
// denominator only, so the row sums to less than 1; -inf (the default): a plain softmax.
// Returns the log of the denominator before the shift, m + log(sum_j exp(x_j - m) + exp(sink - m))
// (the row's log-sum-exp: what merging softmaxes over parts of a row needs).
float softmax(float* x, int64_t n, float sink = -INFINITY);

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
