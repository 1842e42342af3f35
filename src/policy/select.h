// Selection primitives shared by every eviction policy: the one ranking order used everywhere,
// top-k per head, window handling, and the budget schedules (StreamingLLM, Random, PyramidKV,
// Ada-KV). Pure functions over plain arrays; no model or cache types.
//
// Vocabulary (docs/policies.md): a KV head holds n entries; the last w are the observation
// window and always kept; the first m = n - w are the "prefix candidates" a policy scores and
// selects from. b = B - w is the per-head prefix budget. Selections are ascending entry indices.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

namespace kvec::policy {

// Per-head selection: keep[h] = ascending entry indices kept by head h.
using HeadSelection = std::vector<std::vector<int32_t>>;  // [n_heads][n_kept_h]

// The single ranking order of the whole module (a strict total order):
//   higher score first; NaN ranks below every number (so a broken score never displaces a real
//   one); equal scores (incl. -0 == +0) -> lower index first.
// Every selection (top-k, Ada pool, K-VEC greedy) uses it, which is what makes K-VEC with
// gamma = mu = 0 reproduce Ada-SnapKV bit for bit.
template <typename T>
inline bool ranks_before(T score_a, int64_t index_a, T score_b, int64_t index_b) {
    const bool nan_a = std::isnan(score_a);
    const bool nan_b = std::isnan(score_b);
    if (nan_a != nan_b) return nan_b;
    if (!nan_a && score_a != score_b) return score_a > score_b;
    return index_a < index_b;
}

// Indices of the k best scores (ranks_before order), returned in ascending index order.
// k is clamped to [0, scores.size()]; k < 0 throws kvec::Error.
std::vector<int32_t> top_k(std::span<const float> scores, int64_t k);   // scores: [m]
std::vector<int32_t> top_k(std::span<const double> scores, int64_t k);  // scores: [m]

// All indices sorted best first (ranks_before order).
std::vector<int32_t> rank_order(std::span<const double> scores);  // scores: [m] -> [m]

// Appends the window (entries m .. n-1) to ascending prefix picks (all < m). Returns [k + n - m].
std::vector<int32_t> with_window(std::vector<int32_t> prefix_keep, int64_t n_entries,
                                 int64_t n_prefix);

// Candidate count of a head with n entries and window w: max(0, n - w).
inline int64_t prefix_count(int64_t n_entries, int64_t window) {
    return n_entries > window ? n_entries - window : 0;
}

// 0, 1, ..., n-1.
std::vector<int32_t> iota_indices(int64_t n);

// Views of the rows of a ragged array: [rows][len_r] -> [rows] spans.
template <typename T>
std::vector<std::span<const T>> spans_of(const std::vector<std::vector<T>>& rows) {
    return std::vector<std::span<const T>>(rows.begin(), rows.end());
}

// StreamingLLM: the first `sinks` entries plus the most recent budget - sinks. Keeps all when
// n <= budget. budget < sinks or negative arguments throw kvec::Error.
std::vector<int32_t> streaming_select(int64_t n_entries, int64_t budget, int64_t sinks);

// Deterministic, platform-independent seed mixing (splitmix64 finaliser over the words).
uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0);

// Uniform random k-subset of [0, n) (partial Fisher-Yates driven by splitmix64 with unbiased
// bounded draws), ascending. Same seed -> same subset on every platform. k clamped to [0, n].
std::vector<int32_t> random_subset(int64_t n, int64_t k, uint64_t seed);

// PyramidKV per-layer prefix budgets (window excluded) for b = B - w, n_prefix = N - w:
//   min = b / beta, max = 2b - min; if max >= n_prefix: max = n_prefix, min = 2b - max;
//   step = (max - min) / (L - 1); x_l = max - l * step (real-valued, as the spec writes it);
//   r_l = round(x_l) (half away from zero), then corrected so that sum_l r_l == L * b exactly:
//   an overshoot is taken from the layers rounded up the most (deepest layer first on ties),
//   an undershoot (only from floating error) given to the layers rounded down the most
//   (shallowest first). L = 1 gives [b]. If n_prefix <= b nothing is evicted: every layer gets
//   n_prefix. Requires L >= 1, b >= 0, beta >= 1 (kvec::Error otherwise).
std::vector<int64_t> pyramid_budgets(int64_t n_layers, int64_t b, int64_t n_prefix,
                                     double beta = 20.0);  // -> [L]

// floor(b * alpha), robust to the representation error of alpha (0.29 * 100 -> 29, not 28).
int64_t safeguard_count(int64_t b, double alpha);

// Ada-KV per-head budgets from the pool picks n_h (how many of the layer's top-T pairs fall in
// head h; T = min(H*b, sum cap)) and the candidate counts cap_h:
//   q_h = n_h * (1 - alpha) + floor(b * alpha)
//   budget_h = min(floor(q_h), cap_h), then the remaining units up to the layer total T are
//   handed out largest remainder first: heads ordered by frac(q_h) descending, lower head first
//   on ties, one unit per head per round, skipping full heads, repeating rounds until the total
//   is exactly T. If sum cap <= H*b every head keeps all its candidates.
// Requires 0 <= alpha <= 1, b >= 0, 0 <= n_h <= cap_h (kvec::Error otherwise).
std::vector<int64_t> ada_head_budgets(std::span<const int64_t> picks,     // [H]
                                      std::span<const int64_t> capacity,  // [H]
                                      int64_t b, double alpha);           // -> [H]

// Result of an Ada-KV selection over one layer.
struct AdaSelection {
    std::vector<int64_t> picks;    // [H] pool picks n_h
    std::vector<int64_t> budgets;  // [H] budget_h (sum = min(H*b, sum m_h))
    HeadSelection keep;            // [H][budget_h] ascending prefix indices (window excluded)
};

// Ada-SnapKV selection over prefix scores (already pooled; `normalize` divides each head by its
// sum first, in double, which preserves the order within a head exactly). The pool ranks the
// (head, index) pairs by score, then lower head, then lower index.
AdaSelection ada_select(const std::vector<std::vector<float>>& scores,  // [H][m_h]
                        int64_t b, double alpha, bool normalize);

// Ada-KV with one pool over every head of every layer (layers = global): head (l, h) of the
// flattened problem is l * H + h, the pool holds L * H * b pairs, each head of each layer keeps
// at least floor(b alpha). Per-layer results in layer order. kvec::Error if the layers' head
// counts differ.
std::vector<AdaSelection> ada_select_layers(const std::vector<std::vector<std::vector<float>>>& scores,  // [L][H][m]
                                            int64_t b, double alpha, bool normalize);

// Per-head scores as double, divided by their sum when normalize is set and the sum is
// positive and finite (heads comparable); otherwise the raw values.
std::vector<std::vector<double>> prepare_scores(const std::vector<std::vector<float>>& scores,
                                                bool normalize);  // [H][m_h] -> [H][m_h]

// Ada-KV selection on prepared scores (what ada_select runs after prepare_scores).
AdaSelection ada_select_prepared(const std::vector<std::vector<double>>& scores,  // [H][m_h]
                                 int64_t b, double alpha);

}  // namespace kvec::policy
