// KeyDiff (arXiv 2504.15364): score = negative cosine similarity of each key to the mean key of
// its head (keys only, no attention); keep the top B - w plus the window. anchor=unit averages the
// keys scaled to unit length instead (kvpress's KeyDiffPress).
#include "policy/policy.h"
#include "policy/registry.h"

namespace kvec::policy {

namespace {

class KeyDiffPolicy : public FramePolicy {
public:
    KeyDiffPolicy(const FrameOptions& frame, bool unit_anchor)
        : FramePolicy("keydiff", frame, frame.window, window_text(frame.window)), unit_anchor_(unit_anchor) {}

protected:
    void select(const LayerView& view, int64_t budget, KeepLists& keep) override {
        const int64_t w = frame().window;
        std::vector<std::vector<float>> scores(view.heads.size());  // [H][m_h]
        for (size_t h = 0; h < view.heads.size(); ++h) {
            const KvHeadView& head = view.heads[h];
            if (head.n_entries <= budget) continue;
            require(head.keys != nullptr, name(), "keys", view);
            const size_t count =
                static_cast<size_t>(head.n_entries) * static_cast<size_t>(view.head_dim);
            scores[h] = keydiff_scores(std::span<const float>(head.keys, count), view.head_dim, unit_anchor_);
            scores[h].resize(static_cast<size_t>(prefix_count(head.n_entries, w)));
        }
        keep_top_per_head(view, scores, budget, w, keep);
    }

private:
    bool unit_anchor_;
};

}  // namespace

PolicyEntry keydiff_entry() {
    std::vector<OptionSpec> options = frame_option_specs(32);
    options.push_back(choice_option("anchor", "mean", {"mean", "unit"},
                                    "mean: the mean key; unit: the mean of the keys scaled to unit length (kvpress)"));
    return {"keydiff", "KeyDiff: keys least similar to the head's mean key + window", options,
            [](const OptionValues& v) {
                return std::make_unique<KeyDiffPolicy>(read_frame_options(v), v.get_choice("anchor") == "unit");
            }};
}

}  // namespace kvec::policy
