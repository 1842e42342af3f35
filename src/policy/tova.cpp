// TOVA (arXiv 2401.06104): score = attention of the last query only (w = 1), reduced over the
// group; keep the top B - 1 plus the newest entry. With decode=1 it evicts greedily every step.
// scope=layer (the default) averages the scores over every KV head of the layer, so that all heads
// keep the same entries: the paper's and kvpress's TOVA, chosen on the development split
// (docs/peer-kvpress.md); scope=head ranks each KV head on its own, kvec's TOVA before 2026-12-06.
#include "policy/policy.h"
#include "policy/registry.h"
#include "util/error.h"

namespace kvec::policy {

namespace {

class TovaPolicy : public FramePolicy {
public:
    TovaPolicy(const FrameOptions& frame, GqaReduce gqa, bool layer_scope)
        : FramePolicy("tova", frame, 1, "the newest entry"), gqa_(gqa), layer_scope_(layer_scope) {}

protected:
    void add_observations(ObservationRequest& r) const override { r.last_row = true; }
    void select(const LayerView& view, int64_t budget, KeepLists& keep) override {
        auto scores = reduced_scores(view, Observation::LastRow, 1, gqa_, name());  // [H][m_h]
        if (layer_scope_ && scores.size() > 1) {
            // Every head has kept the same entries (this scope keeps them aligned), so position i
            // is the same token in every head: the layer's score is their mean.
            std::vector<float> mean(scores[0].size(), 0.0f);  // [m]
            for (size_t h = 0; h < scores.size(); ++h) {
                if (scores[h].size() != mean.size() || view.heads[h].n_entries != view.heads[0].n_entries) {
                    fail("tova:scope=layer: the KV heads of layer {} hold different entries (an earlier policy "
                         "compacted them head by head)", view.layer);
                }
                for (size_t i = 0; i < mean.size(); ++i) mean[i] += scores[h][i];
            }
            for (float& x : mean) x /= static_cast<float>(scores.size());
            for (auto& s : scores) s = mean;
        }
        keep_top_per_head(view, scores, budget, 1, keep);
    }

private:
    GqaReduce gqa_;
    bool layer_scope_;
};

}  // namespace

PolicyEntry tova_entry() {
    std::vector<OptionSpec> options = frame_option_specs(-1);
    options.push_back(gqa_option_spec());
    options.push_back(choice_option("scope", "layer", {"head", "layer"},
                                    "layer: the scores averaged over the layer's KV heads, one set for all of them "
                                    "(the paper's and kvpress's TOVA); head: each KV head keeps its own top entries"));
    return {"tova", "TOVA: attention of the last query (window 1)", options,
            [](const OptionValues& v) {
                return std::make_unique<TovaPolicy>(read_frame_options(v, 1), parse_gqa_reduce(v.get_choice("gqa")),
                                                    v.get_choice("scope") == "layer");
            }};
}

}  // namespace kvec::policy
