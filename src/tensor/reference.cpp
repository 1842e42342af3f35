#include "tensor/reference.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "quant/quant.h"
#include "tensor/int8_gemm.h"
#include "util/error.h"

namespace kvec::ref {

void rms_norm(const float* x, const float* w, float* y, int64_t n, int64_t d, float eps) {
    for (int64_t r = 0; r < n; ++r) {
        double ss = 0.0;
        for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(x[r * d + i]) * x[r * d + i];
        const double scale = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
        for (int64_t i = 0; i < d; ++i) y[r * d + i] = static_cast<float>(x[r * d + i] * scale * w[i]);
    }
}

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions,
          const ops::RopeParams& p) {
    const int64_t half = p.n_rot / 2;
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t h = 0; h < n_heads; ++h) {
            float* v = x + (t * n_heads + h) * head_dim;
            for (int64_t i = 0; i < half; ++i) {
                double theta = p.freq_scale * static_cast<double>(positions[t]) *
                               std::pow(static_cast<double>(p.freq_base), -2.0 * i / p.n_rot);
                if (p.freq_factors != nullptr) theta /= p.freq_factors[i];
                // the two elements that form pair i
                const int64_t a = p.mode == ops::RopeMode::Norm ? 2 * i : i;
                const int64_t b = p.mode == ops::RopeMode::Norm ? 2 * i + 1 : i + half;
                const double xa = v[a], xb = v[b];
                const double m = p.attn_factor;
                v[a] = static_cast<float>(m * (xa * std::cos(theta) - xb * std::sin(theta)));
                v[b] = static_cast<float>(m * (xa * std::sin(theta) + xb * std::cos(theta)));
            }
        }
    }
}

void rope_yarn(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
               const int32_t* positions, const ops::RopeParams& p, const ops::YarnParams& y) {
    const int64_t half = p.n_rot / 2;
    auto corr = [&](double turns) {
        return p.n_rot * std::log(y.n_ctx_orig / (turns * 2.0 * M_PI)) /
               (2.0 * std::log(static_cast<double>(p.freq_base)));
    };
    const double low = std::max(0.0, std::floor(corr(y.beta_fast)));
    const double high = std::min(static_cast<double>(p.n_rot - 1), std::ceil(corr(y.beta_slow)));
    double mscale = p.attn_factor;
    if (y.ext_factor != 0.0f) mscale *= 1.0 + 0.1 * std::log(1.0 / y.freq_scale);
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t h = 0; h < n_heads; ++h) {
            float* v = x + (t * n_heads + h) * head_dim;
            for (int64_t i = 0; i < half; ++i) {
                double extrap = static_cast<double>(positions[t]) *
                                std::pow(static_cast<double>(p.freq_base), -2.0 * i / p.n_rot);
                if (p.freq_factors != nullptr) extrap /= p.freq_factors[i];
                const double interp = y.freq_scale * extrap;
                const double ramp =
                    (1.0 - std::clamp((static_cast<double>(i) - low) / std::max(0.001, high - low),
                                      0.0, 1.0)) *
                    y.ext_factor;
                const double theta = interp * (1.0 - ramp) + extrap * ramp;
                const int64_t a = p.mode == ops::RopeMode::Norm ? 2 * i : i;
                const int64_t b = p.mode == ops::RopeMode::Norm ? 2 * i + 1 : i + half;
                const double xa = v[a], xb = v[b];
                v[a] = static_cast<float>(mscale * (xa * std::cos(theta) - xb * std::sin(theta)));
                v[b] = static_cast<float>(mscale * (xa * std::sin(theta) + xb * std::cos(theta)));
            }
        }
    }
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const double g = gate[i];
        out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
    }
}

void geglu(const float* gate, const float* up, float* out, int64_t n) {
    const double c = std::sqrt(2.0 / M_PI);
    for (int64_t i = 0; i < n; ++i) {
        const double g = gate[i];
        out[i] = static_cast<float>(0.5 * g * (1.0 + std::tanh(c * (g + 0.044715 * g * g * g))) * up[i]);
    }
}

void swiglu_oai(const float* gate, const float* up, float* out, int64_t n, float alpha,
                float limit) {
    for (int64_t i = 0; i < n; ++i) {
        const double g = std::min(static_cast<double>(gate[i]), static_cast<double>(limit));
        const double u = std::clamp(static_cast<double>(up[i]), -static_cast<double>(limit),
                                    static_cast<double>(limit));
        out[i] =
            static_cast<float>(g / (1.0 + std::exp(-static_cast<double>(alpha) * g)) * (u + 1.0));
    }
}

void softcap(float* x, int64_t n, float scale, float cap) {
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(cap * std::tanh(static_cast<double>(scale) * x[i] / cap));
}

