// K-VEC (coverage-aware eviction) selection and the coverage diagnostics every policy reports.
// Definitions: /work/shared/docs/policies.md "K-VEC"; user-facing summary: docs/policies.md.
//
// A "unit" is what coverage counts: the original position of an entry (default) or its token
// id (coverage unit = token identities). Units are non-negative int32.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "policy/select.h"

namespace kvec::policy {

// position: prompt positions; token: token identities; key: the direction of the entry's key (a
// locality-sensitive hash of the key, per KV head: entries with similar keys share a unit).
enum class CoverageUnit { position, token, key };
// "position" | "token" | "key" -> CoverageUnit; anything else throws kvec::Error.
CoverageUnit parse_coverage_unit(std::string_view text);
const char* to_string(CoverageUnit unit);

// A set of non-negative units (dense bitmap that grows on insert).
class UnitSet {
public:
    // Negative units throw kvec::Error.
    void insert(int32_t unit);
    bool contains(int32_t unit) const {
        if (unit < 0) return false;
        const size_t word = static_cast<size_t>(unit) >> 6;
        return word < bits_.size() && ((bits_[word] >> (unit & 63)) & 1u) != 0;
    }
    int64_t size() const { return count_; }
    void clear();

private:
    std::vector<uint64_t> bits_;  // [ceil((max unit + 1) / 64)]
    int64_t count_ = 0;
};

struct KvecOptions {
    int64_t b = 0;          // prefix budget per KV head (B - w)
    double alpha = 0.2;     // safeguard: every head keeps at least floor(alpha * b)
    double gamma = 1.0;     // cross-head coverage weight, in units of the rank-b score
    double mu = 1.0;        // cross-layer novelty weight: value(u) = 1 + mu * [u not in U]
    bool normalize = true;  // scores of each head divided by their sum (heads comparable)
};

struct KvecSelection {
    double lambda = 0.0;           // gamma * mean_h(s_h at rank b)
    std::vector<int64_t> picks;    // [H] allocation picks n_h (coverage-aware pool)
    std::vector<int64_t> budgets;  // [H] budget_h (sum = min(H*b, sum m_h))
    HeadSelection keep;            // [H][budget_h] ascending prefix indices (window excluded)
    bool fallback = false;         // the coverage guard replaced the greedy by Ada-KV's choice
};

// Weight of the entries' units in the coverage term (1 for every unit when absent).
//   uniform: 1;  idf: log(M / c(u)), the self-information of the unit among the M candidates of
//   the layer (c(u) of them carry u), divided by its mean over the candidates, so that gamma
//   keeps its scale: a rare unit (a number, a name, an unusual key) counts more than a frequent
//   one (a common word, a typical key).
enum class UnitWeight { uniform, idf };
UnitWeight parse_unit_weight(std::string_view text);  // "uniform" | "idf"
const char* to_string(UnitWeight weight);
// -> [H][m_h] the idf weight of each entry's unit (units counted over all heads).
std::vector<std::vector<double>> idf_weights(std::span<const std::span<const int32_t>> units);

// Units of keys by sign-random-projection hashing: bits random directions (a fixed splitmix64
// stream of standard normal draws, seeded by `seed` and head_dim), unit = the sign pattern, plus
// base. Keys [n, head_dim] -> [n] units in [base, base + 2^bits). bits in [1, 20].
std::vector<int32_t> key_hash_units(std::span<const float> keys, int head_dim, int bits, uint64_t seed,
                                    int32_t base);

// K-VEC selection for one layer (docs/policies.md, "K-VEC"):
//  1. s_h = prepare_scores(scores, normalize); lambda = gamma * mean over non-empty heads of the
//     score at rank min(b, m_h) (1-based) of head h.
//  2. Allocation: lazy greedy over all (head, index) pairs with gain
//     s_h[i] + lambda * value(u_hi) * [u_hi not yet picked by this pass], taking
//     T = min(H*b, sum m_h) pairs; n_h = picks in head h.
//  3. budget_h = ada_head_budgets(n, m, b, alpha) (the Ada-KV rounding, shared).
//  4. Selection: each head first takes its top min(floor(alpha*b), budget_h) by s_h (safeguard);
//     then lazy greedy over the remaining pairs with the same gain (coverage restarted from the
//     safeguard picks), a head leaving the heap once it holds budget_h entries.
// Every comparison uses ranks_before on (gain, head, index), so with gamma = 0 (or mu = 0 and
// gamma = 0) steps 2-4 are exactly Ada-KV's pool, budgets and per-head top-k: K-VEC(0, 0) ==
// ada_select(scores, b, alpha, normalize), bit for bit. A popped entry whose unit became covered
// since it was pushed is re-pushed with its lower gain (lazy re-scoring). O(H m log(H m)).
//  5. Coverage guard (lambda > 0): if the result covers fewer distinct units than the Ada-KV
//     selection on the same scores, the Ada-KV selection is returned (fallback = true), so the
//     cross-head coverage of K-VEC is never below Ada-SnapKV's at the same memory.
// With weights, the coverage bonus of an entry is lambda * w * value(u) (w: its unit's weight).
KvecSelection kvec_select(const std::vector<std::vector<float>>& scores,    // [H][m_h]
                          std::span<const std::span<const int32_t>> units,  // [H][m_h]
                          const UnitSet& earlier,  // U: units kept by earlier layers
                          const KvecOptions& options,
                          std::span<const std::span<const double>> weights = {});  // [H][m_h] or empty

// One layer's input to the cross-layer selection.
struct KvecLayer {
    std::vector<std::vector<float>> scores;   // [H][m_h]
    std::vector<std::vector<int32_t>> units;  // [H][m_h]
    std::vector<std::vector<double>> weights;  // [H][m_h] or empty (uniform)
};

// K-VEC across layers (layers = global): the heads of every layer form one pool, so that the
// prefix budget L x H x b is shared by all (layer, head) pairs; coverage stays within a layer (a
// layer can only attend to its own cache: a unit kept by another layer does not cover it). This
// is kvec_select on the flattened problem: head (l, h) becomes head l * H + h and unit u of layer
// l becomes l * stride + u (stride = 1 + the largest unit). earlier is not used (the cross-layer
// novelty term has no meaning here). Per-layer results, in layer order, keep[h] ascending; the
// lambda and fallback of the whole problem are copied into each. With gamma = 0 this is Ada-KV's
// allocation with one pool over every head of every layer. kvec::Error if the flattened units
// exceed int32 or layers disagree in their head counts.
std::vector<KvecSelection> kvec_select_global(const std::vector<KvecLayer>& layers, const KvecOptions& options);

// lambda of step 1 on prepared scores.
double kvec_lambda(const std::vector<std::vector<double>>& scores,  // [H][m_h]
                   int64_t b, double gamma);

// F(S) = sum_h sum_{i in S_h} s_h[i] + lambda * sum_{u in union_h units(S_h)} w(u) value(u).
double kvec_objective(const std::vector<std::vector<double>>& scores,   // [H][m_h] prepared
                      std::span<const std::span<const int32_t>> units,  // [H][m_h]
                      const UnitSet& earlier, const HeadSelection& keep, double lambda, double mu,
                      std::span<const std::span<const double>> weights = {});  // [H][m_h] or empty

// Coverage of one layer. kept_units[h] = units of the prefix entries head h keeps (window
// excluded); universe = N - w for positions, the number of distinct token ids among the prefix
// for token identities.
struct LayerCoverage {
    int64_t head_units = 0;   // sum_h |distinct units of S_h|
    int64_t union_units = 0;  // |union_h S_h|
    double c_head = 0.0;      // union_units / universe (1 when the universe is empty)
    double redundancy = 1.0;  // head_units / union_units (1 when nothing is kept)
};

LayerCoverage layer_coverage(std::span<const std::span<const int32_t>> kept_units,  // [H][k_h]
                             int64_t universe);

// Accumulates layers to give C_head(l), R(l) and C_layer = |union_{l,h} S_{l,h}| / universe.
class CoverageTracker {
public:
    explicit CoverageTracker(int64_t universe);
    const LayerCoverage& add_layer(std::span<const std::span<const int32_t>> kept_units);
    double c_layer() const;
    const std::vector<LayerCoverage>& layers() const { return layers_; }
    const UnitSet& covered() const { return all_; }

private:
    int64_t universe_;
    UnitSet all_;
    std::vector<LayerCoverage> layers_;  // [layers added]
};

// Units of the kept entries: out[j] = units[keep[j]].
std::vector<int32_t> units_of(std::span<const int32_t> keep, std::span<const int32_t> units);

// Number of distinct values (the token-identity universe of a prefix).
int64_t count_distinct(std::span<const int32_t> units);

}  // namespace kvec::policy
