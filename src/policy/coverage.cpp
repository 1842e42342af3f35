#include "policy/coverage.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>
#include <unordered_map>

#include "util/error.h"
#include "util/rng.h"

namespace kvec::policy {

CoverageUnit parse_coverage_unit(std::string_view text) {
    if (text == "position") return CoverageUnit::position;
    if (text == "token") return CoverageUnit::token;
    if (text == "key") return CoverageUnit::key;
    fail("unknown coverage unit '{}' (expected position, token or key)", text);
}

const char* to_string(CoverageUnit unit) {
    switch (unit) {
        case CoverageUnit::token: return "token";
        case CoverageUnit::key: return "key";
        default: return "position";
    }
}

UnitWeight parse_unit_weight(std::string_view text) {
    if (text == "uniform") return UnitWeight::uniform;
    if (text == "idf") return UnitWeight::idf;
    fail("unknown unit weight '{}' (expected uniform or idf)", text);
}

const char* to_string(UnitWeight weight) { return weight == UnitWeight::idf ? "idf" : "uniform"; }

std::vector<std::vector<double>> idf_weights(std::span<const std::span<const int32_t>> units) {
    std::unordered_map<int32_t, int64_t> count;  // unit -> candidates carrying it
    int64_t m = 0;
    for (const auto& head : units) {
        for (int32_t u : head) ++count[u];
        m += static_cast<int64_t>(head.size());
    }
    std::vector<std::vector<double>> w(units.size());  // [H][m_h]
    double sum = 0;
    for (size_t h = 0; h < units.size(); ++h) {
        w[h].resize(units[h].size());
        for (size_t i = 0; i < units[h].size(); ++i) {
            // log(M / c) >= 0; + log 2 keeps a unit carried by every candidate above 0.
            w[h][i] = std::log(2.0 * static_cast<double>(m) / static_cast<double>(count[units[h][i]]));
            sum += w[h][i];
        }
    }
    if (m > 0 && sum > 0) {
        const double mean = sum / static_cast<double>(m);
        for (auto& head : w) {
            for (double& v : head) v /= mean;
        }
    }
    return w;
}

std::vector<int32_t> key_hash_units(std::span<const float> keys, int head_dim, int bits, uint64_t seed,
                                    int32_t base) {
    if (bits < 1 || bits > 20) fail("kvec: key hash bits must be in [1, 20], got {}", bits);
    if (head_dim <= 0 || keys.size() % static_cast<size_t>(head_dim) != 0) {
        fail("kvec: {} key values are not rows of head_dim {}", keys.size(), head_dim);
    }
    // Directions [bits, head_dim]: standard normal draws (Box-Muller on splitmix64 uniforms).
    uint64_t state = mix_seed(seed, static_cast<uint64_t>(head_dim), static_cast<uint64_t>(bits));
    auto uniform = [&state] { return (static_cast<double>(splitmix64(state) >> 11) + 0.5) * 0x1.0p-53; };
    std::vector<float> dirs(static_cast<size_t>(bits) * static_cast<size_t>(head_dim));  // [bits, head_dim]
    for (float& d : dirs) {
        const double r = std::sqrt(-2.0 * std::log(uniform()));
        d = static_cast<float>(r * std::cos(2.0 * 3.14159265358979323846 * uniform()));
    }
    const size_t n = keys.size() / static_cast<size_t>(head_dim);
    std::vector<int32_t> out(n);  // [n]
    for (size_t i = 0; i < n; ++i) {
        const float* k = keys.data() + i * static_cast<size_t>(head_dim);
        int32_t code = 0;
        for (int b = 0; b < bits; ++b) {
            const float* d = dirs.data() + static_cast<size_t>(b) * static_cast<size_t>(head_dim);
            double dot = 0;
            for (int e = 0; e < head_dim; ++e) dot += static_cast<double>(k[e]) * d[e];
            if (dot >= 0) code |= 1 << b;
        }
        out[i] = base + code;
    }
    return out;
}

void UnitSet::insert(int32_t unit) {
    if (unit < 0) fail("coverage: negative unit {}", unit);
    const size_t word = static_cast<size_t>(unit) >> 6;
    if (word >= bits_.size()) bits_.resize(std::max(word + 1, bits_.size() * 2), 0);
    const uint64_t mask = uint64_t{1} << (unit & 63);
    if ((bits_[word] & mask) == 0) {
        bits_[word] |= mask;
        ++count_;
    }
}

void UnitSet::clear() {
    std::fill(bits_.begin(), bits_.end(), 0);
    count_ = 0;
}

namespace {

// A heap entry of the lazy greedy: its gain was computed when pushed; `bonus` says whether that
// gain included the coverage term (so it is stale once the unit is covered).
struct Candidate {
    double gain;
    int32_t head;
    int32_t index;
    bool bonus;
};

struct WorseThan {  // std::priority_queue keeps the entry that ranks first on top
    bool operator()(const Candidate& a, const Candidate& c) const {
        const int64_t ka = (static_cast<int64_t>(a.head) << 32) | static_cast<uint32_t>(a.index);
        const int64_t kc = (static_cast<int64_t>(c.head) << 32) | static_cast<uint32_t>(c.index);
        return ranks_before(c.gain, kc, a.gain, ka);
    }
};

using Heap = std::priority_queue<Candidate, std::vector<Candidate>, WorseThan>;

// Coverage bonus lambda * w * value(u) of an uncovered unit of weight w.
double bonus_of(int32_t unit, double w, const UnitSet& earlier, double lambda, double mu) {
    return lambda * w * (1.0 + (earlier.contains(unit) ? 0.0 : mu));
}

// k-th largest value (1-based, NaN ranks last) of `values`, which it reorders. k in [1, size].
double kth_largest(std::vector<double>& values, int64_t k) {
    auto desc = [](double x, double y) {  // larger first, NaN last
        if (std::isnan(x)) return false;
        return std::isnan(y) || x > y;
    };
    std::nth_element(values.begin(), values.begin() + (k - 1), values.end(), desc);
    return values[static_cast<size_t>(k - 1)];
}

// False when an entry whose gain can be at most s + max_bonus never reaches `threshold`, the
// gain every pick of its pass is known to have at least (pruning that cannot change the result).
bool may_be_picked(double s, double max_bonus, double threshold) {
    return std::isnan(threshold) || !(s + max_bonus < threshold);
}

}  // namespace

double kvec_lambda(const std::vector<std::vector<double>>& scores, int64_t b, double gamma) {
    if (gamma == 0.0 || b <= 0) return 0.0;
    double sum = 0.0;
    int64_t heads = 0;
    for (const auto& head : scores) {
        if (head.empty()) continue;
        const int64_t rank = std::min<int64_t>(b, static_cast<int64_t>(head.size()));
        std::vector<double> sorted(head);  // [m_h]
        sum += kth_largest(sorted, rank);
        ++heads;
    }
    if (heads == 0) return 0.0;
    const double lambda = gamma * sum / static_cast<double>(heads);
    return std::isfinite(lambda) && lambda > 0.0 ? lambda : 0.0;
}

KvecSelection kvec_select(const std::vector<std::vector<float>>& scores,
                          std::span<const std::span<const int32_t>> units, const UnitSet& earlier,
                          const KvecOptions& options, std::span<const std::span<const double>> weights) {
    const size_t H = scores.size();
    const int64_t b = options.b;
    if (b < 0) fail("kvec: prefix budget must be >= 0, got {}", b);
    if (!(options.alpha >= 0.0 && options.alpha <= 1.0)) {
        fail("kvec: alpha must be in [0, 1], got {}", options.alpha);
    }
    if (!(options.gamma >= 0.0) || !std::isfinite(options.gamma)) {
        fail("kvec: gamma must be a finite number >= 0, got {}", options.gamma);
    }
    if (!(options.mu >= 0.0) || !std::isfinite(options.mu)) {
        fail("kvec: mu must be a finite number >= 0, got {}", options.mu);
    }
    if (units.size() != H) fail("kvec: {} unit rows for {} heads", units.size(), H);
    for (size_t h = 0; h < H; ++h) {
        if (units[h].size() != scores[h].size()) {
            fail("kvec: head {} has {} scores but {} units", h, scores[h].size(), units[h].size());
        }
        for (int32_t u : units[h]) {
            if (u < 0) fail("kvec: head {} has a negative coverage unit {}", h, u);
        }
    }
    if (!weights.empty() && weights.size() != H) fail("kvec: {} weight rows for {} heads", weights.size(), H);
    double max_w = 1.0;
    for (size_t h = 0; h < weights.size(); ++h) {
        if (weights[h].size() != scores[h].size()) {
            fail("kvec: head {} has {} scores but {} unit weights", h, scores[h].size(), weights[h].size());
        }
        for (double w : weights[h]) {
            if (!(w >= 0.0) || !std::isfinite(w)) fail("kvec: head {} has a unit weight {}", h, w);
            max_w = std::max(max_w, w);
        }
    }
    auto weight = [&weights](size_t h, size_t i) { return weights.empty() ? 1.0 : weights[h][i]; };

    const std::vector<std::vector<double>> s =
        prepare_scores(scores, options.normalize);  // [H][m_h]
    KvecSelection out;
    out.lambda = kvec_lambda(s, b, options.gamma);
    const double lambda = out.lambda;
    const double mu = options.mu;

    std::vector<int64_t> cap(H);  // [H] m_h
    int64_t cap_total = 0;
    for (size_t h = 0; h < H; ++h) {
        cap[h] = static_cast<int64_t>(s[h].size());
        cap_total += cap[h];
    }
    const int64_t pool = std::min(static_cast<int64_t>(H) * b, cap_total);

    // Largest bonus any entry can get; entries whose score plus it stays below the score of the
    // last pick an importance-only pass would make are never picked and stay out of the heaps.
    const double max_bonus = lambda * (1.0 + mu) * max_w;

    // Step 2: coverage-aware allocation pool. Every pick has gain >= the pool-th largest score
    // (until then some entry of the importance-only pool is still available at that gain).
    out.picks.assign(H, 0);
    if (pool > 0) {
        std::vector<double> all;  // [sum_h m_h]
        all.reserve(static_cast<size_t>(cap_total));
        for (const auto& head : s) all.insert(all.end(), head.begin(), head.end());
        const double threshold = kth_largest(all, pool);
        std::vector<Candidate> items;  // [candidates that may be picked]
        for (size_t h = 0; h < H; ++h) {
            for (size_t i = 0; i < s[h].size(); ++i) {
                if (!may_be_picked(s[h][i], max_bonus, threshold)) continue;
                const int32_t u = units[h][i];
                items.push_back({s[h][i] + bonus_of(u, weight(h, i), earlier, lambda, mu),
                                 static_cast<int32_t>(h), static_cast<int32_t>(i), lambda > 0.0});
            }
        }
        Heap heap(WorseThan{}, std::move(items));
        UnitSet covered;
        int64_t taken = 0;
        while (taken < pool) {
            KVEC_CHECK(!heap.empty());
            Candidate c = heap.top();
            heap.pop();
            const int32_t u = units[static_cast<size_t>(c.head)][static_cast<size_t>(c.index)];
            if (c.bonus && covered.contains(u)) {
                heap.push({s[static_cast<size_t>(c.head)][static_cast<size_t>(c.index)], c.head,
                           c.index, false});
                continue;
            }
            ++out.picks[static_cast<size_t>(c.head)];
            covered.insert(u);
            ++taken;
        }
    }

    // Step 3: per-head budgets (Ada-KV rounding).
    out.budgets = ada_head_budgets(out.picks, cap, b, options.alpha);

    // Step 4: safeguard, then capacity-limited lazy greedy.
    const int64_t safeguard = safeguard_count(b, options.alpha);
    out.keep.assign(H, {});
    std::vector<std::vector<char>> taken_mask(H);  // [H][m_h]
    UnitSet covered;
    std::vector<Candidate> items;  // [sum_h (m_h - safeguard_h)]
    for (size_t h = 0; h < H; ++h) {
        taken_mask[h].assign(s[h].size(), 0);
        const int64_t first = std::min(safeguard, out.budgets[h]);
        for (int32_t i : top_k(std::span(s[h]), first)) {
            out.keep[h].push_back(i);
            taken_mask[h][static_cast<size_t>(i)] = 1;
            covered.insert(units[h][static_cast<size_t>(i)]);
        }
    }
    for (size_t h = 0; h < H; ++h) {
        if (static_cast<int64_t>(out.keep[h].size()) >= out.budgets[h]) continue;
        // Every pick of head h has gain >= its budget_h-th largest score (same argument).
        std::vector<double> head(s[h]);  // [m_h]
        const double threshold = kth_largest(head, out.budgets[h]);
        for (size_t i = 0; i < s[h].size(); ++i) {
            if (taken_mask[h][i] || !may_be_picked(s[h][i], max_bonus, threshold)) continue;
            const int32_t u = units[h][i];
            const bool bonus = lambda > 0.0 && !covered.contains(u);
            items.push_back({s[h][i] + (bonus ? bonus_of(u, weight(h, i), earlier, lambda, mu) : 0.0),
                             static_cast<int32_t>(h), static_cast<int32_t>(i), bonus});
        }
    }
    int64_t remaining = 0;
    for (size_t h = 0; h < H; ++h) {
        remaining += out.budgets[h] - static_cast<int64_t>(out.keep[h].size());
    }
    Heap heap(WorseThan{}, std::move(items));
    while (remaining > 0) {
        KVEC_CHECK(!heap.empty());
        Candidate c = heap.top();
        heap.pop();
        const size_t h = static_cast<size_t>(c.head);
        if (static_cast<int64_t>(out.keep[h].size()) >= out.budgets[h]) continue;  // head full
        const int32_t u = units[h][static_cast<size_t>(c.index)];
        if (c.bonus && covered.contains(u)) {
            heap.push({s[h][static_cast<size_t>(c.index)], c.head, c.index, false});
            continue;
        }
        out.keep[h].push_back(c.index);
        covered.insert(u);
        --remaining;
    }
    for (auto& k : out.keep) std::sort(k.begin(), k.end());

    // Coverage guard: the greedy is not optimal, and in rare cases (about 1 layer in 10^4 on
    // random inputs) the cross-layer term or the budget rounding makes it cover less (in units,
    // weighted when weights are given) in this layer than the importance-only selection. Then the
    // importance-only selection (Ada-KV, same memory) is returned instead, so coverage is never
    // below Ada-KV's.
    if (lambda > 0.0) {
        AdaSelection ada = ada_select_prepared(s, b, options.alpha);
        auto covered_units = [&](const HeadSelection& keep) {
            UnitSet all;
            double total = 0;
            for (size_t h = 0; h < H; ++h) {
                for (int32_t i : keep[h]) {
                    const int32_t u = units[h][static_cast<size_t>(i)];
                    if (all.contains(u)) continue;
                    all.insert(u);
                    total += weight(h, static_cast<size_t>(i));
                }
            }
            return total;
        };
        if (covered_units(out.keep) < covered_units(ada.keep) - 1e-9) {
            out.budgets = std::move(ada.budgets);
            out.keep = std::move(ada.keep);
            out.fallback = true;
        }
    }
    return out;
}

std::vector<KvecSelection> kvec_select_global(const std::vector<KvecLayer>& layers, const KvecOptions& options) {
    if (layers.empty()) return {};
    const size_t H = layers.front().scores.size();
    int64_t max_unit = -1;
    bool weighted = false;
    for (size_t l = 0; l < layers.size(); ++l) {
        const KvecLayer& layer = layers[l];
        if (layer.scores.size() != H || layer.units.size() != H) {
            fail("kvec: layer {} has {} score rows and {} unit rows for {} heads", l, layer.scores.size(),
                 layer.units.size(), H);
        }
        if (!layer.weights.empty() && layer.weights.size() != H) fail("kvec: layer {} has {} weight rows", l, layer.weights.size());
        weighted = weighted || !layer.weights.empty();
        for (const auto& head : layer.units) {
            for (int32_t u : head) max_unit = std::max<int64_t>(max_unit, u);
        }
    }
    const int64_t stride = max_unit + 1;
    if (stride * static_cast<int64_t>(layers.size()) > std::numeric_limits<int32_t>::max()) {
        fail("kvec: {} layers x {} units do not fit the coverage units", layers.size(), stride);
    }
    std::vector<std::vector<float>> scores;    // [L * H][m]
    std::vector<std::vector<int32_t>> units;   // [L * H][m]
    std::vector<std::vector<double>> weights;  // [L * H][m] or empty
    for (size_t l = 0; l < layers.size(); ++l) {
        const KvecLayer& layer = layers[l];
        for (size_t h = 0; h < H; ++h) {
            scores.push_back(layer.scores[h]);
            std::vector<int32_t> u(layer.units[h]);
            for (int32_t& x : u) x = static_cast<int32_t>(static_cast<int64_t>(l) * stride + x);
            units.push_back(std::move(u));
            if (weighted) {
                weights.push_back(layer.weights.empty() ? std::vector<double>(layer.scores[h].size(), 1.0) : layer.weights[h]);
            }
        }
    }
    KvecOptions o = options;
    o.mu = 0.0;
    const KvecSelection flat = kvec_select(scores, spans_of(units), UnitSet{}, o, spans_of(weights));
    std::vector<KvecSelection> out(layers.size());
    for (size_t l = 0; l < layers.size(); ++l) {
        KvecSelection& sel = out[l];
        sel.lambda = flat.lambda;
        sel.fallback = flat.fallback;
        for (size_t h = 0; h < H; ++h) {
            const size_t g = l * H + h;
            sel.picks.push_back(flat.picks[g]);
            sel.budgets.push_back(flat.budgets[g]);
            sel.keep.push_back(flat.keep[g]);
        }
    }
    return out;
}

double kvec_objective(const std::vector<std::vector<double>>& scores,
                      std::span<const std::span<const int32_t>> units, const UnitSet& earlier,
                      const HeadSelection& keep, double lambda, double mu,
                      std::span<const std::span<const double>> weights) {
    KVEC_CHECK(keep.size() == scores.size() && units.size() == scores.size());
    double importance = 0.0;
    UnitSet covered;
    double coverage = 0.0;
    for (size_t h = 0; h < keep.size(); ++h) {
        for (int32_t i : keep[h]) {
            importance += scores[h][static_cast<size_t>(i)];
            const int32_t u = units[h][static_cast<size_t>(i)];
            if (!covered.contains(u)) {
                covered.insert(u);
                const double w = weights.empty() ? 1.0 : weights[h][static_cast<size_t>(i)];
                coverage += w * (1.0 + (earlier.contains(u) ? 0.0 : mu));
            }
        }
    }
    return importance + lambda * coverage;
}

LayerCoverage layer_coverage(std::span<const std::span<const int32_t>> kept_units,
                             int64_t universe) {
    if (universe < 0) fail("coverage: negative universe size {}", universe);
    LayerCoverage out;
    UnitSet all;
    for (const auto& head : kept_units) {
        UnitSet mine;
        for (int32_t u : head) {
            mine.insert(u);
            all.insert(u);
        }
        out.head_units += mine.size();
    }
    out.union_units = all.size();
    out.c_head =
        universe > 0 ? static_cast<double>(out.union_units) / static_cast<double>(universe) : 1.0;
    out.redundancy = out.union_units > 0 ? static_cast<double>(out.head_units) /
                                               static_cast<double>(out.union_units)
                                         : 1.0;
    return out;
}

CoverageTracker::CoverageTracker(int64_t universe) : universe_(universe) {
    if (universe < 0) fail("coverage: negative universe size {}", universe);
}

const LayerCoverage& CoverageTracker::add_layer(
    std::span<const std::span<const int32_t>> kept_units) {
    layers_.push_back(layer_coverage(kept_units, universe_));
    for (const auto& head : kept_units) {
        for (int32_t u : head) all_.insert(u);
    }
    return layers_.back();
}

double CoverageTracker::c_layer() const {
    return universe_ > 0 ? static_cast<double>(all_.size()) / static_cast<double>(universe_) : 1.0;
}

std::vector<int32_t> units_of(std::span<const int32_t> keep, std::span<const int32_t> units) {
    std::vector<int32_t> out;  // [k]
    out.reserve(keep.size());
    for (int32_t i : keep) {
        if (i < 0 || static_cast<size_t>(i) >= units.size()) {
            fail("coverage: kept index {} outside {} entries", i, units.size());
        }
        out.push_back(units[static_cast<size_t>(i)]);
    }
    return out;
}

int64_t count_distinct(std::span<const int32_t> units) {
    UnitSet set;
    for (int32_t u : units) set.insert(u);
    return set.size();
}

}  // namespace kvec::policy
