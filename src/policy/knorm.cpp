// Knorm (arXiv 2406.11430; NVIDIA kvpress KnormPress): score = minus the L2 norm of the key, keys
// only (no query, no attention); keep the top B - w plus the window, or with ada=true Ada-KV's
// per-head budgets on the same scores.
#include "policy/agnostic_scores.h"
#include "policy/policy.h"
#include "policy/registry.h"

namespace kvec::policy {

namespace {

class KnormPolicy : public ScoredPolicy {
public:
    KnormPolicy(const FrameOptions& frame, const AllocOptions& alloc)
        : ScoredPolicy("knorm", frame, frame.window, window_text(frame.window), alloc) {}

    std::vector<std::vector<float>> scores(const LayerView& view) const override {
        const int64_t w = frame().window;
        std::vector<std::vector<float>> scores(view.heads.size());  // [H][m_h]
        for (size_t h = 0; h < view.heads.size(); ++h) {
            const KvHeadView& head = view.heads[h];
            const int64_t m = prefix_count(head.n_entries, w);
            if (m == 0) continue;
            require(head.keys != nullptr, name(), "keys", view);
            scores[h] = knorm_scores(std::span<const float>(head.keys, static_cast<size_t>(m * view.head_dim)),
                                     view.head_dim);
        }
        return scores;
    }
};

}  // namespace

PolicyEntry knorm_entry() {
    std::vector<OptionSpec> options = frame_option_specs(32);
    for (auto& o : alloc_option_specs(false, 0.2)) options.push_back(std::move(o));
    return {"knorm", "Knorm: keys with the smallest L2 norm + window (query-free)", options,
            [](const OptionValues& v) {
                return std::make_unique<KnormPolicy>(read_frame_options(v), read_alloc_options(v));
            }};
}

}  // namespace kvec::policy
