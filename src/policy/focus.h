// K-VEC's focus design (kvec:design=focus; docs/policies.md "K-VEC", "design=focus"): the parts of
// the method its reviewers describe, on top of the one-pool selection of coverage.h.
//   1. Focus of a head: the spread of its window-attention row over the prefix candidates (STD or
//      entropy). Low-focus heads (diffuse attention) are the share of heads ranked first by a rule
//      (low STD; the controls: high STD, high entropy, random).
//   2. Low-focus heads score with a wider observation window O' (the mean attention of the layer's
//      last O' queries, computed here from the pre-RoPE queries the engine keeps) and weigh
//      (1 + gamma) in the shared pool.
//   3. Cross-layer priority: after a first selection, an entry's score gains
//      nu x ref x (1 - the share of the other layers that keep its unit), and the pool is chosen
//      again (ref: the mean score at rank b over the heads).
// gamma = 0, O' = O and nu = 0 leave the scores as they are (K-VEC's pool design, bit for bit).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "kvcache/eviction.h"
#include "policy/coverage.h"

namespace kvec::policy {

// Which heads count as low-focus: the lowest STD (the design), or a control ranking.
enum class FocusRank { low_std, high_std, entropy, random };
FocusRank parse_focus_rank(std::string_view text);  // "low-std" | "high-std" | "entropy" | "random"
const char* to_string(FocusRank rank);

// Spread of one head's attention row x [m] (non-negative; p = x / sum x):
//   cv      = m x the population STD of p (the STD in units of the mean: 0 for uniform attention,
//             sqrt(m - 1) when one entry holds it all; comparable across prompt lengths);
//   entropy = -sum p log p / log m (1 uniform, 0 one entry).
// m <= 1 or a zero / non-finite sum: cv 0, entropy 1 (nothing to focus on).
struct HeadFocus {
    double cv = 0.0;
    double entropy = 1.0;
};
HeadFocus head_focus(std::span<const float> row);

// Flags [n] of the round(share x n) heads ranked first: lowest cv (low_std), highest cv
// (high_std), highest entropy (entropy), or a uniform random subset drawn from seed (random).
// Ties: lower index first. share in [0, 1] (kvec::Error otherwise).
std::vector<char> low_focus_heads(std::span<const HeadFocus> heads, double share, FocusRank rank,
                                  uint64_t seed);

// The window rows of KV head h over the last min(n_queries, available) queries of the view
// (LayerView::queries, before RoPE): per query head g of the group, the mean over those queries
// of softmax_j(scale x q.k_j) over the head's entries at positions <= the query's (each query
// rotated by view.rope at its position; logits soft-capped by view.attn_softcap). The layout of
// KvHeadView::window_scores: [group, n_h]. Attention sinks (gpt-oss) are not modelled.
// kvec::Error when the view has no queries or keys.
std::vector<float> query_window_rows(const LayerView& view, size_t h, int64_t n_queries);

// The focus stage over one round of layers (layers = global).
struct FocusOptions {
    double share = 0.25;               // share of the round's heads that are low-focus
    double gamma = 1.0;                // weight of low-focus heads: scores x (1 + gamma)
    FocusRank rank = FocusRank::low_std;
    uint64_t seed = 0;                 // rank = random
};
struct FocusHeadInput {
    HeadFocus focus;         // of the head's O-window row
    std::vector<float> wide;  // [m_h] pooled O'-window scores; empty: O' = O (use the scores)
};
// Replaces the scores of the low-focus heads (over every head of every layer) by
// (1 + gamma) x wide (or x their own scores), and returns the flags [L][H].
std::vector<std::vector<char>> apply_focus(std::vector<KvecLayer>& layers,                  // [L]
                                           const std::vector<std::vector<FocusHeadInput>>& heads,  // [L][H]
                                           const FocusOptions& options);

// Cross-layer priority (step 3) from a first selection of the same round: for every layer l and
// candidate with unit u, scores += nu x ref x (1 - c_{-l}(u) / (L - 1)), c_{-l}(u) = the other
// layers whose kept entries (any head) carry u; ref = mean over the heads of the score at rank
// min(b, m_h). L = 1: no change.
void add_cross_layer_priority(std::vector<KvecLayer>& layers, const std::vector<KvecSelection>& first, int64_t b,
                              double nu);

}  // namespace kvec::policy
