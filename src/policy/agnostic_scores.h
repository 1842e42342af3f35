// Scores of the query-agnostic baselines (docs/policies.md): Knorm, LagKV and Expected Attention
// over one KV head's entries. Pure functions over plain arrays; the policies (knorm.cpp,
// lagkv.cpp, expected_attention.cpp, kvzip.cpp) restrict them to the prefix candidates and select.
// Higher score = more worth keeping, as everywhere in the module.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvcache/eviction.h"

namespace kvec::policy {

// Knorm: score_i = -||k_i||_2 (keys with small norms are kept). keys [n, head_dim].
std::vector<float> knorm_scores(std::span<const float> keys, int64_t head_dim);  // -> [n]

// LagKV over the n entries of one head (cache order), keys and values [n, head_dim]:
//   entries [0, sinks): +inf (always first);
//   partitions of `lag` entries from `sinks`; partition p is scored when partition p + 1 is
//   complete: for x = k_i (and likewise v_i), per channel c, x'_c = (x_c - min_c) / (max_c - min_c)
//   with min / max over the lag entries of partition p + 1 (a channel whose range is 0 gives 0);
//   s_i = the standard deviation of x' over the channels (divisor head_dim - 1), then a softmax of
//   s over the partition; score_i = (key part + value part) / 2;
//   cross = false: score_i = (lag - 1 - r_i) / lag instead, r_i = the rank of i in its partition
//   (0 = highest, equal scores: lower index first), so that every partition fares alike;
//   the rest (entries whose partition has no complete successor, the "tail"): 2 + (i + 1) / n,
//   above every scored entry, most recent first.
struct LagKvOptions {
    int64_t sinks = 4;
    int64_t lag = 128;
    bool cross = false;
};
std::vector<float> lagkv_scores(std::span<const float> keys, std::span<const float> values,
                                int64_t head_dim, const LagKvOptions& options);  // -> [n]

// Gaussian statistics of one query head: mean [d] and covariance [d, d] (divided by the count).
struct QueryStats {
    std::vector<double> mean;  // [d]
    std::vector<double> cov;   // [d, d] row-major (empty: not computed)
};

// Statistics of query head `head` over the rows of `queries` ([n_q, n_head * head_dim], the
// view's pre-RoPE queries) whose position is >= min_position. No row: mean and covariance 0.
QueryStats query_stats(std::span<const float> queries, std::span<const int32_t> positions, int n_head,
                       int head_dim, int head, int32_t min_position, bool covariance);

// The RoPE rotation averaged over positions [first_position, first_position + n_future): per
// rotated pair, the mean cosine and sine of its angles (in double).
struct AveragedRope {
    bool neox = false;
    int n_rot = 0;
    std::vector<double> cos, sin;  // [n_rot / 2]
};
AveragedRope averaged_rope(const RopeInfo& rope, int64_t first_position, int64_t n_future);

// The statistics of the same queries after RoPE at a position drawn uniformly from those
// positions: mean' = Rbar mean, cov' = Rbar cov Rbar^T (Rbar: the averaged rotation, identity
// past n_rot).
void rotate(QueryStats& stats, const AveragedRope& rbar, int head_dim);

// Expected Attention's logits of n post-RoPE keys [n, head_dim] under queries ~ N(mean, cov):
// z_i = mean . k_i / sqrt(d) + k_i^T cov k_i / (2 d) (the log of E[exp(q . k_i / sqrt(d))]);
// the second term only when the covariance was computed.
std::vector<double> expected_logits(std::span<const float> keys, int head_dim,
                                    const QueryStats& stats);  // -> [n]

}  // namespace kvec::policy
