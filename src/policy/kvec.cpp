// K-VEC: coverage-aware eviction (docs/policies.md). SnapKV window scores, Ada-KV's per-head
// budgets, plus a cross-head coverage term (lambda = gamma x the rank-b score), and across layers
// either one budget pool for every head of every layer (layers = global: the engine shows the
// policy every layer before it compresses any, ObservationRequest::all_layers) or, per layer, a
// novelty term (mu) over the units kept by earlier layers of the same compression round.
// kvec_select() / kvec_select_global() in coverage.h hold the mathematics; with layers = local and
// gamma = mu = 0 this is Ada-SnapKV bit for bit (with the same normalize setting).
#include <algorithm>

#include "policy/coverage.h"
#include "policy/policy.h"
#include "policy/registry.h"
#include "util/error.h"

namespace kvec::policy {

namespace {

class KvecPolicy : public WindowScoredPolicy {
public:
    KvecPolicy(const FrameOptions& frame, const SnapOptions& snap, const KvecOptions& kvec,
               CoverageUnit unit, UnitWeight weight, int key_bits, bool global)
        : WindowScoredPolicy("kvec", frame, snap),
          kvec_(kvec),
          unit_(unit),
          weight_(weight),
          key_bits_(key_bits),
          global_(global) {}

    void begin_sequence(int32_t) override {
        earlier_.clear();
        last_layer_ = -1;
        round_n_past_ = -1;
        observed_.clear();
        selection_.clear();
    }

    // layers = global: every layer's scores, units and weights, then one selection for them all.
    void observe(const LayerView& view) override {
        if (!acts_on(view)) return;
        bool fresh = false;
        KvecLayer& layer = observed_.add(view, fresh);
        if (fresh) selection_.clear();
        layer.scores = layer_scores(view);
        layer.units = layer_units(view, frame().window);
        layer.weights = weight_ == UnitWeight::idf ? idf_weights(spans_of(layer.units)) : std::vector<std::vector<double>>{};
    }

protected:
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
                selection_ = kvec_select_global(observed_.items(), options);
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
    RoundLayers<KvecLayer> observed_;        // [observed] this round's layers (layers = global)
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
    return {"kvec", "K-VEC: SnapKV scores, one Ada-KV budget pool over every head of every layer (cross-layer module), optional cross-head coverage",
            options, [](const OptionValues& v) {
                KvecOptions k;
                k.gamma = v.get_float("gamma");
                k.mu = v.get_float("mu");
                k.alpha = v.get_float("alpha");
                k.normalize = v.get_bool("normalize");
                return std::make_unique<KvecPolicy>(read_frame_options(v), read_snap_options(v), k,
                                                    parse_coverage_unit(v.get_choice("unit")),
                                                    parse_unit_weight(v.get_choice("weight")),
                                                    static_cast<int>(v.get_int("bits")),
                                                    v.get_choice("layers") == "global");
            }};
}

}  // namespace kvec::policy
