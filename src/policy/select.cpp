#include "policy/select.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "util/error.h"
#include "util/rng.h"

namespace kvec::policy {

namespace {

template <typename T>
std::vector<int32_t> top_k_impl(std::span<const T> scores, int64_t k) {
    if (k < 0) fail("top-k: k must be >= 0, got {}", k);
    const int64_t m = static_cast<int64_t>(scores.size());
    if (m > std::numeric_limits<int32_t>::max()) fail("top-k: {} scores is too many", m);
    k = std::min(k, m);
    std::vector<int32_t> idx = iota_indices(m);  // [m]
    auto better = [&](int32_t a, int32_t b) { return ranks_before(scores[a], a, scores[b], b); };
    if (k < m) std::nth_element(idx.begin(), idx.begin() + k, idx.end(), better);
    idx.resize(static_cast<size_t>(k));
    std::sort(idx.begin(), idx.end());
    return idx;
}

}  // namespace

std::vector<int32_t> top_k(std::span<const float> scores, int64_t k) {
    return top_k_impl(scores, k);
}

std::vector<int32_t> top_k(std::span<const double> scores, int64_t k) {
    return top_k_impl(scores, k);
}

std::vector<int32_t> rank_order(std::span<const double> scores) {
    std::vector<int32_t> idx = iota_indices(static_cast<int64_t>(scores.size()));  // [m]
    std::sort(idx.begin(), idx.end(),
              [&](int32_t a, int32_t b) { return ranks_before(scores[a], a, scores[b], b); });
    return idx;
}

std::vector<int32_t> iota_indices(int64_t n) {
    std::vector<int32_t> idx(static_cast<size_t>(std::max<int64_t>(n, 0)));  // [n]
    std::iota(idx.begin(), idx.end(), 0);
    return idx;
}

std::vector<int32_t> with_window(std::vector<int32_t> prefix_keep, int64_t n_entries,
                                 int64_t n_prefix) {
    KVEC_CHECK(n_prefix >= 0 && n_prefix <= n_entries);
    prefix_keep.reserve(prefix_keep.size() + static_cast<size_t>(n_entries - n_prefix));
    for (int64_t i = n_prefix; i < n_entries; ++i) prefix_keep.push_back(static_cast<int32_t>(i));
    return prefix_keep;
}

std::vector<int32_t> streaming_select(int64_t n_entries, int64_t budget, int64_t sinks) {
    if (n_entries < 0) fail("streaming: negative entry count {}", n_entries);
    if (sinks < 0) fail("streaming: sinks must be >= 0, got {}", sinks);
    if (budget < sinks) {
        fail("streaming: budget {} is smaller than the {} sink tokens it must keep", budget, sinks);
    }
    if (n_entries <= budget) return iota_indices(n_entries);
    std::vector<int32_t> keep;  // [budget]
    keep.reserve(static_cast<size_t>(budget));
    for (int64_t i = 0; i < sinks; ++i) keep.push_back(static_cast<int32_t>(i));
    for (int64_t i = n_entries - (budget - sinks); i < n_entries; ++i) {
        keep.push_back(static_cast<int32_t>(i));
    }
    return keep;
}

uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
    uint64_t state = seed;
    uint64_t h = splitmix64(state);
    for (uint64_t word : {a, b, c}) {
        state = h ^ word;
        h = splitmix64(state);
    }
    return h;
}

std::vector<int32_t> random_subset(int64_t n, int64_t k, uint64_t seed) {
    if (n < 0 || k < 0) fail("random: negative size (n = {}, k = {})", n, k);
    k = std::min(k, n);
    std::vector<int32_t> pool = iota_indices(n);  // [n], first k become the sample
    uint64_t state = seed;
    auto next = [&state] { return splitmix64(state); };
    for (int64_t i = 0; i < k; ++i) {
        const int64_t j = i + static_cast<int64_t>(uniform_below(next, static_cast<uint64_t>(n - i)));
        std::swap(pool[static_cast<size_t>(i)], pool[static_cast<size_t>(j)]);
    }
    pool.resize(static_cast<size_t>(k));
    std::sort(pool.begin(), pool.end());
    return pool;
}

