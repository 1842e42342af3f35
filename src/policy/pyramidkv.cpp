// PyramidKV (arXiv 2406.02069): SnapKV scores with per-layer budgets, the most at layer 0, mean b
// over layers (pyramid_budgets() in select.h), so the total memory equals SnapKV's.
#include "policy/policy.h"
#include "policy/registry.h"
#include "util/error.h"

namespace kvec::policy {

namespace {

class PyramidKvPolicy : public WindowScoredPolicy {
public:
    PyramidKvPolicy(const FrameOptions& frame, const SnapOptions& snap, double beta)
        : WindowScoredPolicy("pyramidkv", frame, snap), beta_(beta) {}

protected:
    void select(const LayerView& view, int64_t budget, KeepLists& keep) override {
        const int64_t w = frame().window;
        if (view.layer < 0 || view.layer >= view.n_layer) {
            fail("policy pyramidkv: layer {} outside the model's {} layers", view.layer,
                 view.n_layer);
        }
        int64_t n_prefix = 0;
        for (const KvHeadView& h : view.heads) {
            n_prefix = std::max(n_prefix, prefix_count(h.n_entries, w));
        }
        const auto budgets = pyramid_budgets(view.n_layer, budget - w, n_prefix, beta_);
        const int64_t layer_budget = budgets[static_cast<size_t>(view.layer)] + w;
        keep_top_per_head(view, layer_scores(view), layer_budget, w, keep);
    }

private:
    double beta_;
};

}  // namespace

PolicyEntry pyramidkv_entry() {
    std::vector<OptionSpec> options = frame_option_specs(32);
    for (auto& o : snap_option_specs()) options.push_back(std::move(o));
    options.push_back(float_option("beta", 20.0, 1.0, 1e6,
                                   "pyramid steepness: the last layer keeps about b / beta"));
    return {"pyramidkv", "PyramidKV: SnapKV scores, per-layer budgets decreasing with depth",
            options, [](const OptionValues& v) {
                return std::make_unique<PyramidKvPolicy>(read_frame_options(v),
                                                         read_snap_options(v), v.get_float("beta"));
            }};
}

}  // namespace kvec::policy
