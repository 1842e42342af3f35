// K-VEC: coverage-aware eviction (docs/policies.md). SnapKV window scores, Ada-KV's per-head
// budgets, plus a cross-head coverage term (lambda = gamma x the rank-b score), and across layers
// either one budget pool for every head of every layer (layers = global: the engine shows the
// policy every layer before it compresses any, ObservationRequest::all_layers) or, per layer, a
// novelty term (mu) over the units kept by earlier layers of the same compression round.
// kvec_select() / kvec_select_global() in coverage.h hold the mathematics; with layers = local and
// gamma = mu = 0 this is Ada-SnapKV bit for bit (with the same normalize setting). design = focus
// (focus.h) transforms the round's scores before the one pool: low-focus heads re-weighted and
// scored over a wider window, then a cross-layer priority and a second pool.
#include <algorithm>
#include <limits>

#include "policy/coverage.h"
#include "policy/focus.h"
#include "policy/policy.h"
#include "policy/registry.h"
#include "util/error.h"

namespace kvec::policy {

namespace {

// design = focus (focus.h): its options; on = false is the pool design.
struct FocusDesign {
    bool on = false;
    FocusOptions stage;
    int64_t window = 0;  // O' (0 or the window: O' = O)
    bool pooled_stat = false;
    double cross = 0.0;  // nu
};

class KvecPolicy : public WindowScoredPolicy {
public:
    KvecPolicy(const FrameOptions& frame, const SnapOptions& snap, const KvecOptions& kvec,
               CoverageUnit unit, UnitWeight weight, int key_bits, bool global, const FocusDesign& focus)
        : WindowScoredPolicy("kvec", frame, snap),
          kvec_(kvec),
          unit_(unit),
          weight_(weight),
          key_bits_(key_bits),
          global_(global),
          focus_(focus) {
        if (focus_.on && !global_) fail("policy kvec: design=focus needs layers=global (its ranking spans every layer)");
        if (focus_.on && kvec_.normalize) fail("policy kvec: design=focus does not combine with normalize=true");
        if (focus_.on && focus_.window > 0 && focus_.window < frame.window) {
            fail("policy kvec: focus-window {} is smaller than the window {}", focus_.window, frame.window);
        }
    }

    void begin_sequence(int32_t) override {
        earlier_.clear();
        last_layer_ = -1;
        round_n_past_ = -1;
        observed_.clear();
        focus_heads_.clear();
        selection_.clear();
    }

    // layers = global: every layer's scores, units and weights, then one selection for them all.
    void observe(const LayerView& view) override {
        if (!acts_on(view)) return;
        bool fresh = false;
        KvecLayer& layer = observed_.add(view, fresh);
        if (fresh) {
            selection_.clear();
            focus_heads_.clear();
        }
        layer.scores = layer_scores(view);
        layer.units = layer_units(view, frame().window);
        layer.weights = weight_ == UnitWeight::idf ? idf_weights(spans_of(layer.units)) : std::vector<std::vector<double>>{};
        if (focus_.on) focus_heads_.push_back(focus_inputs(view, layer.scores));
    }

protected:
    void add_observations(ObservationRequest& request) const override {
        WindowScoredPolicy::add_observations(request);
        if (focus_.on && focus_.window > frame().window) request.queries = static_cast<int>(focus_.window);
    }

    bool decides_all_layers() const override { return global_; }

    // layers = global: every layer with an entry is compressed, to its share of the one pool (a
    // layer may keep more than B per head, another fewer; a prompt of at most B tokens keeps all).
    int64_t layer_budget(const LayerView& view, int64_t budget) const override { return global_ ? 0 : budget; }

