// The common frame of every budgeted eviction policy, on top of the engine's eviction hook
// (kvcache/eviction.h): budget B (or a ratio of the prompt), observation window w, one-shot or
// chunked prefill compression, optional decode-time eviction. A policy derives from FramePolicy
// and implements select(); the pure mathematics lives in select.h / scores.h / coverage.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvcache/eviction.h"
#include "policy/options.h"
#include "policy/scores.h"
#include "policy/select.h"
#include "util/error.h"

namespace kvec::policy {

// Options every budgeted policy shares (docs/policies.md, "Common options").
struct FrameOptions {
    int64_t budget = 128;         // B: entries kept per KV head per layer, window included
    double ratio = 0.0;           // > 0: B = max(min B, floor(ratio * prompt tokens)) instead
    int64_t window = 32;          // w: most recent entries always kept (0: none)
    bool chunked = false;         // compress after every prefill chunk (else after the prompt)
    int64_t decode_interval = 0;  // > 0: keep the budget while decoding, every k steps
};

// Option descriptions: budget, ratio, chunked, decode, and window (only if default_window >= 0).
std::vector<OptionSpec> frame_option_specs(int64_t default_window, int64_t default_decode = 0);
// Reads them back; fixed_window >= 0 is used when the policy has no window option.
FrameOptions read_frame_options(const OptionValues& values, int64_t fixed_window = -1);

// SnapKV scoring options: kernel, follow, pooling, gqa.
struct SnapOptions {
    int64_t kernel = 15;
    int64_t follow = 0;  // the pooling window also reaches this many positions after a score
    Pooling pooling = Pooling::max;
    GqaReduce gqa = GqaReduce::mean;
};
std::vector<OptionSpec> snap_option_specs();
SnapOptions read_snap_options(const OptionValues& values);
// Only the GQA reduction (H2O, TOVA).
OptionSpec gqa_option_spec();

// "the window <w>", for FramePolicy's kept_what.
std::string window_text(int64_t window);

// What an all-layer policy (layers = global) gathers in one compression round: one T per layer it
// observed, in layer order. On a model with sliding-window layers only the global layers are
// observed (the engine leaves the others alone), so the one pool spans those. A round ends when
// a step's layers were shown: the next observation of a layer at or before the last one, or of
// another step (n_past), starts a new round.
template <class T>
class RoundLayers {
public:
    // The slot for view's layer; `fresh` says a new round began (the caller drops its selection).
    T& add(const LayerView& view, bool& fresh) {
        fresh = layers_.empty() || view.layer <= layers_.back() || view.n_past != n_past_;
        if (fresh) {
            layers_.clear();
            items_.clear();
            n_past_ = view.n_past;
        }
        layers_.push_back(view.layer);
        return items_.emplace_back();
    }
    // The index of view's layer among the round's (kvec::Error when it was not observed).
    size_t index(const LayerView& view, const std::string& policy) const;
    const std::vector<T>& items() const { return items_; }
    void clear() {
        layers_.clear();
        items_.clear();
        n_past_ = -1;
    }

private:
    std::vector<int> layers_;  // [observed] model layer index of each item
    std::vector<T> items_;     // [observed]
    int32_t n_past_ = -1;
};

template <class T>
size_t RoundLayers<T>::index(const LayerView& view, const std::string& policy) const {
    for (size_t i = 0; i < layers_.size(); ++i) {
        if (layers_[i] == view.layer && view.n_past == n_past_) return i;
    }
    fail("policy {}: the engine did not show layer {} before the round's first compression", policy, view.layer);
}

// How a scored policy spreads a layer's budget over its KV heads: B - w per head, or Ada-KV's
// allocation (ada_select in select.h on the raw scores: the layer's top H_kv x (B - w) pairs,
// every head at least floor(alpha x (B - w))).
struct AllocOptions {
    bool ada = false;
    double alpha = 0.2;
    bool global = false;  // layers = global: one Ada-KV pool over every head of every layer
};
std::vector<OptionSpec> alloc_option_specs(bool default_ada, double default_alpha, bool default_global = false);
AllocOptions read_alloc_options(const OptionValues& values);

// Sink entries (the first `sinks` of a head, always ranked first) option, and "the <s> sinks and
// the window <w>" for FramePolicy's kept_what.
OptionSpec sinks_option_spec(int64_t default_sinks);
std::string sinks_text(int64_t sinks, int64_t window);

class FramePolicy : public Evictor {
public:
    // Throws kvec::Error if budget < min_budget, the entries the policy always keeps, described
    // by kept_what (e.g. "the window 32").
    FramePolicy(std::string name, const FrameOptions& frame, int64_t min_budget,
                const std::string& kept_what);

    ObservationRequest request() const override;
    std::optional<BudgetPlan> budget_plan(int64_t n_prompt) const override {
        return BudgetPlan{budget_for_prompt(n_prompt), frame_.chunked, frame_.decode_interval};
    }
    bool on_prefill(const LayerView& view, KeepLists& keep) override;
    bool on_decode(const LayerView& view, KeepLists& keep) override;

