#include "kvcache/eviction.h"

#include <algorithm>

#include "util/error.h"

namespace kvec {

void reduce_over_group(const float* scores, int group, int32_t n, GroupReduction reduction,
                       float* out) {
    KVEC_CHECK(group >= 1 && n >= 0);
    std::copy(scores, scores + n, out);
    for (int g = 1; g < group; ++g) {
        const float* row = scores + static_cast<int64_t>(g) * n;  // [n]
        if (reduction == GroupReduction::Mean) {
            for (int32_t i = 0; i < n; ++i) out[i] += row[i];
        } else {
            for (int32_t i = 0; i < n; ++i) out[i] = std::max(out[i], row[i]);
        }
    }
    if (reduction == GroupReduction::Mean && group > 1) {
        const float inv = 1.0f / static_cast<float>(group);
        for (int32_t i = 0; i < n; ++i) out[i] *= inv;
    }
}

void check_keep_lists(const LayerView& view, const KeepLists& keep) {
    if (keep.size() != static_cast<size_t>(view.n_head_kv)) {
        fail("eviction of layer {}: {} keep lists for {} KV heads", view.layer, keep.size(),
             view.n_head_kv);
    }
    for (int h = 0; h < view.n_head_kv; ++h) {
        const auto& k = keep[static_cast<size_t>(h)];
        const int32_t n = view.heads[static_cast<size_t>(h)].n_entries;
        for (size_t i = 0; i < k.size(); ++i) {
            if (k[i] < 0 || k[i] >= n) {
                fail("eviction of layer {} head {}: index {} is outside [0, {})", view.layer, h, k[i], n);
            }
            if (i > 0 && k[i] <= k[i - 1]) {
                fail("eviction of layer {} head {}: indices are not strictly increasing ({} after {})",
                     view.layer, h, k[i], k[i - 1]);
            }
        }
    }
}

void check_repositioning(const LayerView& view, const KeepLists& keep, const Repositioning& r) {
    if (r.positions.size() != keep.size()) {
        fail("re-positioning of layer {}: {} position lists for {} KV heads", view.layer,
             r.positions.size(), keep.size());
    }
    for (size_t h = 0; h < keep.size(); ++h) {
        const auto& p = r.positions[h];
        if (p.size() != keep[h].size()) {
            fail("re-positioning of layer {} head {}: {} new positions for {} kept entries",
                 view.layer, h, p.size(), keep[h].size());
        }
        for (size_t i = 0; i < p.size(); ++i) {
            if (p[i] < 0 || p[i] >= r.next_position) {
                fail("re-positioning of layer {} head {}: position {} is outside [0, {})",
                     view.layer, h, p[i], r.next_position);
            }
            if (i > 0 && p[i] <= p[i - 1]) {
                fail("re-positioning of layer {} head {}: positions are not strictly increasing "
                     "({} after {})", view.layer, h, p[i], p[i - 1]);
            }
        }
    }
}

}  // namespace kvec
