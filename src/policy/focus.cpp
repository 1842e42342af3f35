#include "policy/focus.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "policy/select.h"
#include "tensor/attention.h"
#include "tensor/ops.h"
#include "util/error.h"

namespace kvec::policy {

FocusRank parse_focus_rank(std::string_view text) {
    if (text == "low-std") return FocusRank::low_std;
    if (text == "high-std") return FocusRank::high_std;
    if (text == "entropy") return FocusRank::entropy;
    if (text == "random") return FocusRank::random;
    fail("unknown focus ranking '{}' (low-std, high-std, entropy, random)", text);
}

const char* to_string(FocusRank rank) {
    switch (rank) {
        case FocusRank::low_std: return "low-std";
        case FocusRank::high_std: return "high-std";
        case FocusRank::entropy: return "entropy";
        case FocusRank::random: return "random";
    }
    return "?";
}

HeadFocus head_focus(std::span<const float> row) {
    HeadFocus f;
    const auto m = static_cast<int64_t>(row.size());
    double sum = 0.0;
    for (float x : row) sum += x;
    if (m <= 1 || !(sum > 0.0) || !std::isfinite(sum)) return f;
    const double mean = 1.0 / static_cast<double>(m);
    double var = 0.0, ent = 0.0;
    for (float x : row) {
        const double p = x / sum;
        var += (p - mean) * (p - mean);
        if (p > 0.0) ent -= p * std::log(p);
    }
    f.cv = static_cast<double>(m) * std::sqrt(var / static_cast<double>(m));
    f.entropy = ent / std::log(static_cast<double>(m));
    return f;
}

std::vector<char> low_focus_heads(std::span<const HeadFocus> heads, double share, FocusRank rank, uint64_t seed) {
    if (!(share >= 0.0 && share <= 1.0)) fail("focus share {} is outside [0, 1]", share);
    const auto n = static_cast<int64_t>(heads.size());
    const auto k = static_cast<int64_t>(std::llround(share * static_cast<double>(n)));
    std::vector<char> flags(heads.size(), 0);
    if (rank == FocusRank::random) {
        for (int32_t i : random_subset(n, k, seed)) flags[static_cast<size_t>(i)] = 1;
        return flags;
    }
    std::vector<double> key(heads.size());  // [n] higher = more low-focus under this ranking
    for (size_t i = 0; i < heads.size(); ++i) {
        key[i] = rank == FocusRank::low_std ? -heads[i].cv : rank == FocusRank::high_std ? heads[i].cv : heads[i].entropy;
    }
    for (int32_t i : top_k(std::span<const double>(key), k)) flags[static_cast<size_t>(i)] = 1;
    return flags;
}

std::vector<float> query_window_rows(const LayerView& view, size_t h, int64_t n_queries) {
    const KvHeadView& head = view.heads[h];
    const int G = view.group, D = view.head_dim, n_head = view.n_head_kv * view.group;
    const auto n_q_all = static_cast<int64_t>(view.query_positions.size());
    if (n_q_all == 0 || view.queries.empty()) fail("kvec: the focus window needs the layer's recent queries");
    if (head.keys == nullptr) fail("kvec: the focus window needs the keys");
    const int64_t n_q = std::min(n_queries, n_q_all);
    const int32_t n = head.n_entries;
    std::vector<float> rows(static_cast<size_t>(int64_t{G} * n), 0.0f);  // [G, n]
    if (n == 0 || n_q == 0) return rows;

    ops::RopeParams rope;
    rope.mode = view.rope.neox ? ops::RopeMode::Neox : ops::RopeMode::Norm;
    rope.n_rot = view.rope.n_rot;
    rope.freq_base = view.rope.freq_base;
    rope.freq_scale = view.rope.freq_scale;
    rope.freq_factors = view.rope.freq_factors;
    rope.attn_factor = view.rope.attn_factor;
    KvHeadData kv;
    kv.key_type = GgmlType::F32;
    kv.value_type = GgmlType::F32;
    kv.keys = head.keys;
    kv.values = head.keys;  // unused by attention_probs
    kv.head_dim = D;

    // The queries in a fixed number of blocks, each summed on its own and the blocks added in
    // order: the same result with any number of threads.
    constexpr int64_t kBlocks = 8;
    const float inv = 1.0f / static_cast<float>(n_q);
    const int64_t first = n_q_all - n_q;
    std::vector<std::vector<float>> partial(kBlocks);  // [blocks][G, n]
    // One-shot prefill: the queries are the positions of the head's last n_q entries, one after the
    // other, so a block of them is one causal call (query k sees n - n_q + 1 + k entries).
    bool consecutive = n >= n_q;
    for (int64_t k = 0; consecutive && k < n_q; ++k) {
        const int32_t pos = view.query_positions[static_cast<size_t>(first + k)];
        consecutive = head.positions[n - n_q + k] == pos &&
                      (k == 0 || pos == view.query_positions[static_cast<size_t>(first + k - 1)] + 1);
    }
    if (consecutive) {
#pragma omp parallel for schedule(dynamic, 1)
        for (int64_t b = 0; b < kBlocks; ++b) {
            const int64_t t0 = first + b * n_q / kBlocks, t1 = first + (b + 1) * n_q / kBlocks;
            if (t1 == t0) continue;
            const int64_t T = t1 - t0;
            std::vector<float> q(static_cast<size_t>(T * G * D));  // [T, G, D] the group's queries
            std::vector<int32_t> pos(static_cast<size_t>(T));      // [T]
            for (int64_t t = t0; t < t1; ++t) {
                const float* src = view.queries.data() + (t * n_head + static_cast<int64_t>(h) * G) * D;
                std::copy(src, src + int64_t{G} * D, q.begin() + (t - t0) * G * D);
                pos[static_cast<size_t>(t - t0)] = view.query_positions[static_cast<size_t>(t)];
            }
            ops::rope(q.data(), T, G, D, pos.data(), rope);
            std::vector<float> p(static_cast<size_t>(T * G * n));  // [T * G, n] probability rows
            const auto n_vis = static_cast<int32_t>(n - n_q + 1 + (t0 - first));
            attention_causal(q.data(), {int64_t{G} * D, D}, T, G, kv, n_vis, view.attn_scale, p.data(), n, nullptr,
                             {}, view.attn_softcap);
            std::vector<float>& acc = partial[static_cast<size_t>(b)];
            acc.assign(static_cast<size_t>(int64_t{G} * n), 0.0f);
            for (int64_t dt = 0; dt < T; ++dt) {
                for (int g = 0; g < G; ++g) {
                    const float* pr = p.data() + (dt * G + g) * n;  // [n_vis + dt]
                    float* out = acc.data() + int64_t{g} * n;        // [n]
                    for (int64_t j = 0; j < n_vis + dt; ++j) out[j] += pr[j] * inv;
                }
            }
        }
        for (const std::vector<float>& acc : partial) {
            for (size_t i = 0; i < acc.size(); ++i) rows[i] += acc[i];
        }
        return rows;
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t b = 0; b < kBlocks; ++b) {
        std::vector<float> q(static_cast<size_t>(int64_t{G} * D));  // [G, D] the group's query heads
        std::vector<float> p(static_cast<size_t>(int64_t{G} * n));  // [G, n] their probability rows
        std::vector<float>& acc = partial[static_cast<size_t>(b)];
        for (int64_t t = first + b * n_q / kBlocks; t < first + (b + 1) * n_q / kBlocks; ++t) {
            const int32_t pos = view.query_positions[static_cast<size_t>(t)];
            const auto vis = static_cast<int32_t>(std::upper_bound(head.positions, head.positions + n, pos) - head.positions);
            if (vis == 0) continue;
            if (acc.empty()) acc.assign(static_cast<size_t>(int64_t{G} * n), 0.0f);
            const float* src = view.queries.data() + (t * n_head + static_cast<int64_t>(h) * G) * D;
            std::copy(src, src + int64_t{G} * D, q.begin());
            ops::rope(q.data(), 1, G, D, &pos, rope);
            attention_probs(q.data(), G, D, kv, vis, view.attn_scale, p.data(), n, view.attn_softcap);
            for (int g = 0; g < G; ++g) {
                const float* pr = p.data() + int64_t{g} * n;  // [vis]
                float* out = acc.data() + int64_t{g} * n;     // [n]
                for (int32_t j = 0; j < vis; ++j) out[j] += pr[j] * inv;
            }
        }
    }
    for (const std::vector<float>& acc : partial) {
        for (size_t i = 0; i < acc.size(); ++i) rows[i] += acc[i];
    }
    return rows;
}

std::vector<std::vector<char>> apply_focus(std::vector<KvecLayer>& layers,
                                           const std::vector<std::vector<FocusHeadInput>>& heads,
                                           const FocusOptions& options) {
    if (heads.size() != layers.size()) fail("kvec: focus inputs for {} of {} layers", heads.size(), layers.size());
    std::vector<HeadFocus> all;  // [L * H]
    for (size_t l = 0; l < layers.size(); ++l) {
        if (heads[l].size() != layers[l].scores.size()) fail("kvec: focus inputs for {} heads of layer {}", heads[l].size(), l);
        for (const FocusHeadInput& f : heads[l]) all.push_back(f.focus);
    }
    const std::vector<char> flat = low_focus_heads(all, options.share, options.rank, options.seed);
    std::vector<std::vector<char>> flags(layers.size());  // [L][H]
    size_t at = 0;
    const auto weight = static_cast<float>(1.0 + options.gamma);
    for (size_t l = 0; l < layers.size(); ++l) {
        for (size_t h = 0; h < heads[l].size(); ++h) {
            const char low = flat[at++];
            flags[l].push_back(low);
            if (!low) continue;
            std::vector<float>& s = layers[l].scores[h];  // [m_h]
            const std::vector<float>& wide = heads[l][h].wide;
            if (!wide.empty()) {
                if (wide.size() != s.size()) fail("kvec: focus window scores of {} entries for {}", wide.size(), s.size());
                s = wide;
            }
            if (options.gamma != 0.0) {
                for (float& x : s) x *= weight;
            }
        }
    }
    return flags;
}

void add_cross_layer_priority(std::vector<KvecLayer>& layers, const std::vector<KvecSelection>& first, int64_t b,
                              double nu) {
    const size_t L = layers.size();
    if (L <= 1 || nu == 0.0) return;
    if (first.size() != L) fail("kvec: a first selection of {} layers for {}", first.size(), L);
    int32_t max_unit = -1;
    std::vector<std::vector<double>> all;  // [L * H][m_h] for ref
    for (const KvecLayer& layer : layers) {
        for (const auto& head : layer.units) {
            for (int32_t u : head) max_unit = std::max(max_unit, u);
        }
        for (const auto& s : layer.scores) all.emplace_back(s.begin(), s.end());
    }
    const double ref = kvec_lambda(all, b, 1.0);
    if (ref == 0.0) return;
    // kept[l][u]: layer l keeps unit u (any head); count[u]: layers that keep it.
    std::vector<std::vector<char>> kept(L, std::vector<char>(static_cast<size_t>(max_unit + 1), 0));
    std::vector<int32_t> count(static_cast<size_t>(max_unit + 1), 0);
    for (size_t l = 0; l < L; ++l) {
        for (size_t h = 0; h < layers[l].units.size(); ++h) {
            for (int32_t i : first[l].keep.at(h)) {
                const auto u = static_cast<size_t>(layers[l].units[h][static_cast<size_t>(i)]);
                if (!kept[l][u]) {
                    kept[l][u] = 1;
                    ++count[u];
                }
            }
        }
    }
    const double others = static_cast<double>(L - 1);
    for (size_t l = 0; l < L; ++l) {
        for (size_t h = 0; h < layers[l].scores.size(); ++h) {
            std::vector<float>& s = layers[l].scores[h];
            for (size_t i = 0; i < s.size(); ++i) {
                const auto u = static_cast<size_t>(layers[l].units[h][i]);
                const double c = count[u] - kept[l][u];
                s[i] = static_cast<float>(s[i] + nu * ref * (1.0 - c / others));
            }
        }
    }
}

}  // namespace kvec::policy
