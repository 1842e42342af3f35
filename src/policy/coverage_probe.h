// CoverageProbe: wraps any eviction policy and measures the coverage of what it keeps after the
// prompt (the final prefill round), in both units, with one fixed window for every policy so that
// the numbers compare across policies:
//   prefix = positions [0, N - w);  S_{l,h} = prefix positions head h of layer l keeps;
//   C_head(l) = |union_h S_{l,h}| / |prefix|,  C_layer = |union_{l,h} S_{l,h}| / |prefix|,
//   R(l) = sum_h |S_{l,h}| / |union_h S_{l,h}|;
// with token identities the units are the token ids of those positions and the universe is the
// number of distinct ids in the prefix. A layer the policy leaves alone counts as keeping all.
#pragma once

#include <cstdint>
#include <vector>

#include "kvcache/eviction.h"
#include "policy/coverage.h"

namespace kvec::policy {

struct CoverageReport {
    int32_t n_prompt = 0;
    int64_t window = 0;
    int64_t universe_positions = 0;        // N - w
    int64_t universe_tokens = 0;           // distinct token ids in the prefix
    std::vector<LayerCoverage> positions;  // [L] per layer, position units
    std::vector<LayerCoverage> tokens;     // [L] per layer, token-identity units
    double c_layer_positions = 0.0;
    double c_layer_tokens = 0.0;
    // Where the kept prefix entries lie (every layer and head): entries at positions in tenth k of
    // the prefix, [p * 10 / (N - w)] = k (the recency question: SnapKV-style scores favour the
    // prompt's end).
    std::vector<int64_t> kept_tenths = std::vector<int64_t>(10, 0);  // [10]

    double mean_c_head(bool token_units) const;
    double mean_redundancy(bool token_units) const;
    // kept_tenths as shares of their sum (all 0 when nothing of the prefix is kept).
    std::vector<double> kept_tenth_shares() const;  // [10]
};

class CoverageProbe : public Evictor {
public:
    // `inner` must outlive the probe. window: the w of the prefix definition (default 32).
    explicit CoverageProbe(Evictor& inner, int64_t window = 32);

    ObservationRequest request() const override { return inner_.request(); }
    std::optional<BudgetPlan> budget_plan(int64_t n_prompt) const override { return inner_.budget_plan(n_prompt); }
    void begin_sequence(int32_t n_prompt) override;
    bool on_prefill(const LayerView& view, KeepLists& keep) override;
    void observe(const LayerView& view) override { inner_.observe(view); }
    bool on_decode(const LayerView& view, KeepLists& keep) override {
        return inner_.on_decode(view, keep);
    }
    bool reposition(const LayerView& view, const KeepLists& keep, Repositioning& out) override {
        return inner_.reposition(view, keep, out);
    }
    // A prompt selection (GemFilter) is what every head of every layer keeps: the report is
    // rebuilt from the selected positions.
    bool select_prompt(std::vector<int32_t>& positions) override;

    // Coverage after the last prompt processed (layers in order; empty before any prompt).
    const CoverageReport& report() const { return report_; }

private:
    void record(const LayerView& view, const KeepLists* keep);
    // One layer's kept prefix units [H][k_h] into the report.
    void add_layer(const std::vector<std::vector<int32_t>>& pos_units, const std::vector<std::vector<int32_t>>& tok_units);

    Evictor& inner_;
    int64_t window_;
    CoverageReport report_;
    std::vector<int32_t> prefix_tokens_;  // [N - w] token unit of each prefix position
    CoverageTracker by_position_{0};
    CoverageTracker by_token_{0};
    int n_layer_ = 0;    // of the views recorded
    int n_head_kv_ = 0;
};

}  // namespace kvec::policy