    const std::string& name() const { return name_; }
    const FrameOptions& frame() const { return frame_; }
    // B for the sequence of this view (the fixed budget, or the ratio of its prompt length).
    int64_t budget_for(const LayerView& view) const;
    // B for a prompt of n_prompt tokens.
    int64_t budget_for_prompt(int64_t n_prompt) const;
    // Entries the policy always keeps (the window, the sinks): the smallest budget it accepts.
    int64_t min_budget() const { return min_budget_; }
    // Whether the hook of this view may compress: a decode step with decode-time eviction on, a
    // chunked prefill's every chunk, or a one-shot prompt's final chunk.
    bool acts_on(const LayerView& view) const;

protected:
    // Observations the policy needs (window scores, column sums, last row). Default: none.
    virtual void add_observations(ObservationRequest& request) const {}
    // True when the policy shares its budget across layers and must see every layer first
    // (ObservationRequest::all_layers; Evictor::observe before the hooks).
    virtual bool decides_all_layers() const { return false; }
    // Fills keep[h] for every head. Called only when some head holds more than
    // layer_budget(view, budget) entries.
    virtual void select(const LayerView& view, int64_t budget, KeepLists& keep) = 0;
    // The entries a head of this layer may keep under budget B (default B; PyramidKV's per-layer
    // share). A layer whose heads all hold at most that many is left alone.
    virtual int64_t layer_budget(const LayerView& view, int64_t budget) const { return budget; }

private:
    bool compress(const LayerView& view, KeepLists& keep);

    std::string name_;
    FrameOptions frame_;
    int64_t min_budget_;
};

// A policy that ranks the prefix candidates of each head by a score of its own and keeps the best
// (keep_by_scores: B - w per head, or Ada-KV's allocation). The query-agnostic baselines.
class ScoredPolicy : public FramePolicy {
public:
    ScoredPolicy(std::string name, const FrameOptions& frame, int64_t min_budget,
                 const std::string& kept_what, const AllocOptions& alloc)
        : FramePolicy(std::move(name), frame, min_budget, kept_what), alloc_(alloc) {}

    // Scores of every head's prefix candidates (the first n_h - w entries), higher = keep: [H][m_h].
    virtual std::vector<std::vector<float>> scores(const LayerView& view) const = 0;

    // layers = global: the scores of every layer of the round, then one allocation for them all.
    void observe(const LayerView& view) override;
    void begin_sequence(int32_t n_prompt) override;

protected:
    void select(const LayerView& view, int64_t budget, KeepLists& keep) override;
    bool decides_all_layers() const override { return alloc_.global; }
    // layers = global: every layer is compressed to its share of the one pool.
    int64_t layer_budget(const LayerView& view, int64_t budget) const override {
        return alloc_.global ? 0 : budget;
    }

private:
    AllocOptions alloc_;
    RoundLayers<std::vector<std::vector<float>>> observed_;  // [observed][H][m_h] (layers = global)
    std::vector<AdaSelection> selection_;                    // [observed], once computed
};

// A policy scored by the window queries (SnapKV family): requests window scores for w queries
// and rejects w = 0. snap_scores() gives the pooled prefix scores of a layer.
class WindowScoredPolicy : public FramePolicy {
public:
    WindowScoredPolicy(std::string name, const FrameOptions& frame, const SnapOptions& snap);
    const SnapOptions& snap() const { return snap_; }

protected:
    void add_observations(ObservationRequest& request) const override;
    std::vector<std::vector<float>> layer_scores(const LayerView& view) const;  // [H][m_h]

private:
    SnapOptions snap_;
};

// --- helpers over a LayerView --------------------------------------------------------------

// Throws kvec::Error naming the policy if an observation it requested is missing.
void require(bool present, const std::string& policy, const char* what, const LayerView& view);

// [group] views of the first m values of each row of a [group, n] score block.
std::vector<std::span<const float>> group_rows(const float* rows, int group, int32_t n, int64_t m);

// SnapKV scores of every head of the layer: window rows reduced over the group, restricted to
// the head's prefix candidates (first n_h - w entries), pooled. -> [H][m_h].
std::vector<std::vector<float>> snap_scores(const LayerView& view, int64_t window,
                                            const SnapOptions& options, const std::string& policy);

// Group-reduced prefix scores from column sums or last rows. -> [H][m_h].
enum class Observation { ColumnSums, LastRow };
std::vector<std::vector<float>> reduced_scores(const LayerView& view, Observation which,
                                               int64_t window, GqaReduce gqa,
                                               const std::string& policy);

// keep[h] = top (budget - w) prefix entries by score + the w most recent, or everything when the
// head holds at most `budget` entries.
void keep_top_per_head(const LayerView& view, const std::vector<std::vector<float>>& scores,
                       int64_t budget, int64_t window, KeepLists& keep);

// keep[h] = the head's window + its share of the prefix by score: keep_top_per_head, or with
// alloc.ada Ada-KV's per-head budgets over the layer. scores [H][m_h] over the prefix candidates.
void keep_by_scores(const LayerView& view, const std::vector<std::vector<float>>& scores,
                    int64_t budget, int64_t window, const AllocOptions& alloc, KeepLists& keep);

// PyramidKV's share b_l + w of layer view.layer (pyramid_budgets over the sequence so far), for
// PyramidKV and Ada-PyramidKV; kvec::Error naming the policy if the layer is out of range.
int64_t pyramid_layer_budget(const LayerView& view, int64_t budget, int64_t window, double beta,
                             const std::string& policy);

// keep[h] = prefix picks (ascending, window excluded) + the head's window.
void keep_with_window(const LayerView& view, const HeadSelection& prefix_keep, int64_t window,
                      KeepLists& keep);

}  // namespace kvec::policy
