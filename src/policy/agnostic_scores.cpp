#include "policy/agnostic_scores.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "policy/select.h"
#include "util/error.h"

namespace kvec::policy {

namespace {

size_t sz(int64_t n) { return static_cast<size_t>(n); }

int64_t rows_of(std::span<const float> a, int64_t head_dim, const char* what) {
    if (head_dim < 1) fail("{}: head dimension must be >= 1, got {}", what, head_dim);
    if (a.size() % sz(head_dim) != 0) {
        fail("{}: {} values is not a multiple of head dimension {}", what, a.size(), head_dim);
    }
    return static_cast<int64_t>(a.size()) / head_dim;
}

// LagKV's score of the entries of one partition [lag, d] against the next partition [lag, d]:
// the standard deviation over channels of the min-max normalised entry, softmax over the
// partition. -> out[lag].
void lag_part(const float* part, const float* ref, int64_t lag, int64_t d, double* out) {
    std::vector<float> lo(sz(d), std::numeric_limits<float>::infinity());    // [d]
    std::vector<float> hi(sz(d), -std::numeric_limits<float>::infinity());   // [d]
    for (int64_t i = 0; i < lag; ++i) {
        for (int64_t c = 0; c < d; ++c) {
            lo[sz(c)] = std::min(lo[sz(c)], ref[i * d + c]);
            hi[sz(c)] = std::max(hi[sz(c)], ref[i * d + c]);
        }
    }
    std::vector<double> s(sz(lag));  // [lag] standard deviations
    std::vector<double> x(sz(d));    // [d] one normalised entry
    for (int64_t i = 0; i < lag; ++i) {
        double mean = 0.0;
        for (int64_t c = 0; c < d; ++c) {
            const double range = static_cast<double>(hi[sz(c)]) - lo[sz(c)];
            x[sz(c)] = range > 0.0 ? (part[i * d + c] - static_cast<double>(lo[sz(c)])) / range : 0.0;
            mean += x[sz(c)];
        }
        mean /= static_cast<double>(d);
        double ss = 0.0;
        for (int64_t c = 0; c < d; ++c) ss += (x[sz(c)] - mean) * (x[sz(c)] - mean);
        s[sz(i)] = d > 1 ? std::sqrt(ss / static_cast<double>(d - 1)) : 0.0;
    }
    const double top = *std::max_element(s.begin(), s.end());
    double sum = 0.0;
    for (int64_t i = 0; i < lag; ++i) sum += (out[i] = std::exp(s[sz(i)] - top));
    for (int64_t i = 0; i < lag; ++i) out[i] /= sum;
}

}  // namespace

std::vector<float> knorm_scores(std::span<const float> keys, int64_t head_dim) {
    const int64_t n = rows_of(keys, head_dim, "knorm");
    std::vector<float> out(sz(n));  // [n]
    for (int64_t i = 0; i < n; ++i) {
        double ss = 0.0;
        for (int64_t c = 0; c < head_dim; ++c) ss += static_cast<double>(keys[sz(i * head_dim + c)]) * keys[sz(i * head_dim + c)];
        out[sz(i)] = static_cast<float>(-std::sqrt(ss));
    }
    return out;
}

std::vector<float> lagkv_scores(std::span<const float> keys, std::span<const float> values,
                                int64_t head_dim, const LagKvOptions& o) {
    const int64_t n = rows_of(keys, head_dim, "lagkv");
    if (rows_of(values, head_dim, "lagkv") != n) fail("lagkv: {} keys but {} values", n, values.size() / sz(head_dim));
    if (o.sinks < 0 || o.lag < 1) fail("lagkv: sinks must be >= 0 and lag >= 1 (got {} and {})", o.sinks, o.lag);
    std::vector<float> out(sz(n));  // [n]
    const int64_t d = head_dim;
    // Partitions p = 0 .. n_scored - 1 start at sinks + p * lag; each needs a complete successor.
    const int64_t full = n > o.sinks ? (n - o.sinks) / o.lag : 0;
    const int64_t n_scored = std::max<int64_t>(0, full - 1);
    std::vector<double> ks(sz(o.lag)), vs(sz(o.lag)), score(sz(o.lag));  // [lag]
    for (int64_t p = 0; p < n_scored; ++p) {
        const int64_t b = o.sinks + p * o.lag;
        lag_part(keys.data() + b * d, keys.data() + (b + o.lag) * d, o.lag, d, ks.data());
        lag_part(values.data() + b * d, values.data() + (b + o.lag) * d, o.lag, d, vs.data());
        for (int64_t i = 0; i < o.lag; ++i) score[sz(i)] = (ks[sz(i)] + vs[sz(i)]) / 2.0;
        if (o.cross) {
            for (int64_t i = 0; i < o.lag; ++i) out[sz(b + i)] = static_cast<float>(score[sz(i)]);
        } else {
            const std::vector<int32_t> order = rank_order(score);  // [lag] best first
            for (int64_t r = 0; r < o.lag; ++r) {
                out[sz(b + order[sz(r)])] = static_cast<float>(o.lag - 1 - r) / static_cast<float>(o.lag);
            }
        }
    }
    for (int64_t i = 0; i < std::min(o.sinks, n); ++i) out[sz(i)] = std::numeric_limits<float>::infinity();
    for (int64_t i = std::max(o.sinks, o.sinks + n_scored * o.lag); i < n; ++i) {
        out[sz(i)] = 2.0f + static_cast<float>(i + 1) / static_cast<float>(n);
    }
    return out;
}

QueryStats query_stats(std::span<const float> queries, std::span<const int32_t> positions, int n_head,
                       int head_dim, int head, int32_t min_position, bool covariance) {
    KVEC_CHECK(n_head >= 1 && head_dim >= 1 && head >= 0 && head < n_head);
    const int64_t stride = int64_t{n_head} * head_dim;
    const int64_t n_q = static_cast<int64_t>(positions.size());
    KVEC_CHECK(static_cast<int64_t>(queries.size()) == n_q * stride);
    const auto d = sz(head_dim);
    QueryStats s;
    s.mean.assign(d, 0.0);
    if (covariance) s.cov.assign(d * d, 0.0);
    int64_t count = 0;
    for (int64_t t = 0; t < n_q; ++t) {
        if (positions[sz(t)] < min_position) continue;
        const float* q = queries.data() + t * stride + int64_t{head} * head_dim;  // [d]
        for (size_t a = 0; a < d; ++a) s.mean[a] += q[a];
        ++count;
    }
    if (count == 0) return s;
    for (double& v : s.mean) v /= static_cast<double>(count);
    if (!covariance) return s;
    std::vector<double> c(d);  // [d] one centred query
    for (int64_t t = 0; t < n_q; ++t) {
        if (positions[sz(t)] < min_position) continue;
        const float* q = queries.data() + t * stride + int64_t{head} * head_dim;  // [d]
        for (size_t a = 0; a < d; ++a) c[a] = q[a] - s.mean[a];
        for (size_t a = 0; a < d; ++a) {
            for (size_t b = 0; b < d; ++b) s.cov[a * d + b] += c[a] * c[b];
        }
    }
    for (double& v : s.cov) v /= static_cast<double>(count);
    return s;
}

AveragedRope averaged_rope(const RopeInfo& rope, int64_t first_position, int64_t n_future) {
    if (n_future < 1) fail("expected-attention: the number of future positions must be >= 1, got {}", n_future);
    KVEC_CHECK(rope.n_rot >= 0 && rope.n_rot % 2 == 0);
    AveragedRope r;
    r.neox = rope.neox;
    r.n_rot = rope.n_rot;
    const auto half = sz(rope.n_rot / 2);
    r.cos.resize(half);
    r.sin.resize(half);
    for (size_t i = 0; i < half; ++i) {
        double f = std::pow(static_cast<double>(rope.freq_base), -2.0 * static_cast<double>(i) / rope.n_rot);
        f *= rope.freq_scale;
        if (rope.freq_factors != nullptr) f /= rope.freq_factors[i];
        double sc = 0.0, ss = 0.0;
        for (int64_t t = 0; t < n_future; ++t) {
            const double angle = static_cast<double>(first_position + t) * f;
            sc += std::cos(angle);
            ss += std::sin(angle);
        }
        r.cos[i] = sc / static_cast<double>(n_future);
        r.sin[i] = ss / static_cast<double>(n_future);
    }
    return r;
}

void rotate(QueryStats& s, const AveragedRope& r, int head_dim) {
    const auto d = sz(head_dim);
    KVEC_CHECK(s.mean.size() == d && (s.cov.empty() || s.cov.size() == d * d) && r.n_rot <= head_dim);
    const size_t half = r.cos.size();
    // Rbar is block diagonal: pair i turns (x_a, x_b) into (c x_a - s x_b, s x_a + c x_b).
    auto pair = [&](size_t i) {
        return r.neox ? std::pair<size_t, size_t>{i, i + half} : std::pair<size_t, size_t>{2 * i, 2 * i + 1};
    };
    for (size_t i = 0; i < half; ++i) {
        const auto [a, b] = pair(i);
        const double xa = s.mean[a], xb = s.mean[b];
        s.mean[a] = r.cos[i] * xa - r.sin[i] * xb;
        s.mean[b] = r.sin[i] * xa + r.cos[i] * xb;
    }
    if (s.cov.empty()) return;
    for (size_t i = 0; i < half; ++i) {  // rows: Rbar cov
        const auto [a, b] = pair(i);
        for (size_t k = 0; k < d; ++k) {
            const double xa = s.cov[a * d + k], xb = s.cov[b * d + k];
            s.cov[a * d + k] = r.cos[i] * xa - r.sin[i] * xb;
            s.cov[b * d + k] = r.sin[i] * xa + r.cos[i] * xb;
        }
    }
    for (size_t i = 0; i < half; ++i) {  // columns: (Rbar cov) Rbar^T
        const auto [a, b] = pair(i);
        for (size_t k = 0; k < d; ++k) {
            const double xa = s.cov[k * d + a], xb = s.cov[k * d + b];
            s.cov[k * d + a] = r.cos[i] * xa - r.sin[i] * xb;
            s.cov[k * d + b] = r.sin[i] * xa + r.cos[i] * xb;
        }
    }
}

std::vector<double> expected_logits(std::span<const float> keys, int head_dim, const QueryStats& s) {
    const int64_t n = rows_of(keys, head_dim, "expected-attention");
    const auto d = sz(head_dim);
    KVEC_CHECK(s.mean.size() == d && (s.cov.empty() || s.cov.size() == d * d));
    const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(head_dim));
    const double inv_2d = 1.0 / (2.0 * static_cast<double>(head_dim));
    // The quadratic form k^T cov k: v = cov k as a sum of rows scaled by k[a] (cov is symmetric),
    // a loop the compiler vectorises without reordering a reduction, in float; then k . v in double.
    std::vector<float> cov(s.cov.begin(), s.cov.end());  // [d, d]
    std::vector<float> v(d);                             // [d] cov k
    std::vector<double> out(sz(n));                      // [n]
    for (int64_t i = 0; i < n; ++i) {
        const float* k = keys.data() + i * head_dim;  // [d]
        double lin = 0.0;
        for (size_t a = 0; a < d; ++a) lin += s.mean[a] * k[a];
        double quad = 0.0;
        if (!cov.empty()) {
            std::fill(v.begin(), v.end(), 0.0f);
            for (size_t a = 0; a < d; ++a) {
                const float* row = cov.data() + a * d;  // [d]
                const float ka = k[a];
                for (size_t b = 0; b < d; ++b) v[b] += ka * row[b];
            }
            for (size_t b = 0; b < d; ++b) quad += static_cast<double>(k[b]) * v[b];
        }
        out[sz(i)] = lin * inv_sqrt_d + quad * inv_2d;
    }
    return out;
}

}  // namespace kvec::policy
