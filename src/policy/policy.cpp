#include "policy/policy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "util/error.h"

namespace kvec::policy {

namespace {
constexpr int64_t kMaxTokens = std::numeric_limits<int32_t>::max();
}

std::string window_text(int64_t window) { return fmt::format("the window {}", window); }

std::vector<OptionSpec> frame_option_specs(int64_t default_window, int64_t default_decode) {
    std::vector<OptionSpec> specs = {
        int_option("budget", 128, 1, kMaxTokens,
                   "B: KV entries kept per KV head per layer, window included"),
        float_option("ratio", 0.0, 0.0, 1.0,
                     "> 0: B = floor(ratio x prompt tokens) (at least the window) instead of "
                     "budget"),
        bool_option("chunked", false,
                    "compress after every prefill chunk (peak memory B + chunk) instead of once "
                    "after the prompt"),
        int_option("decode", default_decode, 0, kMaxTokens,
                   "> 0: keep the budget while decoding, re-selecting every k steps"),
    };
    if (default_window >= 0) {
        specs.insert(specs.begin() + 1,
                     int_option("window", default_window, 0, kMaxTokens,
                                "w: most recent entries always kept (the observation window)"));
    }
    return specs;
}

FrameOptions read_frame_options(const OptionValues& values, int64_t fixed_window) {
    FrameOptions f;
    f.budget = values.get_int("budget");
    f.ratio = values.get_float("ratio");
    f.window = fixed_window >= 0 ? fixed_window : values.get_int("window");
    f.chunked = values.get_bool("chunked");
    f.decode_interval = values.get_int("decode");
    return f;
}

std::vector<OptionSpec> alloc_option_specs(bool default_ada, double default_alpha, bool default_global) {
    return {
        bool_option("ada", default_ada,
                    "Ada-KV per-head budgets: the layer's top H_kv x (B - w) entries decide each "
                    "head's share"),
        float_option("alpha", default_alpha, 0.0, 1.0,
                     "with ada: every head keeps at least floor(alpha * (B - w))"),
        choice_option("layers", default_global ? "global" : "local", {"local", "global"},
                      "local: B per head in every layer; global: one Ada-KV pool of L x H_kv x (B - w) "
                      "entries over every head of every layer (implies ada)"),
    };
}

AllocOptions read_alloc_options(const OptionValues& values) {
    AllocOptions a{values.get_bool("ada"), values.get_float("alpha"), values.get_choice("layers") == "global"};
    a.ada = a.ada || a.global;
    return a;
}

OptionSpec sinks_option_spec(int64_t default_sinks) {
    return int_option("sinks", default_sinks, 0, 1 << 20,
                      "first entries of every head always kept (attention sinks)");
}

std::string sinks_text(int64_t sinks, int64_t window) {
    return fmt::format("the {} sinks and the window {}", sinks, window);
}

std::vector<OptionSpec> snap_option_specs() {
    return {
        int_option("kernel", 15, 1, 1001,
                   "pooling kernel along tokens (odd; 1 = no pooling; the published SnapKV scripts use 7)"),
        int_option("follow", 0, 0, 1000,
                   "the pooling also carries each score to this many following positions (the "
                   "tokens after what a query attends to)"),
        choice_option("pooling", "max", {"max", "avg"},
                      "pooling of the window scores (avg counts padding, like avg_pool1d)"),
        gqa_option_spec(),
    };
}

OptionSpec gqa_option_spec() {
    return choice_option("gqa", "mean", {"mean", "max"},
                         "reduction of the query heads of a group to their KV head");
}

SnapOptions read_snap_options(const OptionValues& values) {
    SnapOptions s;
    s.kernel = values.get_int("kernel");
    if (s.kernel % 2 == 0) {
        fail("policy {}: option kernel expects an odd number, got {}", values.policy(), s.kernel);
    }
    s.follow = values.get_int("follow");
    s.pooling = parse_pooling(values.get_choice("pooling"));
    s.gqa = parse_gqa_reduce(values.get_choice("gqa"));
    return s;
}

FramePolicy::FramePolicy(std::string name, const FrameOptions& frame, int64_t min_budget,
                         const std::string& kept_what)
    : name_(std::move(name)), frame_(frame), min_budget_(min_budget) {
    if (frame_.budget < min_budget_) {
        fail("policy {}: budget {} is smaller than {}, which is always kept", name_, frame_.budget,
             kept_what);
    }
    if (!(frame_.ratio >= 0.0 && frame_.ratio <= 1.0)) {
        fail("policy {}: ratio must be in [0, 1], got {}", name_, frame_.ratio);
    }
}

ObservationRequest FramePolicy::request() const {
    ObservationRequest r;
    r.decode_interval = static_cast<int>(frame_.decode_interval);
    // One-shot: the window is the prompt's last w queries whatever the chunking; chunked: each
    // chunk's own last w queries.
    r.window_scope = frame_.chunked ? WindowScope::Chunk : WindowScope::Prompt;
    add_observations(r);
    r.all_layers = decides_all_layers();
    return r;
}

int64_t FramePolicy::budget_for(const LayerView& view) const {
    return budget_for_prompt(view.n_prompt);
}

int64_t FramePolicy::budget_for_prompt(int64_t n_prompt) const {
    if (frame_.ratio <= 0.0) return frame_.budget;
    const auto scaled = static_cast<int64_t>(std::floor(frame_.ratio * static_cast<double>(n_prompt)));
    return std::max({scaled, min_budget_, int64_t{1}});
}

bool FramePolicy::compress(const LayerView& view, KeepLists& keep) {
    if (view.n_head_kv <= 0 || view.heads.empty()) return false;
    const int64_t budget = budget_for(view);
    int32_t n_max = 0;
    for (const KvHeadView& h : view.heads) n_max = std::max(n_max, h.n_entries);
    if (n_max <= layer_budget(view, budget)) return false;  // N <= B: nothing is evicted
    keep.assign(static_cast<size_t>(view.n_head_kv), {});
    select(view, budget, keep);
    return true;
}

bool FramePolicy::acts_on(const LayerView& view) const {
    if (view.phase == EvictionPhase::Decode) return frame_.decode_interval > 0;
    return frame_.chunked || view.final_chunk;  // one-shot: after the whole prompt
}

bool FramePolicy::on_prefill(const LayerView& view, KeepLists& keep) {
    return acts_on(view) && compress(view, keep);
}

bool FramePolicy::on_decode(const LayerView& view, KeepLists& keep) {
    return frame_.decode_interval > 0 && compress(view, keep);
}

WindowScoredPolicy::WindowScoredPolicy(std::string name, const FrameOptions& frame,
                                       const SnapOptions& snap)
    : FramePolicy(std::move(name), frame, frame.window, window_text(frame.window)), snap_(snap) {
    if (frame.window < 1) {
        fail("policy {}: window must be >= 1 (the window queries score the prefix), got {}",
             this->name(), frame.window);
    }
}

void WindowScoredPolicy::add_observations(ObservationRequest& request) const {
    request.window = static_cast<int>(std::min<int64_t>(frame().window, kMaxTokens));
}

std::vector<std::vector<float>> WindowScoredPolicy::layer_scores(const LayerView& view) const {
    return snap_scores(view, frame().window, snap_, name());
}

void ScoredPolicy::begin_sequence(int32_t) {
    observed_.clear();
    selection_.clear();
}

void ScoredPolicy::observe(const LayerView& view) {
    if (!alloc_.global || !acts_on(view)) return;
    bool fresh = false;
    auto& layer = observed_.add(view, fresh);
    if (fresh) selection_.clear();
    layer = scores(view);
}

void ScoredPolicy::select(const LayerView& view, int64_t budget, KeepLists& keep) {
    if (!alloc_.global) {
        keep_by_scores(view, scores(view), budget, frame().window, alloc_, keep);
        return;
    }
    const int64_t w = frame().window;
    const size_t at = observed_.index(view, name());
    if (selection_.empty()) selection_ = ada_select_layers(observed_.items(), budget - w, alloc_.alpha, false);
    keep_with_window(view, selection_.at(at).keep, w, keep);
}

void require(bool present, const std::string& policy, const char* what, const LayerView& view) {
    if (!present) {
        fail("policy {}: the engine did not provide {} for layer {}", policy, what, view.layer);
    }
}

std::vector<std::span<const float>> group_rows(const float* rows, int group, int32_t n, int64_t m) {
    KVEC_CHECK(m >= 0 && m <= n && group >= 1);
    std::vector<std::span<const float>> out;  // [group]
    out.reserve(static_cast<size_t>(group));
    for (int g = 0; g < group; ++g) {
        out.emplace_back(rows + static_cast<int64_t>(g) * n, static_cast<size_t>(m));
    }
    return out;
}

std::vector<std::vector<float>> snap_scores(const LayerView& view, int64_t window,
                                            const SnapOptions& options, const std::string& policy) {
    std::vector<std::vector<float>> out(view.heads.size());  // [H][m_h]
    for (size_t h = 0; h < view.heads.size(); ++h) {
        const KvHeadView& head = view.heads[h];
        const int64_t m = prefix_count(head.n_entries, window);
        if (m == 0) continue;
        require(head.window_scores != nullptr, policy, "window scores", view);
        const auto rows = group_rows(head.window_scores, view.group, head.n_entries, m);
        out[h] = std::move(window_scores(rows, 1, options.gqa, options.kernel, options.pooling, options.follow)[0]);
    }
    return out;
}

std::vector<std::vector<float>> reduced_scores(const LayerView& view, Observation which,
                                               int64_t window, GqaReduce gqa,
                                               const std::string& policy) {
    std::vector<std::vector<float>> out(view.heads.size());  // [H][m_h]
    for (size_t h = 0; h < view.heads.size(); ++h) {
        const KvHeadView& head = view.heads[h];
        const int64_t m = prefix_count(head.n_entries, window);
        if (m == 0) continue;
        const float* rows = which == Observation::ColumnSums ? head.column_sums : head.last_row;
        require(rows != nullptr, policy,
                which == Observation::ColumnSums ? "column sums" : "the last attention row", view);
        out[h] = std::move(gqa_reduce(group_rows(rows, view.group, head.n_entries, m), 1, gqa)[0]);
    }
    return out;
}

void keep_with_window(const LayerView& view, const HeadSelection& prefix_keep, int64_t window,
                      KeepLists& keep) {
    KVEC_CHECK(prefix_keep.size() == view.heads.size());
    keep.resize(view.heads.size());
    for (size_t h = 0; h < view.heads.size(); ++h) {
        const int64_t n = view.heads[h].n_entries;
        keep[h] = with_window(prefix_keep[h], n, prefix_count(n, window));
    }
}

void keep_by_scores(const LayerView& view, const std::vector<std::vector<float>>& scores,
                    int64_t budget, int64_t window, const AllocOptions& alloc, KeepLists& keep) {
    if (!alloc.ada) {
        keep_top_per_head(view, scores, budget, window, keep);
        return;
    }
    KVEC_CHECK(budget >= window);
    keep_with_window(view, ada_select(scores, budget - window, alloc.alpha, false).keep, window, keep);
}

void keep_top_per_head(const LayerView& view, const std::vector<std::vector<float>>& scores,
                       int64_t budget, int64_t window, KeepLists& keep) {
    KVEC_CHECK(scores.size() == view.heads.size() && budget >= window);
    HeadSelection prefix(view.heads.size());  // [H][kept]
    for (size_t h = 0; h < view.heads.size(); ++h) {
        const int64_t n = view.heads[h].n_entries;
        const int64_t m = prefix_count(n, window);
        if (n <= budget) {
            prefix[h] = iota_indices(m);
        } else {
            KVEC_CHECK(static_cast<int64_t>(scores[h].size()) == m);
            prefix[h] = top_k(std::span<const float>(scores[h]), budget - window);
        }
    }
    keep_with_window(view, prefix, window, keep);
}

}  // namespace kvec::policy