    void select(const LayerView& view, int64_t budget, KeepLists& keep) override {
        const int64_t w = frame().window;
        if (global_) {
            const size_t at = observed_.index(view, name());
            if (selection_.empty()) {
                KvecOptions options = kvec_;
                options.b = budget - w;
                if (!focus_.on) {
                    selection_ = kvec_select_global(observed_.items(), options);
                } else {
                    std::vector<KvecLayer> layers = observed_.items();
                    apply_focus(layers, focus_heads_, focus_.stage);
                    selection_ = kvec_select_global(layers, options);
                    if (focus_.cross != 0.0) {
                        add_cross_layer_priority(layers, selection_, options.b, focus_.cross);
                        selection_ = kvec_select_global(layers, options);
                    }
                }
            }
            keep_with_window(view, selection_.at(at).keep, w, keep);
            return;
        }
        // A new compression round (prompt, chunk or decode step) starts again at layer 0.
        if (view.layer <= last_layer_ || view.n_past != round_n_past_) earlier_.clear();
        last_layer_ = view.layer;
        round_n_past_ = view.n_past;

        const auto scores = layer_scores(view);                                // [H][m_h]
        const std::vector<std::vector<int32_t>> units = layer_units(view, w);  // [H][m_h]
        KvecOptions options = kvec_;
        options.b = budget - w;
        const std::vector<std::vector<double>> weights =
            weight_ == UnitWeight::idf ? idf_weights(spans_of(units)) : std::vector<std::vector<double>>{};
        const KvecSelection sel = kvec_select(scores, spans_of(units), earlier_, options, spans_of(weights));
        for (size_t h = 0; h < units.size(); ++h) {
            for (int32_t i : sel.keep[h]) earlier_.insert(units[h][static_cast<size_t>(i)]);
        }
        keep_with_window(view, sel.keep, w, keep);
    }

private:
    // The focus of every head of the view (from its O-window row, raw or pooled) and, with O' > O,
    // its scores over the O' window, pooled like the others.
    std::vector<FocusHeadInput> focus_inputs(const LayerView& view, const std::vector<std::vector<float>>& pooled) const {
        const int64_t w = frame().window;
        std::vector<FocusHeadInput> out(view.heads.size());  // [H]
        for (size_t h = 0; h < view.heads.size(); ++h) {
            const KvHeadView& head = view.heads[h];
            const int64_t m = prefix_count(head.n_entries, w);
            if (m == 0) continue;
            if (focus_.pooled_stat) {
                out[h].focus = head_focus(pooled[h]);
            } else {
                const auto rows = group_rows(head.window_scores, view.group, head.n_entries, m);
                out[h].focus = head_focus(gqa_reduce(rows, 1, snap().gqa)[0]);
            }
        }
        if (focus_.window <= w) return out;
        const SnapOptions& o = snap();
        for (size_t h = 0; h < view.heads.size(); ++h) {
            const KvHeadView& head = view.heads[h];
            const int64_t m = prefix_count(head.n_entries, w);
            if (m == 0) continue;
            const std::vector<float> wide = query_window_rows(view, h, focus_.window);  // [group, n_h]
            const auto rows = group_rows(wide.data(), view.group, head.n_entries, m);
            out[h].wide = std::move(window_scores(rows, 1, o.gqa, o.kernel, o.pooling, o.follow)[0]);
        }
        return out;
    }

    // Coverage unit of every prefix candidate: its position, its token id (positions whose
    // token is unknown get ids above the vocabulary seen, one each), or the hash of its key (units
    // of each (layer, head) apart: keys of different heads and layers are not comparable).
    std::vector<std::vector<int32_t>> layer_units(const LayerView& view, int64_t w) const {
        if (unit_ == CoverageUnit::key) {
            std::vector<std::vector<int32_t>> units(view.heads.size());  // [H][m_h]
            for (size_t h = 0; h < view.heads.size(); ++h) {
                const KvHeadView& head = view.heads[h];
                const int64_t m = prefix_count(head.n_entries, w);
                const auto base = static_cast<int32_t>((static_cast<int64_t>(view.layer) * view.n_head_kv +
                                                        static_cast<int64_t>(h)) << key_bits_);
                units[h] = key_hash_units(std::span<const float>(head.keys, static_cast<size_t>(m * view.head_dim)),
                                          view.head_dim, key_bits_, kKeyHashSeed, base);
            }
            return units;
        }
        int32_t unknown_base = 0;
        if (unit_ == CoverageUnit::token) {
            for (int32_t t : view.tokens) unknown_base = std::max(unknown_base, t + 1);
        }
        std::vector<std::vector<int32_t>> units(view.heads.size());  // [H][m_h]
        for (size_t h = 0; h < view.heads.size(); ++h) {
            const KvHeadView& head = view.heads[h];
            const int64_t m = prefix_count(head.n_entries, w);
            units[h].resize(static_cast<size_t>(m));
            for (int64_t i = 0; i < m; ++i) {
                const int32_t pos = head.positions[i];
                int32_t u = pos;
                if (unit_ == CoverageUnit::token) {
                    const bool known = pos >= 0 && static_cast<size_t>(pos) < view.tokens.size() &&
                                       view.tokens[static_cast<size_t>(pos)] >= 0;
                    u = known ? view.tokens[static_cast<size_t>(pos)] : unknown_base + pos;
                }
                units[h][static_cast<size_t>(i)] = u;
            }
        }
        return units;
    }

    static constexpr uint64_t kKeyHashSeed = 0x6b766563;  // "kvec"

