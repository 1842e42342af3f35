#include "eval/head_scores.h"

#include <algorithm>

#include "eval/sweep.h"
#include "model/session.h"
#include "policy/select.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace kvec::eval {

double copy_mass(std::span<const float> p, std::span<const int32_t> positions, std::span<const int32_t> tokens,
                 int32_t n_source, int32_t target, int64_t top_k) {
    KVEC_CHECK(p.size() == positions.size());
    double mass = 0.0;
    for (int32_t j : policy::top_k(p, top_k)) {
        const int32_t pos = positions[static_cast<size_t>(j)];
        if (pos >= 0 && pos < n_source && static_cast<size_t>(pos) < tokens.size() &&
            tokens[static_cast<size_t>(pos)] == target) {
            mass += p[static_cast<size_t>(j)];
        }
    }
    return mass;
}

namespace {

// Never evicts; at every step that predicts an answer token, adds each KV head's copy mass.
class CopyProbe : public Evictor {
public:
    CopyProbe(int n_layer, int n_head_kv, int64_t top_k)
        : top_k_(top_k), sums_(static_cast<size_t>(n_layer), std::vector<double>(static_cast<size_t>(n_head_kv), 0.0)) {}

    ObservationRequest request() const override {
        ObservationRequest r;
        r.last_row = true;
        r.decode_interval = 1;
        return r;
    }
    bool on_prefill(const LayerView& view, KeepLists&) override {
        if (view.final_chunk) add(view);
        return false;
    }
    bool on_decode(const LayerView& view, KeepLists&) override {
        add(view);
        return false;
    }

    int32_t target = -1;    // the answer token the current step predicts (-1: none)
    int32_t n_source = 0;   // positions of the prompt (the copy source)
    int64_t steps = 0;      // steps counted (one per layer 0 call)
    const std::vector<std::vector<double>>& sums() const { return sums_; }

private:
    void add(const LayerView& view) {
        if (target < 0) return;
        if (view.layer == 0) ++steps;
        for (size_t h = 0; h < view.heads.size(); ++h) {
            const KvHeadView& head = view.heads[h];
            const auto n = static_cast<size_t>(head.n_entries);
            double m = 0.0;
            for (int g = 0; g < view.group; ++g) {
                m += copy_mass(std::span<const float>(head.last_row + static_cast<size_t>(g) * n, n),
                               std::span<const int32_t>(head.positions, n), view.tokens, n_source, target, top_k_);
            }
            sums_[static_cast<size_t>(view.layer)][h] += m / view.group;
        }
    }

    int64_t top_k_;
    std::vector<std::vector<double>> sums_;  // [L][H] copy mass summed over steps
};

}  // namespace

policy::HeadImportance estimate_head_importance(Session& session, const Tokenizer& tokenizer,
                                                const std::vector<EvalItem>& items, const HeadScoreOptions& options) {
    const ModelConfig& c = session.model().config();
    CopyProbe probe(c.n_layer, c.n_head_kv, options.top_k);
    int64_t used = 0;
    {
        session.reset();
        session.set_evictor(&probe);
        const SessionGuard guard(session);  // reset and detached again, also on errors
        for (const EvalItem& item : items) {
            if (item.references.empty()) continue;
            std::vector<int32_t> answer = tokenizer.encode(item.references.front(), /*add_special=*/false);
            if (answer.empty()) continue;
            if (static_cast<int>(answer.size()) > options.max_answer_tokens) answer.resize(static_cast<size_t>(options.max_answer_tokens));
            session.reset();
            probe.n_source = static_cast<int32_t>(item.prompt.size());
            probe.target = answer[0];
            session.prefill(item.prompt);
            for (size_t j = 1; j < answer.size(); ++j) {
                probe.target = answer[j];
                session.decode(answer[j - 1]);
            }
            probe.target = -1;
            ++used;
        }
    }
    if (used == 0 || probe.steps == 0) fail("head scores: no item has an answer to copy");
    policy::HeadImportance out;
    out.items = used;
    out.scores = probe.sums();
    for (auto& row : out.scores) {
        for (double& s : row) s /= static_cast<double>(probe.steps);
    }
    return out;
}

}  // namespace kvec::eval
