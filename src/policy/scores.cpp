#include "policy/scores.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace kvec::policy {

GqaReduce parse_gqa_reduce(std::string_view text) {
    if (text == "mean") return GqaReduce::mean;
    if (text == "max") return GqaReduce::max;
    fail("unknown GQA reduction '{}' (expected mean or max)", text);
}

Pooling parse_pooling(std::string_view text) {
    if (text == "max") return Pooling::max;
    if (text == "avg") return Pooling::avg;
    fail("unknown pooling '{}' (expected max or avg)", text);
}

const char* to_string(GqaReduce mode) { return mode == GqaReduce::mean ? "mean" : "max"; }
const char* to_string(Pooling mode) { return mode == Pooling::max ? "max" : "avg"; }

std::vector<std::vector<float>> gqa_reduce(std::span<const std::span<const float>> rows,
                                           int64_t n_kv_heads, GqaReduce mode) {
    const int64_t n_q = static_cast<int64_t>(rows.size());
    if (n_kv_heads < 1 || n_q < n_kv_heads || n_q % n_kv_heads != 0) {
        fail("GQA: {} query heads cannot be grouped onto {} KV heads", n_q, n_kv_heads);
    }
    const int64_t G = n_q / n_kv_heads;
    std::vector<std::vector<float>> out(static_cast<size_t>(n_kv_heads));  // [H_kv][m_h]
    for (int64_t h = 0; h < n_kv_heads; ++h) {
        const size_t m = rows[static_cast<size_t>(h * G)].size();
        for (int64_t g = 1; g < G; ++g) {
            if (rows[static_cast<size_t>(h * G + g)].size() != m) {
                fail("GQA: query heads of KV head {} have different lengths ({} vs {})", h, m,
                     rows[static_cast<size_t>(h * G + g)].size());
            }
        }
        std::vector<float>& dst = out[static_cast<size_t>(h)];
        dst.resize(m);
        for (size_t i = 0; i < m; ++i) {
            if (mode == GqaReduce::mean) {
                double sum = 0.0;
                for (int64_t g = 0; g < G; ++g) sum += rows[static_cast<size_t>(h * G + g)][i];
                dst[i] = static_cast<float>(sum / static_cast<double>(G));
            } else {
                float best = rows[static_cast<size_t>(h * G)][i];
                for (int64_t g = 1; g < G; ++g) {
                    const float v = rows[static_cast<size_t>(h * G + g)][i];
                    if (std::isnan(v) || v > best) best = v;
                    if (std::isnan(best)) break;
                }
                dst[i] = best;
            }
        }
    }
    return out;
}

std::vector<float> pool1d(std::span<const float> x, int64_t kernel, Pooling mode, int64_t follow) {
    if (kernel < 1 || kernel % 2 == 0) {
        fail("pooling kernel must be an odd number >= 1, got {}", kernel);
    }
    if (follow < 0) fail("pooling: follow must be >= 0, got {}", follow);
    const int64_t m = static_cast<int64_t>(x.size());
    const int64_t pad = kernel / 2;
    std::vector<float> out(x.size());  // [m]
    for (int64_t j = 0; j < m; ++j) {
        const int64_t lo = std::max<int64_t>(0, j - pad - follow);
        const int64_t hi = std::min<int64_t>(m - 1, j + pad);
        if (mode == Pooling::max) {
            float best = x[static_cast<size_t>(lo)];
            for (int64_t i = lo + 1; i <= hi && !std::isnan(best); ++i) {
                const float v = x[static_cast<size_t>(i)];
                if (std::isnan(v) || v > best) best = v;
            }
            out[static_cast<size_t>(j)] = best;
        } else {
            double sum = 0.0;
            for (int64_t i = lo; i <= hi; ++i) sum += x[static_cast<size_t>(i)];
            out[static_cast<size_t>(j)] = static_cast<float>(sum / static_cast<double>(kernel + follow));
        }
    }
    return out;
}

std::vector<std::vector<float>> window_scores(std::span<const std::span<const float>> rows,
                                              int64_t n_kv_heads, GqaReduce gqa, int64_t kernel,
                                              Pooling pooling, int64_t follow) {
    std::vector<std::vector<float>> reduced = gqa_reduce(rows, n_kv_heads, gqa);  // [H_kv][m_h]
    for (auto& head : reduced) head = pool1d(head, kernel, pooling, follow);
    return reduced;
}

std::vector<float> keydiff_scores(std::span<const float> keys, int64_t head_dim, bool unit_anchor) {
    if (head_dim < 1) fail("keydiff: head dimension must be >= 1, got {}", head_dim);
    if (keys.size() % static_cast<size_t>(head_dim) != 0) {
        fail("keydiff: {} key values is not a multiple of head dimension {}", keys.size(),
             head_dim);
    }
    const size_t d = static_cast<size_t>(head_dim);
    const size_t n = keys.size() / d;
    std::vector<double> mean(d, 0.0);  // [d]
    for (size_t i = 0; i < n; ++i) {
        double scale = 1.0;
        if (unit_anchor) {
            double norm2 = 0.0;
            for (size_t c = 0; c < d; ++c) norm2 += static_cast<double>(keys[i * d + c]) * keys[i * d + c];
            scale = norm2 > 0.0 ? 1.0 / std::sqrt(norm2) : 0.0;
        }
        for (size_t c = 0; c < d; ++c) mean[c] += scale * keys[i * d + c];
    }
    double mean_norm2 = 0.0;
    for (double& v : mean) {
        v /= static_cast<double>(std::max<size_t>(n, 1));
        mean_norm2 += v * v;
    }
    std::vector<float> out(n);  // [n]
    for (size_t i = 0; i < n; ++i) {
        double dot = 0.0, norm2 = 0.0;
        for (size_t c = 0; c < d; ++c) {
            dot += keys[i * d + c] * mean[c];
            norm2 += static_cast<double>(keys[i * d + c]) * keys[i * d + c];
        }
        const double denom = std::sqrt(norm2) * std::sqrt(mean_norm2);
        out[i] = denom > 0.0 ? static_cast<float>(-dot / denom) : 0.0f;
    }
    return out;
}

}  // namespace kvec::policy