std::vector<int64_t> pyramid_budgets(int64_t n_layers, int64_t b, int64_t n_prefix, double beta) {
    if (n_layers < 1) fail("pyramidkv: need at least one layer, got {}", n_layers);
    if (b < 0) fail("pyramidkv: prefix budget must be >= 0, got {}", b);
    if (n_prefix < 0) fail("pyramidkv: negative prefix length {}", n_prefix);
    if (!(beta >= 1.0) || !std::isfinite(beta)) fail("pyramidkv: beta must be >= 1, got {}", beta);
    const size_t L = static_cast<size_t>(n_layers);
    if (n_prefix <= b) return std::vector<int64_t>(L, n_prefix);  // nothing is evicted
    if (n_layers == 1) return {b};

    double lo = static_cast<double>(b) / beta;
    double hi = 2.0 * static_cast<double>(b) - lo;
    if (hi >= static_cast<double>(n_prefix)) {
        hi = static_cast<double>(n_prefix);
        lo = 2.0 * static_cast<double>(b) - hi;
    }
    const double step = (hi - lo) / static_cast<double>(n_layers - 1);

    std::vector<double> x(L);   // [L] real-valued schedule
    std::vector<int64_t> r(L);  // [L] rounded budgets
    int64_t total = 0;
    for (size_t l = 0; l < L; ++l) {
        x[l] = hi - static_cast<double>(l) * step;
        r[l] = std::clamp<int64_t>(static_cast<int64_t>(std::llround(x[l])), 0, n_prefix);
        total += r[l];
    }
    const int64_t target = n_layers * b;
    while (total > target) {  // overshoot: remove from the layer rounded up the most, deepest first
        size_t best = L;
        for (size_t l = 0; l < L; ++l) {
            if (r[l] == 0) continue;
            if (best == L || (r[l] - x[l]) >= (r[best] - x[best])) best = l;
        }
        KVEC_CHECK(best < L);
        --r[best];
        --total;
    }
    while (total <
           target) {  // undershoot: add to the layer rounded down the most, shallowest first
        size_t best = L;
        for (size_t l = 0; l < L; ++l) {
            if (r[l] >= n_prefix) continue;
            if (best == L || (r[l] - x[l]) < (r[best] - x[best])) best = l;
        }
        KVEC_CHECK(best < L);
        ++r[best];
        ++total;
    }
    return r;
}

int64_t safeguard_count(int64_t b, double alpha) {
    return static_cast<int64_t>(std::floor(static_cast<double>(b) * alpha + 1e-9));
}

std::vector<int64_t> ada_head_budgets(std::span<const int64_t> picks,
                                      std::span<const int64_t> capacity, int64_t b, double alpha) {
    const size_t H = picks.size();
    if (capacity.size() != H) fail("ada: {} pick counts for {} heads", picks.size(), H);
    if (b < 0) fail("ada: prefix budget must be >= 0, got {}", b);
    if (!(alpha >= 0.0 && alpha <= 1.0)) fail("ada: alpha must be in [0, 1], got {}", alpha);
    int64_t cap_total = 0;
    for (size_t h = 0; h < H; ++h) {
        if (capacity[h] < 0 || picks[h] < 0 || picks[h] > capacity[h]) {
            fail("ada: head {} has {} picks for {} candidates", h, picks[h], capacity[h]);
        }
        cap_total += capacity[h];
    }
    const int64_t pool = static_cast<int64_t>(H) * b;
    if (cap_total <= pool) return std::vector<int64_t>(capacity.begin(), capacity.end());

    const int64_t floor_units = safeguard_count(b, alpha);
    std::vector<double> rem(H);      // [H] fractional part of q_h
    std::vector<int64_t> budget(H);  // [H]
    int64_t total = 0;
    for (size_t h = 0; h < H; ++h) {
        const double q =
            static_cast<double>(picks[h]) * (1.0 - alpha) + static_cast<double>(floor_units);
        const double fl = std::floor(q);
        rem[h] = q - fl;
        budget[h] = std::min(static_cast<int64_t>(fl), capacity[h]);
        total += budget[h];
    }
    // Heads in largest-remainder order: frac(q_h) descending, lower head first.
    std::vector<size_t> order(H);  // [H]
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t c) { return rem[a] > rem[c]; });
    while (total > pool) {  // only reachable through floating error: take from the back
        bool moved = false;
        for (auto it = order.rbegin(); it != order.rend() && total > pool; ++it) {
            if (budget[*it] > std::min(floor_units, capacity[*it])) {
                --budget[*it];
                --total;
                moved = true;
            }
        }
        KVEC_CHECK(moved);
    }
    while (total < pool) {
        bool moved = false;
        for (size_t h : order) {
            if (total == pool) break;
            if (budget[h] < capacity[h]) {
                ++budget[h];
                ++total;
                moved = true;
            }
        }
        KVEC_CHECK(moved);
    }
    return budget;
}

