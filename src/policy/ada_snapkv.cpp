// Ada-SnapKV (arXiv 2407.11550): SnapKV scores, per-head budgets inside a layer from the layer's
// top H_kv * b (head, token) pairs (ada_select() in select.h), each head its top budget_h + window.
#include "policy/policy.h"
#include "policy/registry.h"

namespace kvec::policy {

namespace {

class AdaSnapKvPolicy : public WindowScoredPolicy {
public:
    AdaSnapKvPolicy(const FrameOptions& frame, const SnapOptions& snap, double alpha,
                    bool normalize)
        : WindowScoredPolicy("ada-snapkv", frame, snap), alpha_(alpha), normalize_(normalize) {}

protected:
    void select(const LayerView& view, int64_t budget, KeepLists& keep) override {
        const int64_t w = frame().window;
        const AdaSelection ada = ada_select(layer_scores(view), budget - w, alpha_, normalize_);
        keep_with_window(view, ada.keep, w, keep);
    }

private:
    double alpha_;
    bool normalize_;
};

}  // namespace

PolicyEntry ada_snapkv_entry() {
    std::vector<OptionSpec> options = frame_option_specs(32);
    for (auto& o : snap_option_specs()) options.push_back(std::move(o));
    options.push_back(float_option("alpha", 0.2, 0.0, 1.0,
                                   "safeguard: every head keeps at least floor(alpha * b)"));
    options.push_back(bool_option("normalize", false,
                                  "divide each head's scores by their sum before the layer pool"));
    return {"ada-snapkv", "Ada-KV on SnapKV scores: per-head budgets from the layer's top pairs",
            options, [](const OptionValues& v) {
                return std::make_unique<AdaSnapKvPolicy>(read_frame_options(v),
                                                         read_snap_options(v), v.get_float("alpha"),
                                                         v.get_bool("normalize"));
            }};
}

}  // namespace kvec::policy
