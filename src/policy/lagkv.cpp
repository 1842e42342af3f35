// LagKV (arXiv 2504.04704; NVIDIA kvpress LagKVPress): each partition of `lag` entries is scored
// against the min / max of the next partition (lag-relative normalisation of keys and values),
// query-free; the sinks and the entries without a complete next partition rank first
// (lagkv_scores() in agnostic_scores.h). Keep the top B - w plus the window, or Ada-KV's budgets.
#include "policy/agnostic_scores.h"
#include "policy/policy.h"
#include "policy/registry.h"

namespace kvec::policy {

namespace {

class LagKvPolicy : public ScoredPolicy {
public:
    LagKvPolicy(const FrameOptions& frame, const LagKvOptions& lag, const AllocOptions& alloc)
        : ScoredPolicy("lagkv", frame, lag.sinks + frame.window, sinks_text(lag.sinks, frame.window), alloc),
          lag_(lag) {}

    std::vector<std::vector<float>> scores(const LayerView& view) const override {
        const int64_t w = frame().window;
        std::vector<std::vector<float>> scores(view.heads.size());  // [H][m_h]
        for (size_t h = 0; h < view.heads.size(); ++h) {
            const KvHeadView& head = view.heads[h];
            const int64_t m = prefix_count(head.n_entries, w);
            if (m == 0) continue;
            require(head.keys != nullptr, name(), "keys", view);
            require(head.values != nullptr, name(), "values", view);
            const auto count = static_cast<size_t>(int64_t{head.n_entries} * view.head_dim);
            // Every entry takes part (a partition's reference may lie in the window).
            scores[h] = lagkv_scores(std::span<const float>(head.keys, count),
                                     std::span<const float>(head.values, count), view.head_dim, lag_);
            scores[h].resize(static_cast<size_t>(m));
        }
        return scores;
    }

protected:
    void add_observations(ObservationRequest& r) const override { r.values = true; }

private:
    LagKvOptions lag_;
};

}  // namespace

PolicyEntry lagkv_entry() {
    std::vector<OptionSpec> options = frame_option_specs(0);
    options.push_back(sinks_option_spec(4));
    options.push_back(int_option("lag", 128, 1, 1 << 20,
                                 "partition size: each partition is scored against the next one"));
    options.push_back(bool_option("cross", false,
                                  "compare raw scores across partitions (kvpress cross_scoring) "
                                  "instead of ranks within each partition"));
    for (auto& o : alloc_option_specs(false, 0.2)) options.push_back(std::move(o));
    return {"lagkv", "LagKV: keys and values against the next partition's min/max (query-free)",
            options, [](const OptionValues& v) {
                LagKvOptions lag;
                lag.sinks = v.get_int("sinks");
                lag.lag = v.get_int("lag");
                lag.cross = v.get_bool("cross");
                return std::make_unique<LagKvPolicy>(read_frame_options(v), lag, read_alloc_options(v));
            }};
}

}  // namespace kvec::policy