std::vector<std::vector<double>> prepare_scores(const std::vector<std::vector<float>>& scores,
                                                bool normalize) {
    std::vector<std::vector<double>> out(scores.size());  // [H][m_h]
    for (size_t h = 0; h < scores.size(); ++h) {
        out[h].assign(scores[h].begin(), scores[h].end());
        if (!normalize) continue;
        double sum = 0.0;
        for (double v : out[h]) sum += v;
        if (!(sum > 0.0) || !std::isfinite(sum)) continue;
        for (double& v : out[h]) v /= sum;
    }
    return out;
}

AdaSelection ada_select_prepared(const std::vector<std::vector<double>>& scores, int64_t b,
                                 double alpha) {
    const size_t H = scores.size();
    if (b < 0) fail("ada: prefix budget must be >= 0, got {}", b);
    AdaSelection out;
    out.picks.assign(H, 0);
    std::vector<int64_t> cap(H);  // [H] candidate count m_h
    int64_t cap_total = 0;
    for (size_t h = 0; h < H; ++h) {
        cap[h] = static_cast<int64_t>(scores[h].size());
        cap_total += cap[h];
    }
    const int64_t pool = std::min(static_cast<int64_t>(H) * b, cap_total);

    // Pool: the top `pool` (head, index) pairs of the whole layer.
    struct Pair {
        double score;
        int32_t head;
        int32_t index;
    };
    std::vector<Pair> pairs;  // [sum_h m_h]
    pairs.reserve(static_cast<size_t>(cap_total));
    for (size_t h = 0; h < H; ++h) {
        for (size_t i = 0; i < scores[h].size(); ++i) {
            pairs.push_back({scores[h][i], static_cast<int32_t>(h), static_cast<int32_t>(i)});
        }
    }
    auto better = [](const Pair& a, const Pair& c) {
        // Composite index (head, index) breaks ties: lower head, then lower index.
        const int64_t ka = (static_cast<int64_t>(a.head) << 32) | static_cast<uint32_t>(a.index);
        const int64_t kc = (static_cast<int64_t>(c.head) << 32) | static_cast<uint32_t>(c.index);
        return ranks_before(a.score, ka, c.score, kc);
    };
    if (pool < cap_total) {
        std::nth_element(pairs.begin(), pairs.begin() + pool, pairs.end(), better);
    }
    for (int64_t p = 0; p < pool; ++p) ++out.picks[static_cast<size_t>(pairs[p].head)];

    out.budgets = ada_head_budgets(out.picks, cap, b, alpha);
    out.keep.resize(H);
    for (size_t h = 0; h < H; ++h) out.keep[h] = top_k(std::span(scores[h]), out.budgets[h]);
    return out;
}

AdaSelection ada_select(const std::vector<std::vector<float>>& scores, int64_t b, double alpha,
                        bool normalize) {
    return ada_select_prepared(prepare_scores(scores, normalize), b, alpha);
}

std::vector<AdaSelection> ada_select_layers(const std::vector<std::vector<std::vector<float>>>& scores, int64_t b,
                                            double alpha, bool normalize) {
    if (scores.empty()) return {};
    const size_t H = scores.front().size();
    std::vector<std::vector<float>> flat;  // [L * H][m]
    for (size_t l = 0; l < scores.size(); ++l) {
        if (scores[l].size() != H) fail("ada: layer {} has {} heads, layer 0 has {}", l, scores[l].size(), H);
        flat.insert(flat.end(), scores[l].begin(), scores[l].end());
    }
    const AdaSelection all = ada_select(flat, b, alpha, normalize);
    std::vector<AdaSelection> out(scores.size());
    for (size_t l = 0; l < scores.size(); ++l) {
        for (size_t h = 0; h < H; ++h) {
            const size_t g = l * H + h;
            out[l].picks.push_back(all.picks[g]);
            out[l].budgets.push_back(all.budgets[g]);
            out[l].keep.push_back(all.keep[g]);
        }
    }
    return out;
}

}  // namespace kvec::policy
