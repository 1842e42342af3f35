// GemFilter (arXiv 2409.17422), one of K-VEC's paper's baselines: an early layer's attention
// selects the prompt's tokens, then the model runs again on those tokens only. Here: the last
// query's attention row at the filter layer, summed over every query head, ranks the prompt's
// positions; the window's w last positions and the top B - w others are selected (ascending), and
// the session prefills those B tokens again at positions 0 .. B - 1 (Evictor::select_prompt), so
// every layer holds the same B entries per KV head. The first pass runs every layer (the paper
// stops at the filter layer to save time; the selection is the same).
#include <algorithm>

#include "policy/policy.h"
#include "policy/registry.h"
#include "util/error.h"

namespace kvec::policy {

namespace {

class GemFilterPolicy : public FramePolicy {
public:
    GemFilterPolicy(const FrameOptions& frame, double depth)
        : FramePolicy("gemfilter", frame, frame.window + 1, window_text(frame.window) + " and one more token"),
          depth_(depth) {
        if (frame.chunked || frame.decode_interval > 0) {
            fail("policy gemfilter selects the prompt once, after it: chunked and decode do not apply");
        }
    }

    ObservationRequest request() const override {
        ObservationRequest r;
        r.last_row = true;
        return r;
    }

    void begin_sequence(int32_t) override { selected_.clear(); }

    // At the filter layer of the prompt's last chunk: the selection (nothing is evicted here).
    bool on_prefill(const LayerView& view, KeepLists&) override {
        if (!view.final_chunk || view.layer != filter_layer(view.n_layer)) return false;
        const int64_t n = view.n_prompt, budget = budget_for(view), w = frame().window;
        selected_.clear();
        if (n <= budget) return false;
        std::vector<double> score(static_cast<size_t>(n), 0.0);  // [n] attention summed over the query heads
        for (const KvHeadView& head : view.heads) {
            require(head.last_row != nullptr, name(), "the last attention row", view);
            for (int g = 0; g < view.group; ++g) {
                const float* row = head.last_row + static_cast<int64_t>(g) * head.n_entries;  // [n_entries]
                for (int32_t j = 0; j < head.n_entries; ++j) {
                    const int32_t p = head.positions[j];
                    if (p >= 0 && p < n) score[static_cast<size_t>(p)] += row[j];
                }
            }
        }
        selected_ = top_k(std::span<const double>(score.data(), static_cast<size_t>(n - w)), budget - w);
        for (int64_t p = n - w; p < n; ++p) selected_.push_back(static_cast<int32_t>(p));
        return false;
    }

    bool select_prompt(std::vector<int32_t>& positions) override {
        if (selected_.empty()) return false;
        positions = std::move(selected_);
        selected_.clear();
        return true;
    }

    // The layer whose attention selects: floor(depth x (L - 1)).
    int filter_layer(int n_layer) const { return static_cast<int>(depth_ * (n_layer - 1)); }

protected:
    void select(const LayerView&, int64_t, KeepLists&) override {
        fail("policy gemfilter: internal error: it selects the prompt, it does not evict");
    }

private:
    double depth_;
    std::vector<int32_t> selected_;  // [B] ascending prompt positions, until select_prompt
};

}  // namespace

PolicyEntry gemfilter_entry() {
    std::vector<OptionSpec> options = frame_option_specs(32);
    options.push_back(float_option("depth", 0.4, 0.0, 1.0,
                                   "filter layer = floor(depth x (L - 1)) (the paper: layer 13 of Llama 3.1 8B's 32)"));
    return {"gemfilter",
            "GemFilter: an early layer's last-query attention selects B prompt tokens, the model runs again on them",
            options, [](const OptionValues& v) {
                return std::make_unique<GemFilterPolicy>(read_frame_options(v), v.get_float("depth"));
            }};
}

}  // namespace kvec::policy
