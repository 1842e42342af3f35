// Ada-PyramidKV (arXiv 2407.11550, the Ada-KV paper's PyramidKV variant): PyramidKV's per-layer
// budgets (pyramid_budgets() in select.h), each layer's share spread over its KV heads by Ada-KV's
// allocation (ada_select()) on SnapKV scores. The total memory equals SnapKV's.
#include "policy/policy.h"
#include "policy/registry.h"

namespace kvec::policy {

namespace {

class AdaPyramidKvPolicy : public WindowScoredPolicy {
public:
    AdaPyramidKvPolicy(const FrameOptions& frame, const SnapOptions& snap, double beta, double alpha)
        : WindowScoredPolicy("ada-pyramidkv", frame, snap), beta_(beta), alpha_(alpha) {}

protected:
    void select(const LayerView& view, int64_t budget, KeepLists& keep) override {
        const int64_t w = frame().window;
        const AdaSelection ada = ada_select(layer_scores(view), layer_budget(view, budget) - w, alpha_, false);
        keep_with_window(view, ada.keep, w, keep);
    }

    int64_t layer_budget(const LayerView& view, int64_t budget) const override {
        return pyramid_layer_budget(view, budget, frame().window, beta_, name());
    }

private:
    double beta_;
    double alpha_;
};

}  // namespace

PolicyEntry ada_pyramidkv_entry() {
    std::vector<OptionSpec> options = frame_option_specs(32);
    for (auto& o : snap_option_specs()) options.push_back(std::move(o));
    options.push_back(float_option("beta", 20.0, 1.0, 1e6, "pyramid steepness: the last layer keeps about b / beta"));
    options.push_back(float_option("alpha", 0.2, 0.0, 1.0, "safeguard: every head keeps at least floor(alpha * b_l)"));
    return {"ada-pyramidkv", "Ada-PyramidKV: PyramidKV's per-layer budgets, Ada-KV's per-head split inside each layer",
            options, [](const OptionValues& v) {
                return std::make_unique<AdaPyramidKvPolicy>(read_frame_options(v), read_snap_options(v),
                                                            v.get_float("beta"), v.get_float("alpha"));
            }};
}

}  // namespace kvec::policy