void softmax(float* x, int64_t n, float sink) {
    double mx = std::max(x[0], sink);
    for (int64_t i = 1; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
    std::vector<double> e(static_cast<size_t>(n));
    double sum = std::exp(static_cast<double>(sink) - mx);
    for (int64_t i = 0; i < n; ++i) {
        e[static_cast<size_t>(i)] = std::exp(x[i] - mx);
        sum += e[static_cast<size_t>(i)];
    }
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(e[static_cast<size_t>(i)] / sum);
}

void matmul(const float* x, int64_t n, const WeightView& w, float* y) {
    std::vector<float> row(static_cast<size_t>(w.n_in));  // [n_in]
    for (int64_t o = 0; o < w.n_out; ++o) {
        ops::dequantize_weight_row(w, o, row.data());
        for (int64_t t = 0; t < n; ++t) {
            double s = 0.0;
            for (int64_t i = 0; i < w.n_in; ++i) s += static_cast<double>(x[t * w.n_in + i]) * row[static_cast<size_t>(i)];
            y[t * w.n_out + o] = static_cast<float>(s);
        }
    }
}

void attention(const float* q, int64_t nq, int64_t ldq, const KvHeadData& kv, int32_t n_vis,
               float scale, float* p, int64_t ldp, float* out, int64_t ldo, float softcap,
               const float* sinks) {
    const int64_t D = kv.head_dim;
    // The visible entries decoded one row at a time (quant::dequantize_row, the scalar reference of
    // every type's block layout): keys and values [n_vis, D].
    auto decode = [&](GgmlType type, const void* rows) {
        std::vector<float> f(static_cast<size_t>(n_vis * D));
        if (rows == nullptr) return f;
        const size_t row = ggml_row_size(type, D);
        for (int32_t j = 0; j < n_vis; ++j) {
            quant::dequantize_row(type, static_cast<const uint8_t*>(rows) + static_cast<size_t>(j) * row,
                                  f.data() + j * D, D);
        }
        return f;
    };
    const std::vector<float> keys = decode(kv.key_type, kv.keys);
    // Block-quantised keys meet the query quantised to int8 blocks (attention.h): the rows as
    // quantised.
    std::vector<float> q_q8;  // [nq, D]
    if (int8::has_panel_form(kv.key_type)) {
        const int64_t nb = D / int8::kBlock;
        std::vector<int8_t> qi(static_cast<size_t>(D));
        std::vector<float> d(static_cast<size_t>(nb)), hsum(static_cast<size_t>(nb * 2));
        q_q8.resize(static_cast<size_t>(nq * D));
        for (int64_t i = 0; i < nq; ++i) {
            int8::quantize_row_ref(q + i * ldq, D, qi.data(), d.data(), hsum.data());
            for (int64_t e = 0; e < D; ++e) {
                q_q8[static_cast<size_t>(i * D + e)] = d[static_cast<size_t>(e / int8::kBlock)] * qi[static_cast<size_t>(e)];
            }
        }
        q = q_q8.data();
        ldq = D;
    }
    const std::vector<float> values = decode(kv.value_type, out == nullptr ? nullptr : kv.values);
    auto at = [&](const std::vector<float>& rows, int64_t j, int64_t e) -> double {
        return rows[static_cast<size_t>(j * D + e)];
    };
    std::vector<double> s(static_cast<size_t>(n_vis));  // [n_vis] scores, then probabilities
    for (int64_t i = 0; i < nq; ++i) {
        const float* qi = q + i * ldq;  // [D]
        // The row's sink logit joins the denominator only (not scaled, not soft-capped).
        const double sink = sinks != nullptr ? static_cast<double>(sinks[i]) : -INFINITY;
        double mx = sink;
        for (int32_t j = 0; j < n_vis; ++j) {
            double dot = 0.0;
            for (int64_t e = 0; e < D; ++e) dot += static_cast<double>(qi[e]) * at(keys, j, e);
            s[static_cast<size_t>(j)] = dot * scale;
            if (softcap > 0.0f) s[static_cast<size_t>(j)] = softcap * std::tanh(s[static_cast<size_t>(j)] / softcap);
            mx = std::max(mx, s[static_cast<size_t>(j)]);
        }
        double sum = std::exp(sink - mx);
        for (double& v : s) sum += (v = std::exp(v - mx));
        for (int32_t j = 0; j < n_vis; ++j) {
            s[static_cast<size_t>(j)] /= sum;
            p[i * ldp + j] = static_cast<float>(s[static_cast<size_t>(j)]);
        }
        if (out == nullptr) continue;
        for (int64_t e = 0; e < D; ++e) {
            double o = 0.0;
            for (int32_t j = 0; j < n_vis; ++j) o += s[static_cast<size_t>(j)] * at(values, j, e);
            out[i * ldo + e] = static_cast<float>(o);
        }
    }
}

}  // namespace kvec::ref
