#include "tensor/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "quant/quant.h"
#include "tensor/int8_gemm.h"
#include "tensor/kernels.h"
#include "tensor/dispatch.h"
#include "util/error.h"
#include "util/fp16.h"

namespace kvec {

WeightView make_weight_view(const char* name, GgmlType type, const void* data, int64_t n_in,
                            int64_t n_out) {
    const GgmlTypeTraits& traits = ggml_type_traits(type);
    if (n_in <= 0 || n_out <= 0) fail("tensor '{}': empty shape [{}, {}]", name, n_in, n_out);
    if (n_in % traits.block_size != 0) {
        fail("tensor '{}': rows of {} elements are not a whole number of {} blocks ({} elements)",
             name, n_in, traits.name, traits.block_size);
    }
    WeightView w;
    w.type = type;
    w.data = static_cast<const uint8_t*>(data);
    w.n_in = n_in;
    w.n_out = n_out;
    w.row_bytes = ggml_row_size(type, n_in);
    return w;
}

WeightView WeightView::rows(int64_t first, int64_t n) const {
    KVEC_CHECK(first >= 0 && n > 0 && first + n <= n_out);
    WeightView v = *this;
    v.data = row(first);
    v.n_out = n;
    v.panels = panels != nullptr && first % 16 == 0 ? panels + int8::load_panels_bytes(type, first, n_in) : nullptr;
    v.decode_rows = decode_rows != nullptr ? decode_rows + static_cast<size_t>(first) * row_bytes : nullptr;
    return v;
}

namespace ops {

namespace {
// Below this many floats a loop is not worth an OpenMP team.
constexpr int64_t kParallelMin = 1 << 15;
}  // namespace

void rms_norm(const float* x, const float* w, float* y, int64_t n, int64_t d, float eps) {
#pragma omp parallel for schedule(static) if (n * d >= kParallelMin)
    for (int64_t r = 0; r < n; ++r) {
        const float* xr = x + r * d;  // [d]
        float* yr = y + r * d;        // [d]
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int64_t i = 0; i < d; ++i) ss += xr[i] * xr[i];
        const float scale = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
#pragma omp simd
        for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] * scale * w[i];
    }
}

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions,
          const RopeParams& p) {
    KVEC_CHECK(p.n_rot > 0 && p.n_rot % 2 == 0 && p.n_rot <= head_dim);
    const int64_t half = p.n_rot / 2;
    // inverse frequencies, including scaling: [half]
    std::vector<double> inv_freq(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
        double f = std::pow(static_cast<double>(p.freq_base), -2.0 * static_cast<double>(i) / p.n_rot);
        f *= p.freq_scale;
        if (p.freq_factors != nullptr) f /= p.freq_factors[i];
        inv_freq[static_cast<size_t>(i)] = f;
    }
#pragma omp parallel if (n_tokens * n_heads * head_dim >= kParallelMin)
    {
        std::vector<float> cs(static_cast<size_t>(2 * half));  // [half] cos, then [half] sin
#pragma omp for schedule(static)
        for (int64_t t = 0; t < n_tokens; ++t) {
            for (int64_t i = 0; i < half; ++i) {
                const double theta = static_cast<double>(positions[t]) * inv_freq[static_cast<size_t>(i)];
                cs[static_cast<size_t>(i)] = static_cast<float>(p.attn_factor * std::cos(theta));
                cs[static_cast<size_t>(half + i)] = static_cast<float>(p.attn_factor * std::sin(theta));
            }
            const float* c = cs.data();
            const float* s = cs.data() + half;
            for (int64_t h = 0; h < n_heads; ++h) {
                float* v = x + (t * n_heads + h) * head_dim;  // [head_dim]
                if (p.mode == RopeMode::Norm) {
                    for (int64_t i = 0; i < half; ++i) {
                        const float a = v[2 * i], b = v[2 * i + 1];
                        v[2 * i] = a * c[i] - b * s[i];
                        v[2 * i + 1] = a * s[i] + b * c[i];
                    }
                } else {
#pragma omp simd
                    for (int64_t i = 0; i < half; ++i) {
                        const float a = v[i], b = v[i + half];
                        v[i] = a * c[i] - b * s[i];
                        v[i + half] = a * s[i] + b * c[i];
                    }
                }
            }
        }
    }
}

namespace {
// ggml_rope_yarn_corr_dim: the pair index whose wavelength fits n_rot_turns turns into the
// original context.
float yarn_corr_dim(int n_rot, int n_ctx_orig, float n_rot_turns, float base) {
    return static_cast<float>(n_rot) *
           std::log(static_cast<float>(n_ctx_orig) /
                    (n_rot_turns * 2.0f * static_cast<float>(M_PI))) /
           (2.0f * std::log(base));
}
}  // namespace

