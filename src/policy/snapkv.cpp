// SnapKV (arXiv 2404.14469): window scores (mean over the w window queries and the group),
// pooled along tokens; keep the top B - w per KV head plus the window.
#include "policy/policy.h"
#include "policy/registry.h"

namespace kvec::policy {

namespace {

class SnapKvPolicy : public WindowScoredPolicy {
public:
    SnapKvPolicy(const FrameOptions& frame, const SnapOptions& snap)
        : WindowScoredPolicy("snapkv", frame, snap) {}

protected:
    void select(const LayerView& view, int64_t budget, KeepLists& keep) override {
        keep_top_per_head(view, layer_scores(view), budget, frame().window, keep);
    }
};

}  // namespace

PolicyEntry snapkv_entry() {
    std::vector<OptionSpec> options = frame_option_specs(32);
    for (auto& o : snap_option_specs()) options.push_back(std::move(o));
    return {"snapkv", "SnapKV: pooled window attention, top B - w per KV head + window", options,
            [](const OptionValues& v) {
                return std::make_unique<SnapKvPolicy>(read_frame_options(v), read_snap_options(v));
            }};
}

}  // namespace kvec::policy