    KvecOptions kvec_;
    CoverageUnit unit_;
    UnitWeight weight_;
    int key_bits_;
    bool global_;
    FocusDesign focus_;
    RoundLayers<KvecLayer> observed_;        // [observed] this round's layers (layers = global)
    std::vector<std::vector<FocusHeadInput>> focus_heads_;  // [observed][H] design = focus
    std::vector<KvecSelection> selection_;   // [observed] their selection, once computed
    UnitSet earlier_;  // U: units kept by earlier layers of this round
    int last_layer_ = -1;
    int32_t round_n_past_ = -1;
};

}  // namespace

PolicyEntry kvec_entry() {
    std::vector<OptionSpec> options = frame_option_specs(32);
    for (auto& o : snap_option_specs()) options.push_back(std::move(o));
    options.push_back(float_option("gamma", 0.0, 0.0, 1e6,
                                   "cross-head coverage weight, in units of the rank-b score (0: off; no "
                                   "setting changed accuracy on the development split, docs/results-toy.md)"));
    options.push_back(float_option("mu", 0.0, 0.0, 1e6,
                                   "layers=local only: units no earlier layer kept count 1 + mu (0: off)"));
    options.push_back(float_option("alpha", 0.2, 0.0, 1.0,
                                   "safeguard: every head keeps its top floor(alpha * b)"));
    options.push_back(choice_option("unit", "position", {"position", "token", "key"},
                                    "coverage unit: prompt positions, token identities, or key directions "
                                    "(a hash of the key)"));
    options.push_back(choice_option("weight", "uniform", {"uniform", "idf"},
                                    "weight of a unit in the coverage term: 1, or its rarity among the "
                                    "layer's candidates (log M / count, mean 1)"));
    options.push_back(int_option("bits", 8, 1, 16, "unit=key: hash bits (2^bits key directions per head)"));
    options.push_back(choice_option("layers", "global", {"local", "global"},
                                    "local: each layer keeps B per head (Ada-KV inside the layer); global: one "
                                    "pool of L x H x (B - w) entries over every head of every layer"));
    options.push_back(bool_option("normalize", false,
                                  "divide each head's scores by their sum (every head then weighs the same, "
                                  "which removes the signal the budget allocation reads)"));
    options.push_back(choice_option("design", "pool", {"pool", "focus"},
                                    "pool: the one pool above; focus: plus the reviewers' description (low-focus "
                                    "heads by attention STD get a wider window and weight 1 + focus-gamma; "
                                    "cross-layer priority cross)"));
    options.push_back(float_option("focus-share", 0.25, 0.0, 1.0, "design=focus: share of all heads that are low-focus"));
    options.push_back(float_option("focus-gamma", 1.0, 0.0, 1e6, "design=focus: low-focus heads' scores x (1 + focus-gamma)"));
    options.push_back(int_option("focus-window", 0, 0, 1 << 16,
                                 "design=focus: O', the queries low-focus heads are scored with (0: the window)"));
    options.push_back(choice_option("focus-rank", "low-std", {"low-std", "high-std", "entropy", "random"},
                                    "design=focus: which heads are low-focus (low-std: the design; the others are "
                                    "controls)"));
    options.push_back(choice_option("focus-stat", "raw", {"raw", "pooled"},
                                    "design=focus: the STD and entropy of the window row before or after pooling"));
    options.push_back(float_option("cross", 0.0, 0.0, 1e6,
                                   "design=focus: cross-layer priority, in units of the rank-b score, for units "
                                   "the other layers do not keep (0: off)"));
    options.push_back(int_option("seed", 0, 0, std::numeric_limits<int64_t>::max(), "design=focus, focus-rank=random: the draw"));
    return {"kvec", "K-VEC: SnapKV scores, one Ada-KV budget pool over every head of every layer (cross-layer module), optional cross-head coverage",
            options, [](const OptionValues& v) {
                FocusDesign f;
                f.on = v.get_choice("design") == "focus";
                f.stage.share = v.get_float("focus-share");
                f.stage.gamma = v.get_float("focus-gamma");
                f.stage.rank = parse_focus_rank(v.get_choice("focus-rank"));
                f.stage.seed = static_cast<uint64_t>(v.get_int("seed"));
                f.window = v.get_int("focus-window");
                f.pooled_stat = v.get_choice("focus-stat") == "pooled";
                f.cross = v.get_float("cross");
                KvecOptions k;
                k.gamma = v.get_float("gamma");
                k.mu = v.get_float("mu");
                k.alpha = v.get_float("alpha");
                k.normalize = v.get_bool("normalize");
                return std::make_unique<KvecPolicy>(read_frame_options(v), read_snap_options(v), k,
                                                    parse_coverage_unit(v.get_choice("unit")),
                                                    parse_unit_weight(v.get_choice("weight")),
                                                    static_cast<int>(v.get_int("bits")),
                                                    v.get_choice("layers") == "global", f);
            }};
}

}  // namespace kvec::policy
