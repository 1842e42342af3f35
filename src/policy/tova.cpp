// TOVA (arXiv 2401.06104): score = attention of the last query only (w = 1), reduced over the
// group; keep the top B - 1 plus the newest entry. With decode=1 it evicts greedily every step.
#include "policy/policy.h"
#include "policy/registry.h"

namespace kvec::policy {

namespace {

class TovaPolicy : public FramePolicy {
public:
    TovaPolicy(const FrameOptions& frame, GqaReduce gqa)
        : FramePolicy("tova", frame, 1, "the newest entry"), gqa_(gqa) {}

protected:
    void add_observations(ObservationRequest& r) const override { r.last_row = true; }
    void select(const LayerView& view, int64_t budget, KeepLists& keep) override {
        const auto scores = reduced_scores(view, Observation::LastRow, 1, gqa_, name());
        keep_top_per_head(view, scores, budget, 1, keep);
    }

private:
    GqaReduce gqa_;
};

}  // namespace

PolicyEntry tova_entry() {
    std::vector<OptionSpec> options = frame_option_specs(-1);
    options.push_back(gqa_option_spec());
    return {"tova", "TOVA: attention of the last query (window 1)", options,
            [](const OptionValues& v) {
                return std::make_unique<TovaPolicy>(read_frame_options(v, 1),
                                                    parse_gqa_reduce(v.get_choice("gqa")));
            }};
}

}  // namespace kvec::policy
