// H2O (arXiv 2306.14048): score = accumulated attention (column sums over every query since the
// entry entered the cache, reduced over the group); keep the top B - w plus the w most recent.
// With decode=1 it re-selects every step (the "heavy hitter oracle").
#include "policy/policy.h"
#include "policy/registry.h"

namespace kvec::policy {

namespace {

class H2oPolicy : public FramePolicy {
public:
    H2oPolicy(const FrameOptions& frame, GqaReduce gqa)
        : FramePolicy("h2o", frame, frame.window, window_text(frame.window)), gqa_(gqa) {}

protected:
    void add_observations(ObservationRequest& r) const override { r.column_sums = true; }
    void select(const LayerView& view, int64_t budget, KeepLists& keep) override {
        const int64_t w = frame().window;
        const auto scores = reduced_scores(view, Observation::ColumnSums, w, gqa_, name());
        keep_top_per_head(view, scores, budget, w, keep);
    }

private:
    GqaReduce gqa_;
};

}  // namespace

PolicyEntry h2o_entry() {
    std::vector<OptionSpec> options = frame_option_specs(32);
    options.push_back(gqa_option_spec());
    return {"h2o", "H2O: accumulated attention (heavy hitters) + recent window", options,
            [](const OptionValues& v) {
                return std::make_unique<H2oPolicy>(read_frame_options(v),
                                                   parse_gqa_reduce(v.get_choice("gqa")));
            }};
}

}  // namespace kvec::policy
