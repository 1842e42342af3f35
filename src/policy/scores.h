// Score construction: GQA reduction from query heads to KV heads, 1-D pooling along tokens,
// KeyDiff key scores. Pure functions over plain arrays.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace kvec::policy {

enum class GqaReduce { mean, max };
enum class Pooling { max, avg };

// "mean" | "max" -> GqaReduce; anything else throws kvec::Error naming the value.
GqaReduce parse_gqa_reduce(std::string_view text);
// "max" | "avg" -> Pooling; anything else throws kvec::Error naming the value.
Pooling parse_pooling(std::string_view text);
const char* to_string(GqaReduce mode);
const char* to_string(Pooling mode);

// Reduces per-query-head rows to per-KV-head rows. Query head q belongs to KV head q / G with
// G = H_q / H_kv (the llama / repeat_kv layout). The rows of one group must have equal length
// (groups may differ: chunked mode). mean accumulates in double; max propagates NaN.
// Throws kvec::Error if H_q is not a positive multiple of n_kv_heads or lengths disagree.
std::vector<std::vector<float>> gqa_reduce(
    std::span<const std::span<const float>> rows,  // [H_q][m_g]
    int64_t n_kv_heads, GqaReduce mode);           // -> [H_kv][m_h]

// 1-D pooling along the token axis, stride 1, padding kernel/2, output length = input length:
//   max: out[j] = max(x[j-p .. j+p] inside the array) (padding never wins, as in max_pool1d;
//        a NaN in the window gives NaN);
//   avg: out[j] = sum(x[j-p .. j+p] inside the array) / kernel, i.e. padding counts as zeros in
//        the divisor (PyTorch avg_pool1d, count_include_pad = True).
// kernel must be odd and >= 1 (1 = identity); kvec::Error otherwise.
// follow >= 0 extends the window backwards by `follow` positions, so that a score also reaches the
// `follow` positions that come after it (the tokens that follow what a query attends to):
//   window of out[j] = x[j - p - follow .. j + p]; avg divides by kernel + follow.
// follow = 0 is the symmetric pooling above; a negative follow throws kvec::Error.
std::vector<float> pool1d(std::span<const float> x, int64_t kernel, Pooling mode,
                          int64_t follow = 0);  // [m] -> [m]

// SnapKV scores of one layer: reduce the per-query-head mean-over-window rows (restricted to
// each head's prefix candidates) to KV heads, then pool each KV head's row (pool1d).
std::vector<std::vector<float>> window_scores(
    std::span<const std::span<const float>> rows,  // [H_q][m_g] prefix part of each row
    int64_t n_kv_heads, GqaReduce gqa, int64_t kernel, Pooling pooling,
    int64_t follow = 0);  // -> [H_kv][m_h]

// KeyDiff: score_i = -cos(k_i, anchor) over the n keys of one head (all of them, window included,
// form the anchor): the mean key, or with `unit_anchor` the mean of the keys scaled to unit length
// (kvpress's KeyDiffPress). A zero key or zero anchor has similarity 0 (score 0).
std::vector<float> keydiff_scores(std::span<const float> keys,  // [n, d] row-major
                                  int64_t head_dim,             // -> [n]
                                  bool unit_anchor = false);

}  // namespace kvec::policy
