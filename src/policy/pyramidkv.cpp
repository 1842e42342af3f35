// PyramidKV (arXiv 2406.02069): SnapKV scores with per-layer budgets, the most at layer 0, mean b
// over layers (pyramid_budgets() in select.h), so the total memory equals SnapKV's.
#include <algorithm>

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
        keep_top_per_head(view, layer_scores(view), layer_budget(view, budget), frame().window, keep);
    }

    int64_t layer_budget(const LayerView& view, int64_t budget) const override {
        return pyramid_layer_budget(view, budget, frame().window, beta_, name());
    }

private:
    double beta_;
};

}  // namespace

int64_t pyramid_layer_budget(const LayerView& view, int64_t budget, int64_t window, double beta,
                             const std::string& policy) {
    if (view.layer < 0 || view.layer >= view.n_layer) {
        fail("policy {}: layer {} outside the model's {} layers", policy, view.layer, view.n_layer);
    }
    // Every layer of one compression round must use the same schedule, or the per-layer budgets
    // do not add up to L x b. After a one-shot prompt every layer holds N entries; in chunked
    // prefill and decoding each layer holds its own previous share plus the new entries, so the
    // schedule is taken at the sequence length so far (n_past - w candidates, N - w in one-shot
    // mode) for all of them. A layer with fewer candidates than its share keeps them all (the
    // total then falls below L x B, never above).
    const int64_t n_prefix = std::max<int64_t>(0, static_cast<int64_t>(view.n_past) - window);
    const auto budgets = pyramid_budgets(view.n_layer, budget - window, n_prefix, beta);
    return budgets[static_cast<size_t>(view.layer)] + window;
}

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
