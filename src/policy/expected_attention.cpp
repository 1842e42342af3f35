// Expected Attention (arXiv 2510.00636; NVIDIA kvpress ExpectedAttentionPress): the attention a
// key is expected to receive from future queries, in closed form. Per query head, the mean and
// covariance of the layer's recent queries before RoPE (those at positions >= sinks), rotated by
// the RoPE rotation averaged over the next `future` positions, give the logits
// z_i = mean . k_i / sqrt(d) + k_i^T cov k_i / (2 d); softmax over the head's entries past the
// sinks, mean over the group, times ||v_i|| (vnorm). Sinks rank first. Keep the top B - w plus the
// window, or Ada-KV's per-head budgets (ada=true, the paper's head-adaptive variant).
#include <cmath>
#include <limits>

#include "policy/agnostic_scores.h"
#include "policy/policy.h"
#include "policy/registry.h"

namespace kvec::policy {

namespace {

struct ExpectedOptions {
    int64_t sinks = 4;
    int64_t queries = 128;
    int64_t future = 512;
    bool covariance = true;
    bool vnorm = true;
};

class ExpectedAttentionPolicy : public ScoredPolicy {
public:
    ExpectedAttentionPolicy(const FrameOptions& frame, const ExpectedOptions& e, const AllocOptions& alloc)
        : ScoredPolicy("expected-attention", frame, e.sinks + frame.window, sinks_text(e.sinks, frame.window),
                       alloc),
          e_(e) {}

    std::vector<std::vector<float>> scores(const LayerView& view) const override {
        const int64_t w = frame().window;
        const int G = view.group, D = view.head_dim, n_head = view.n_head_kv * view.group;
        require(!view.query_positions.empty(), name(), "the recent queries", view);
        const AveragedRope rbar = averaged_rope(view.rope, view.n_past, e_.future);
        std::vector<std::vector<float>> scores(view.heads.size());  // [H][m_h]
        for (size_t h = 0; h < view.heads.size(); ++h) {
            const KvHeadView& head = view.heads[h];
            const int64_t n = head.n_entries;
            const int64_t m = prefix_count(n, w);
            if (m == 0) continue;
            require(head.keys != nullptr, name(), "keys", view);
            require(!e_.vnorm || head.values != nullptr, name(), "values", view);
            const int64_t s = std::min(e_.sinks, n);  // the softmax runs over entries [s, n)
            std::vector<double> score(static_cast<size_t>(n - s), 0.0);  // [n - s] group mean
            for (int g = 0; g < G; ++g) {
                QueryStats st = query_stats(view.queries, view.query_positions, n_head, D,
                                            static_cast<int>(h) * G + g, static_cast<int32_t>(e_.sinks),
                                            e_.covariance);
                rotate(st, rbar, D);
                const std::vector<double> z = expected_logits(
                    std::span<const float>(head.keys + s * D, static_cast<size_t>((n - s) * D)), D, st);
                double top = -std::numeric_limits<double>::infinity(), sum = 0.0;
                for (double v : z) top = std::max(top, v);
                for (double v : z) sum += std::exp(v - top);
                for (size_t i = 0; i < z.size(); ++i) score[i] += std::exp(z[i] - top) / sum / G;
            }
            auto& out = scores[h];
            out.resize(static_cast<size_t>(m));
            for (int64_t i = 0; i < m; ++i) {
                if (i < s) {
                    out[static_cast<size_t>(i)] = std::numeric_limits<float>::infinity();
                    continue;
                }
                double v = score[static_cast<size_t>(i - s)];
                if (e_.vnorm) {
                    double ss = 0.0;
                    for (int c = 0; c < D; ++c) ss += double{head.values[i * D + c]} * head.values[i * D + c];
                    v *= std::sqrt(ss);
                }
                out[static_cast<size_t>(i)] = static_cast<float>(v);
            }
        }
        return scores;
    }

protected:
    void add_observations(ObservationRequest& r) const override {
        r.queries = static_cast<int>(e_.queries);
        r.values = e_.vnorm;
    }

private:
    ExpectedOptions e_;
};

}  // namespace

PolicyEntry expected_attention_entry() {
    std::vector<OptionSpec> options = frame_option_specs(0);
    options.push_back(sinks_option_spec(4));
    options.push_back(int_option("queries", 128, 1, 1 << 16,
                                 "recent queries (before RoPE) whose mean and covariance model the "
                                 "future queries"));
    options.push_back(int_option("future", 512, 1, 1 << 20,
                                 "future positions the RoPE rotation is averaged over"));
    options.push_back(bool_option("covariance", true, "include the queries' covariance (else the mean only)"));
    options.push_back(bool_option("vnorm", true, "weight each score by the L2 norm of the entry's value"));
    for (auto& o : alloc_option_specs(false, 0.2)) options.push_back(std::move(o));
    return {"expected-attention",
            "Expected Attention: attention expected from future queries (Gaussian, averaged RoPE) x ||v||",
            options, [](const OptionValues& v) {
                ExpectedOptions e;
                e.sinks = v.get_int("sinks");
                e.queries = v.get_int("queries");
                e.future = v.get_int("future");
                e.covariance = v.get_bool("covariance");
                e.vnorm = v.get_bool("vnorm");
                return std::make_unique<ExpectedAttentionPolicy>(read_frame_options(v), e,
                                                                 read_alloc_options(v));
            }};
}

}  // namespace kvec::policy
