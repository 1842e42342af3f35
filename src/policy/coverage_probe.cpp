#include "policy/coverage_probe.h"

#include <algorithm>

#include "util/error.h"

namespace kvec::policy {

double CoverageReport::mean_c_head(bool token_units) const {
    const auto& layers = token_units ? tokens : positions;
    if (layers.empty()) return 0.0;
    double sum = 0.0;
    for (const auto& l : layers) sum += l.c_head;
    return sum / static_cast<double>(layers.size());
}

double CoverageReport::mean_redundancy(bool token_units) const {
    const auto& layers = token_units ? tokens : positions;
    if (layers.empty()) return 0.0;
    double sum = 0.0;
    for (const auto& l : layers) sum += l.redundancy;
    return sum / static_cast<double>(layers.size());
}

std::vector<double> CoverageReport::kept_tenth_shares() const {
    int64_t total = 0;
    for (int64_t c : kept_tenths) total += c;
    std::vector<double> out(kept_tenths.size(), 0.0);  // [10]
    for (size_t k = 0; k < out.size() && total > 0; ++k) {
        out[k] = static_cast<double>(kept_tenths[k]) / static_cast<double>(total);
    }
    return out;
}

CoverageProbe::CoverageProbe(Evictor& inner, int64_t window) : inner_(inner), window_(window) {
    if (window < 0) fail("coverage probe: window must be >= 0, got {}", window);
}

void CoverageProbe::begin_sequence(int32_t n_prompt) {
    report_ = CoverageReport{};
    inner_.begin_sequence(n_prompt);
}

bool CoverageProbe::on_prefill(const LayerView& view, KeepLists& keep) {
    const bool compressed = inner_.on_prefill(view, keep);
    if (view.final_chunk) record(view, compressed ? &keep : nullptr);
    return compressed;
}

void CoverageProbe::record(const LayerView& view, const KeepLists* keep) {
    if (view.layer == 0 || report_.n_prompt != view.n_prompt) {
        // A new prompt round: fix the prefix and its token units.
        report_ = CoverageReport{};
        report_.n_prompt = view.n_prompt;
        report_.window = window_;
        const int64_t n_prefix = std::max<int64_t>(0, view.n_prompt - window_);
        int32_t unknown_base = 0;
        for (int32_t t : view.tokens) unknown_base = std::max(unknown_base, t + 1);
        prefix_tokens_.assign(static_cast<size_t>(n_prefix), 0);
        for (int64_t p = 0; p < n_prefix; ++p) {
            const bool known = static_cast<size_t>(p) < view.tokens.size() &&
                               view.tokens[static_cast<size_t>(p)] >= 0;
            prefix_tokens_[static_cast<size_t>(p)] = known ? view.tokens[static_cast<size_t>(p)]
                                                           : unknown_base + static_cast<int32_t>(p);
        }
        report_.universe_positions = n_prefix;
        report_.universe_tokens = count_distinct(prefix_tokens_);
        by_position_ = CoverageTracker(report_.universe_positions);
        by_token_ = CoverageTracker(report_.universe_tokens);
    }
    n_layer_ = view.n_layer;
    n_head_kv_ = view.n_head_kv;
    const int32_t n_prefix = static_cast<int32_t>(prefix_tokens_.size());
    std::vector<std::vector<int32_t>> pos_units(view.heads.size());  // [H][kept prefix entries]
    std::vector<std::vector<int32_t>> tok_units(view.heads.size());  // [H][kept prefix entries]
    for (size_t h = 0; h < view.heads.size(); ++h) {
        const KvHeadView& head = view.heads[h];
        auto add = [&](int32_t i) {
            const int32_t p = head.positions[i];
            if (p < 0 || p >= n_prefix) return;
            pos_units[h].push_back(p);
            tok_units[h].push_back(prefix_tokens_[static_cast<size_t>(p)]);
        };
        if (keep != nullptr) {
            for (int32_t i : (*keep)[h]) add(i);
        } else {
            for (int32_t i = 0; i < head.n_entries; ++i) add(i);
        }
    }
    add_layer(pos_units, tok_units);
}

void CoverageProbe::add_layer(const std::vector<std::vector<int32_t>>& pos_units,
                              const std::vector<std::vector<int32_t>>& tok_units) {
    const auto n_prefix = static_cast<int64_t>(prefix_tokens_.size());
    for (const auto& head : pos_units) {
        for (int32_t p : head) ++report_.kept_tenths[static_cast<size_t>(int64_t{p} * 10 / n_prefix)];
    }
    report_.positions.push_back(by_position_.add_layer(spans_of(pos_units)));
    report_.tokens.push_back(by_token_.add_layer(spans_of(tok_units)));
    report_.c_layer_positions = by_position_.c_layer();
    report_.c_layer_tokens = by_token_.c_layer();
}

bool CoverageProbe::select_prompt(std::vector<int32_t>& positions) {
    if (!inner_.select_prompt(positions)) return false;
    // Every layer's heads keep the selected prefix positions: the report starts again from them.
    report_.positions.clear();
    report_.tokens.clear();
    std::fill(report_.kept_tenths.begin(), report_.kept_tenths.end(), 0);
    by_position_ = CoverageTracker(report_.universe_positions);
    by_token_ = CoverageTracker(report_.universe_tokens);
    std::vector<int32_t> pos, tok;  // [kept prefix positions]
    for (int32_t p : positions) {
        if (p < 0 || p >= static_cast<int32_t>(prefix_tokens_.size())) continue;
        pos.push_back(p);
        tok.push_back(prefix_tokens_[static_cast<size_t>(p)]);
    }
    const std::vector<std::vector<int32_t>> pos_units(static_cast<size_t>(n_head_kv_), pos);
    const std::vector<std::vector<int32_t>> tok_units(static_cast<size_t>(n_head_kv_), tok);
    for (int l = 0; l < n_layer_; ++l) add_layer(pos_units, tok_units);
    return true;
}

}  // namespace kvec::policy
