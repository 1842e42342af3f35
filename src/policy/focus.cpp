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
    kv.values = head.keys;  // unused without outputs
    kv.head_dim = D;

    const int64_t first = n_q_all - n_q;
    std::vector<int32_t> vis(static_cast<size_t>(n_q));  // [n_q] entries query first + k sees (causal by position)
    for (int64_t k = 0; k < n_q; ++k) {
        const int32_t pos = view.query_positions[static_cast<size_t>(first + k)];
        vis[static_cast<size_t>(k)] = static_cast<int32_t>(std::upper_bound(head.positions, head.positions + n, pos) - head.positions);
    }
    // The queries in a fixed number of blocks, each summed on its own and the blocks added in
    // order: the same result with any number of threads. Inside a block, a run of queries each of
    // which sees one entry more than the one before (a one-shot prompt's last queries: all of them)
    // is one causal attention call.
    constexpr int64_t kBlocks = 8;
    const float inv = 1.0f / static_cast<float>(n_q);
    std::vector<std::vector<float>> partial(kBlocks);  // [blocks][G, n]
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t b = 0; b < kBlocks; ++b) {
        const int64_t k1 = (b + 1) * n_q / kBlocks;
        std::vector<float>& acc = partial[static_cast<size_t>(b)];
        for (int64_t k0 = b * n_q / kBlocks; k0 < k1;) {
            int64_t T = 1;
            while (k0 + T < k1 && vis[static_cast<size_t>(k0 + T)] == vis[static_cast<size_t>(k0 + T - 1)] + 1) ++T;
            const int32_t n_vis = vis[static_cast<size_t>(k0)];
            if (n_vis == 0) {  // sees nothing: skipped, the rest of its run starts after it
                k0 += 1;
                continue;
            }
            std::vector<float> q(static_cast<size_t>(T * G * D));  // [T, G, D] the group's queries
            for (int64_t t = 0; t < T; ++t) {
                const float* src = view.queries.data() + ((first + k0 + t) * n_head + static_cast<int64_t>(h) * G) * D;
                std::copy(src, src + int64_t{G} * D, q.begin() + t * G * D);
            }
            ops::rope(q.data(), T, G, D, view.query_positions.data() + first + k0, rope);
            std::vector<float> p(static_cast<size_t>(T * G * n));  // [T * G, n] probability rows
            attention_causal(q.data(), {int64_t{G} * D, D}, T, G, kv, n_vis, view.attn_scale, p.data(), n, nullptr, {},
                             view.attn_softcap);
            if (acc.empty()) acc.assign(static_cast<size_t>(int64_t{G} * n), 0.0f);
            for (int64_t t = 0; t < T; ++t) {
                for (int g = 0; g < G; ++g) {
                    const float* pr = p.data() + (t * G + g) * n;  // [n_vis + t]
                    float* out = acc.data() + int64_t{g} * n;      // [n]
                    for (int64_t j = 0; j < n_vis + t; ++j) out[j] += pr[j] * inv;
                }
            }
            k0 += T;
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
