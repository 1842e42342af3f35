// A hand-built LayerView for policy tests: per KV head its positions, keys and observation rows,
// owned here so the view's pointers stay valid.
#pragma once

#include <cstdint>
#include <vector>

#include "kvcache/eviction.h"

namespace kvec::policy::testing {

struct FakeHead {
    std::vector<int32_t> positions;  // [n]
    std::vector<float> keys;         // [n, head_dim] (empty: none)
    std::vector<float> window;       // [group, n] (empty: not provided)
    std::vector<float> column_sums;  // [group, n] (empty: not provided)
    std::vector<float> last_row;     // [group, n] (empty: not provided)
    std::vector<float> values;       // [n, head_dim] (empty: not provided)
    std::vector<float> reconstruction;  // [group, n] (empty: not provided)
};

struct FakeLayer {
    int layer = 0;
    int n_layer = 1;
    int group = 1;
    int head_dim = 2;
    int32_t n_prompt = 0;
    int32_t n_past = 0;
    bool final_chunk = true;
    EvictionPhase phase = EvictionPhase::Prefill;
    std::vector<int32_t> tokens;  // [n_past]
    std::vector<FakeHead> heads;  // [H]
    std::vector<float> queries;            // [n_queries, H * group * head_dim] (empty: none)
    std::vector<int32_t> query_positions;  // [n_queries]
    RopeInfo rope;

    // n_heads heads holding positions 0 .. n-1, prompt of n tokens (token id = position).
    static FakeLayer uniform(int n_heads, int32_t n, int group = 1) {
        FakeLayer f;
        f.group = group;
        f.n_prompt = n;
        f.n_past = n;
        f.heads.resize(static_cast<size_t>(n_heads));
        for (auto& h : f.heads) {
            for (int32_t i = 0; i < n; ++i) h.positions.push_back(i);
        }
        for (int32_t i = 0; i < n; ++i) f.tokens.push_back(i);
        return f;
    }

    LayerView view() {
        views_.assign(heads.size(), KvHeadView{});
        for (size_t h = 0; h < heads.size(); ++h) {
            KvHeadView& v = views_[h];
            const FakeHead& src = heads[h];
            v.n_entries = static_cast<int32_t>(src.positions.size());
            v.positions = src.positions.data();
            v.keys = src.keys.empty() ? nullptr : src.keys.data();
            v.window_scores = src.window.empty() ? nullptr : src.window.data();
            v.column_sums = src.column_sums.empty() ? nullptr : src.column_sums.data();
            v.last_row = src.last_row.empty() ? nullptr : src.last_row.data();
            v.values = src.values.empty() ? nullptr : src.values.data();
            v.reconstruction = src.reconstruction.empty() ? nullptr : src.reconstruction.data();
        }
        LayerView lv;
        lv.phase = phase;
        lv.layer = layer;
        lv.n_layer = n_layer;
        lv.n_head_kv = static_cast<int>(heads.size());
        lv.group = group;
        lv.head_dim = head_dim;
        lv.n_window = 0;
        lv.final_chunk = final_chunk;
        lv.n_prompt = n_prompt;
        lv.n_past = n_past;
        lv.tokens = tokens;
        lv.heads = views_;
        lv.queries = queries;
        lv.query_positions = query_positions;
        lv.rope = rope;
        return lv;
    }

private:
    std::vector<KvHeadView> views_;
};

}  // namespace kvec::policy::testing
