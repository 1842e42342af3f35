// HeadKV (arXiv 2410.19258): per-head budgets from head importance scores estimated on the model
// itself (head_importance.h; `kvec head-scores` writes them), each head its top b_h by SnapKV
// scores plus the window. Memory: exactly L x H_kv x B (heads with fewer candidates than their
// share keep all of them, and the total falls below, never above).
#include <algorithm>

#include "policy/head_importance.h"
#include "policy/policy.h"
#include "policy/registry.h"
#include "util/error.h"

namespace kvec::policy {

namespace {

class HeadKvPolicy : public WindowScoredPolicy {
public:
    HeadKvPolicy(const FrameOptions& frame, const SnapOptions& snap, HeadImportance importance, double beta)
        : WindowScoredPolicy("headkv", frame, snap), importance_(std::move(importance)), beta_(beta) {}

protected:
    void select(const LayerView& view, int64_t budget, KeepLists& keep) override {
        const int64_t w = frame().window;
        const std::vector<int64_t> b = budgets(view, budget);  // [H]
        HeadSelection prefix(view.heads.size());
        const auto scores = layer_scores(view);  // [H][m_h]
        for (size_t h = 0; h < view.heads.size(); ++h) prefix[h] = top_k(std::span<const float>(scores[h]), b[h]);
        keep_with_window(view, prefix, w, keep);
    }

    // The layer is compressed when a head holds more than the smallest share of the layer.
    int64_t layer_budget(const LayerView& view, int64_t budget) const override {
        const std::vector<int64_t> b = budgets(view, budget);  // [H]
        return *std::min_element(b.begin(), b.end()) + frame().window;
    }

private:
    // The per-head prefix budgets of view's layer under B = budget ([H]; L x H numbers, cheap).
    std::vector<int64_t> budgets(const LayerView& view, int64_t budget) const {
        if (view.n_layer != importance_.n_layer() || view.n_head_kv != importance_.n_head_kv()) {
            fail("policy headkv: the importance scores are for {} layers x {} KV heads ({}), the model has {} x {}",
                 importance_.n_layer(), importance_.n_head_kv(), importance_.model, view.n_layer, view.n_head_kv);
        }
        return headkv_budgets(importance_.scores, budget - frame().window, beta_).at(static_cast<size_t>(view.layer));
    }

    HeadImportance importance_;
    double beta_;
};

}  // namespace

PolicyEntry headkv_entry() {
    std::vector<OptionSpec> options = frame_option_specs(32);
    for (auto& o : snap_option_specs()) options.push_back(std::move(o));
    options.push_back(string_option("scores", "",
                                    "head importance file (JSON) of this model, written by `kvec head-scores`"));
    options.push_back(float_option("beta", 0.5, 0.0, 1.0,
                                   "share of every head's budget pooled and handed out by importance"));
    return {"headkv", "HeadKV: per-head budgets from head importance estimated on the model, SnapKV scores",
            options, [](const OptionValues& v) {
                const std::string path = v.get_string("scores");
                if (path.empty()) {
                    fail("policy headkv needs scores=FILE, the head importance of the model "
                         "(write it with: kvec head-scores -m MODEL --out FILE)");
                }
                return std::make_unique<HeadKvPolicy>(read_frame_options(v), read_snap_options(v),
                                                      read_head_importance(path), v.get_float("beta"));
            }};
}

}  // namespace kvec::policy