std::vector<float> yarn_freq_factors(int n_rot, float freq_base, const YarnParams& y,
                                     const float* freq_factors) {
    KVEC_CHECK(n_rot > 0 && n_rot % 2 == 0 && y.n_ctx_orig > 0 && y.freq_scale > 0.0f);
    const float low =
        std::max(0.0f, std::floor(yarn_corr_dim(n_rot, y.n_ctx_orig, y.beta_fast, freq_base)));
    const float high =
        std::min(static_cast<float>(n_rot - 1),
                 std::ceil(yarn_corr_dim(n_rot, y.n_ctx_orig, y.beta_slow, freq_base)));
    std::vector<float> out(static_cast<size_t>(n_rot / 2));  // [n_rot / 2]
    for (int i = 0; i < n_rot / 2; ++i) {
        const float r = (static_cast<float>(i) - low) / std::max(0.001f, high - low);
        const double ramp =
            static_cast<double>(1.0f - std::min(1.0f, std::max(0.0f, r))) * y.ext_factor;
        const double ff = freq_factors != nullptr ? freq_factors[i] : 1.0;
        out[static_cast<size_t>(i)] = static_cast<float>(ff / (y.freq_scale * (1.0 - ramp) + ramp));
    }
    return out;
}

float yarn_mscale(const YarnParams& y) {
    return y.ext_factor != 0.0f ? 1.0f + 0.1f * std::log(1.0f / y.freq_scale) : 1.0f;
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
    if (active_cpu_kernel() == CpuKernel::Avx2) {
        constexpr int64_t kChunk = 4096;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
        for (int64_t c = 0; c < n; c += kChunk) {
            kernels::swiglu_avx2(gate + c, up + c, out + c, std::min(kChunk, n - c));
        }
        return;
    }
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        out[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
}

void swiglu_oai(const float* gate, const float* up, float* out, int64_t n, float alpha,
                float limit) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
        const float g = std::min(gate[i], limit);
        const float u = std::clamp(up[i], -limit, limit);
        out[i] = g / (1.0f + std::exp(-alpha * g)) * (u + 1.0f);
    }
}

// 0.5 g (1 + tanh(y)) = g sigmoid(2 y): the same exp-based form as swiglu.
void geglu(const float* gate, const float* up, float* out, int64_t n) {
    if (active_cpu_kernel() == CpuKernel::Avx2) {
        constexpr int64_t kChunk = 4096;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
        for (int64_t c = 0; c < n; c += kChunk) {
            kernels::geglu_avx2(gate + c, up + c, out + c, std::min(kChunk, n - c));
        }
        return;
    }
    constexpr float kC = -2.0f * 0.7978845608028654f;  // -2 sqrt(2 / pi)
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        out[i] = g / (1.0f + std::exp(kC * g * (1.0f + 0.044715f * g * g))) * up[i];
    }
}

void softcap(float* x, int64_t n, float scale, float cap) {
    if (active_cpu_kernel() == CpuKernel::Avx2) {
        kernels::softcap_avx2(x, n, scale, cap);
        return;
    }
    const float k = scale / cap;
    for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(k * x[i]);
}

float softmax(float* x, int64_t n, float sink) {
    if (active_cpu_kernel() == CpuKernel::Avx2) return kernels::softmax_avx2(x, n, sink);
    float mx = x[0] > sink ? x[0] : sink;
    for (int64_t i = 1; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
    float sum = std::exp(sink - mx);  // 0 without a sink
    for (int64_t i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - mx);
        sum += x[i];
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) x[i] *= inv;
    return mx + std::log(sum);
}

void add_bias(float* y, const float* b, int64_t n, int64_t d) {
    for (int64_t r = 0; r < n; ++r) {
        float* yr = y + r * d;  // [d]
#pragma omp simd
        for (int64_t i = 0; i < d; ++i) yr[i] += b[i];
    }
}

void add(float* y, const float* x, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void dequantize_weight_row(const WeightView& w, int64_t r, float* dst) {
    const uint8_t* src = w.row(r);
    switch (w.type) {
        case GgmlType::F32:
            std::memcpy(dst, src, static_cast<size_t>(w.n_in) * sizeof(float));
            return;
        case GgmlType::F16: {
            const auto* h = reinterpret_cast<const uint16_t*>(src);
            for (int64_t i = 0; i < w.n_in; ++i) dst[i] = fp16_to_float(h[i]);
            return;
        }
        case GgmlType::BF16: {
            const auto* h = reinterpret_cast<const uint16_t*>(src);
            for (int64_t i = 0; i < w.n_in; ++i) dst[i] = bf16_to_float(h[i]);
            return;
        }
        default:
            quant::dequantize_row(w.type, src, dst, w.n_in);
    }
}

void get_rows(const WeightView& w, const int32_t* ids, int64_t n, float* out) {
    for (int64_t t = 0; t < n; ++t) {
        if (ids[t] < 0 || ids[t] >= w.n_out) {
            fail("token id {} is outside the vocabulary [0, {})", ids[t], w.n_out);
        }
    }
#pragma omp parallel for schedule(static) if (n * w.n_in >= kParallelMin)
    for (int64_t t = 0; t < n; ++t) dequantize_weight_row(w, ids[t], out + t * w.n_in);
}

}  // namespace ops
}  // namespace kvec
