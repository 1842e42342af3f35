// KVzip (arXiv 2505.23416, NeurIPS 2025; NVIDIA kvpress KVzipPress): after the prompt, the engine
// runs the model over "repeat the previous context" + the prompt again, chunk by chunk, appended
// to the prompt's cache (ObservationRequest::reconstruct_chunk, docs/eviction-interface.md); an
// entry's score is the largest attention any reconstruction query of its chunk gives it, max over
// the group's query heads. Sinks rank first. Per-head budgets by default (ada=true, alpha=0: the
// layer's top H_kv x (B - w) entries, kvpress's layer-wise head allocation); ada=false keeps the
// top B - w of every head. One-shot only: the reconstruction scores a whole prompt.
#include <limits>

#include "policy/policy.h"
#include "policy/registry.h"
#include "util/error.h"

namespace kvec::policy {

namespace {

class KvzipPolicy : public ScoredPolicy {
public:
    KvzipPolicy(const FrameOptions& frame, int64_t sinks, int64_t chunk, const AllocOptions& alloc)
        : ScoredPolicy("kvzip", frame, sinks + frame.window, sinks_text(sinks, frame.window), alloc),
          sinks_(sinks),
          chunk_(chunk) {
        if (frame.chunked) {
            fail("policy kvzip: chunked=true is not supported (the reconstruction scores the whole "
                 "prompt once it is prefilled)");
        }
        if (frame.decode_interval > 0) {
            fail("policy kvzip: decode-time eviction (decode={}) is not supported (the reconstruction "
                 "scores the prompt, not generated tokens)", frame.decode_interval);
        }
    }

    std::vector<std::vector<float>> scores(const LayerView& view) const override {
        const int64_t w = frame().window;
        std::vector<std::vector<float>> scores(view.heads.size());  // [H][m_h]
        for (size_t h = 0; h < view.heads.size(); ++h) {
            const KvHeadView& head = view.heads[h];
            const int64_t m = prefix_count(head.n_entries, w);
            if (m == 0) continue;
            require(head.reconstruction != nullptr, name(), "reconstruction scores", view);
            scores[h].resize(static_cast<size_t>(head.n_entries));
            reduce_over_group(head.reconstruction, view.group, head.n_entries, GroupReduction::Max,
                              scores[h].data());
            scores[h].resize(static_cast<size_t>(m));
            for (int64_t i = 0; i < std::min(sinks_, m); ++i) {
                scores[h][static_cast<size_t>(i)] = std::numeric_limits<float>::infinity();
            }
        }
        return scores;
    }

    // layers = global: only the prompt's layers (with reconstruction scores) share the pool.
    void observe(const LayerView& view) override {
        if (scored(view)) ScoredPolicy::observe(view);
    }

protected:
    void add_observations(ObservationRequest& r) const override {
        r.reconstruct_chunk = static_cast<int>(chunk_);
        r.reconstruct_sinks = static_cast<int>(sinks_);
    }

    // Only the prompt is scored: a later prefill (text appended to a compressed context) arrives
    // without reconstruction scores and is left as it is.
    int64_t layer_budget(const LayerView& view, int64_t budget) const override {
        return scored(view) ? ScoredPolicy::layer_budget(view, budget) : std::numeric_limits<int64_t>::max();
    }

private:
    static bool scored(const LayerView& view) { return !view.heads.empty() && view.heads[0].reconstruction != nullptr; }

    int64_t sinks_;
    int64_t chunk_;
};

}  // namespace

PolicyEntry kvzip_entry() {
    std::vector<OptionSpec> options = frame_option_specs(0);
    for (OptionSpec& o : options) {
        if (o.name == "chunked" || o.name == "decode") o.help = "not supported: KVzip compresses a whole prompt once";
    }
    options.push_back(int_option("sinks", 4, 0, 1024, "first entries of every head always kept (attention sinks)"));
    options.push_back(int_option("chunk", 2048, 1, 1 << 24,
                                 "prompt tokens reconstructed per pass (bounds the pass's extra "
                                 "memory to repeat prompt + chunk entries per head)"));
    for (auto& o : alloc_option_specs(true, 0.0, true)) options.push_back(std::move(o));
    return {"kvzip", "KVzip: max attention received while the model repeats the context (2nd pass)",
            options, [](const OptionValues& v) {
                return std::make_unique<KvzipPolicy>(read_frame_options(v), v.get_int("sinks"),
                                                     v.get_int("chunk"), read_alloc_options(v));
            }};
}

}  // namespace kvec::policy
