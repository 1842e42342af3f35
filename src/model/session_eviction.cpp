// Session's eviction orchestration (model/session.h): the queries remembered for the policies'
// views, the decode-time window scores, building a layer's view and calling the hook, compaction
// and re-positioning, and KVzip's context reconstruction. The forward step is session.cpp's.
#include <omp.h>

#include <algorithm>
#include <numeric>

#include "model/session.h"
#include "util/error.h"
#include "util/timer.h"

namespace kvec {

namespace {
size_t sz(int64_t n) { return static_cast<size_t>(n); }
}  // namespace

void Session::remember_prerope_queries(int layer, int32_t T, const int32_t* positions, Step step) {
    if (step == Step::Reconstruct) return;
    if (batch_.empty()) {
        if (request_.queries > 0) prerope_q_[sz(layer)].append(q_.data(), T, positions);
        return;
    }
    const int64_t Q = model_.config().q_dim();
    for (size_t b = 0; b < batch_.size(); ++b) {
        Session& s = *batch_[b];
        if (s.request_.queries == 0) continue;
        if (b > 0) std::copy_n(q_.begin() + sz(b) * Q, Q, s.q_.begin());  // its row [Q]
        s.prerope_q_[sz(layer)].append(s.q_.data(), 1, positions + b);
    }
}

// Decode-time window scores: the softmax rows of the layer's last `window` queries (prompt and
// generated) against the current entries, causal by position, averaged per query head.
void Session::window_from_recent_queries(int layer) {
    const ModelConfig& c = model_.config();
    const int G = c.n_group(), D = c.head_dim;
    const int64_t Q = c.q_dim();
    const float scale = c.attn_scale;
    const QueryRing& ring = recent_q_[sz(layer)];
    const int32_t count = ring.count();
    int32_t n_max = 0;
    for (int h = 0; h < c.n_head_kv; ++h) {
        window_[sz(h)].assign(sz(int64_t{G} * kv_.size(layer, h)), 0.0f);
        n_max = std::max(n_max, kv_.size(layer, h));
    }
    const GroupSplit split = group_split();
#pragma omp parallel
    {
        std::vector<float> s(sz(int64_t{split.width} * n_max));  // [width, n_max] one query's rows
#pragma omp for schedule(dynamic, 1)
        for (int item = 0; item < split.items; ++item) {
            const auto [h, g0, ng] = split.item(item);
            const int32_t n_h = kv_.size(layer, h);
            const int32_t* pos = kv_.positions(layer, h);
            const KvHeadData kv = head_data(layer, h);
            const float inv = 1.0f / static_cast<float>(count);
            for (int32_t r = 0; r < count; ++r) {
                const auto vis = static_cast<int32_t>(std::upper_bound(pos, pos + n_h, ring.position(r)) - pos);
                if (vis == 0) continue;
                const float* qr = ring.row(r) + int64_t{h * G + g0} * D;  // [ng, D]
                attention_probs(qr, ng, D, kv, vis, scale, s.data(), n_max, c.attn_logit_softcap,
                                sink_logits(layer, h, g0));
                for (int g = 0; g < ng; ++g) {
                    float* win = window_[sz(h)].data() + int64_t{g0 + g} * n_h;  // [n_h]
                    const float* row = s.data() + int64_t{g} * n_max;           // [vis]
                    for (int32_t j = 0; j < vis; ++j) win[j] += row[j] * inv;
                }
            }
        }
    }
}

void Session::run_evictor(int layer, int32_t T, const int32_t* positions, Step step, bool final_chunk,
                          int32_t n_window, bool want_window, bool want_last, bool ring_window, bool deferred) {
    const ModelConfig& c = model_.config();
    const int G = c.n_group(), Hkv = c.n_head_kv;
    const bool want_colsum = request_.column_sums;
    const bool recent_window = !deferred && ((step == Step::Decode && request_.window > 0) || ring_window);
    if (recent_window) {
        Timer observe;
        window_from_recent_queries(layer);
        eviction_stats_.observe_seconds += observe.seconds();
    }
    std::vector<KvHeadView> heads(sz(Hkv));
    for (int h = 0; h < Hkv; ++h) {
        KvHeadView& v = heads[sz(h)];
        v.n_entries = kv_.size(layer, h);
        v.positions = kv_.positions(layer, h);
        v.keys = float_keys(layer, h);
        if (want_window || recent_window) v.window_scores = window_[sz(h)].data();
        if (request_.values) v.values = float_values(layer, h);
        if (recon_ready_) v.reconstruction = recon_[sz(layer)][sz(h)].data();
        if (want_last) v.last_row = last_row_[sz(h)].data();
        if (want_colsum) {
            auto& cs = colsum_[sz(h)];
            cs.resize(sz(int64_t{G} * v.n_entries));
            for (int g = 0; g < G; ++g) {
                const float* a = kv_.aux(layer, h, g);
                std::copy(a, a + v.n_entries, cs.begin() + int64_t{g} * v.n_entries);
            }
            v.column_sums = cs.data();
        }
    }
    LayerView view;
    view.phase = step == Step::Decode ? EvictionPhase::Decode : EvictionPhase::Prefill;
    view.layer = layer;
    view.n_layer = c.n_layer;
    view.n_head_kv = Hkv;
    view.group = G;
    view.head_dim = c.head_dim;
    view.n_window = recent_window ? recent_q_[sz(layer)].count() : n_window;
    view.chunk_begin = positions[0];
    view.chunk_end = positions[T - 1] + 1;
    view.final_chunk = final_chunk;
    view.n_prompt = n_prompt_;
    view.n_past = n_past_;
    view.decode_step = n_decoded_;
    view.tokens = tokens_;
    view.heads = heads;
    view.rope = rope_info_;
    view.attn_scale = c.attn_scale;
    view.attn_softcap = c.attn_logit_softcap;
    if (request_.queries > 0) {
        // The ring's queries, oldest first.
        const int64_t Q = c.q_dim();
        const QueryRing& ring = prerope_q_[sz(layer)];
        const int32_t count = ring.count();
        queries_view_.resize(sz(count * Q));
        query_positions_view_.resize(sz(count));
        for (int32_t i = 0; i < count; ++i) {
            const int32_t slot = ring.oldest(i);
            std::copy_n(ring.row(slot), Q, queries_view_.begin() + i * Q);
            query_positions_view_[sz(i)] = ring.position(slot);
        }
        view.queries = queries_view_;
        view.query_positions = query_positions_view_;
    }
    Timer policy_timer;
    if (request_.all_layers && !deferred) {  // the hook runs after the step's last layer
        evictor_->observe(view);
        eviction_stats_.policy_seconds += policy_timer.seconds();
        observed_layers_.push_back(layer);
        return;
    }
    KeepLists keep(sz(Hkv));
    ++eviction_stats_.calls;
    const bool compress = step == Step::Decode ? evictor_->on_decode(view, keep) : evictor_->on_prefill(view, keep);
    if (!compress) {
        eviction_stats_.policy_seconds += policy_timer.seconds();
        return;
    }
    check_keep_lists(view, keep);
    Repositioning moves;
    const bool move = evictor_->reposition(view, keep, moves);
    if (move) check_repositioning(view, keep, moves);
    eviction_stats_.policy_seconds += policy_timer.seconds();

    Timer compact_timer;
    ++eviction_stats_.compressions;
    std::vector<std::vector<float>> rotated;  // [Hkv][kept_h, D] re-rotated kept keys
    if (move) rotated = apply_repositioning(layer, view, keep, moves);  // reads the view: before compacting
    for (int h = 0; h < Hkv; ++h) {
        eviction_stats_.evicted += heads[sz(h)].n_entries - static_cast<int64_t>(keep[sz(h)].size());
        kv_.compact(layer, h, keep[sz(h)]);
        if (move) kv_.reposition(layer, h, 0, kv_.size(layer, h), rotated[sz(h)].data(), moves.positions[sz(h)].data());
    }
    eviction_stats_.compact_seconds += compact_timer.seconds();
}

// All-layer policies (ObservationRequest::all_layers): the hook of every layer observed in this
// step, in layer order, now that the step's last layer ran.
void Session::run_observed_hooks(int32_t T, const int32_t* positions, Step step, bool final_chunk) {
    if (observed_layers_.empty()) return;
    const std::vector<int> layers = std::move(observed_layers_);
    observed_layers_.clear();
    for (int l : layers) run_evictor(l, T, positions, step, final_chunk, 0, false, false, false, true);
}

// The keys of (layer, h) as float for a policy's view: the cache itself (F32) or a converted copy
// (F16, BF16, quantised: dequantised; only when the policy runs, never on the attention path).
const float* Session::float_keys(int layer, int h) {
    if (const float* k = kv_.keys_f32(layer, h)) return k;
    auto& buf = keys_f_[sz(h)];
    buf.resize(sz(int64_t{kv_.size(layer, h)} * kv_.head_dim()));
    kv_.read_keys(layer, h, 0, kv_.size(layer, h), buf.data());
    return buf.data();
}

// The values of (layer, h) as float, like float_keys.
const float* Session::float_values(int layer, int h) {
    if (const float* v = kv_.values_f32(layer, h)) return v;
    auto& buf = values_f_[sz(h)];
    buf.resize(sz(int64_t{kv_.size(layer, h)} * kv_.head_dim()));
    kv_.read_values(layer, h, 0, kv_.size(layer, h), buf.data());
    return buf.data();
}

// KVzip's context reconstruction after a prompt of `context` tokens (every head holds exactly
// those entries: nothing was evicted yet), then the deferred hook of every layer. Chunk after
// chunk of the prompt, the model runs over repeat prompt + suffix + the chunk's tokens, at the
// positions after the prompt, appended to the prompt's cache (the chunk's queries attend to the
// whole prompt); per query head, each prompt entry of the chunk keeps the largest renormalised
// probability any of those queries gives it. The reconstruction's entries are dropped after each
// chunk, so the cache holds at most prompt + repeat prompt + chunk entries per head.
void Session::reconstruct_and_evict(std::span<const int32_t> context, std::span<const int32_t> last_positions) {
    Timer timer;
    const ModelConfig& c = model_.config();
    const int L = c.n_layer, Hkv = c.n_head_kv, G = c.n_group();
    const auto n = static_cast<int32_t>(context.size());
    for (int l = 0; l < L; ++l) {
        for (int h = 0; h < Hkv; ++h) KVEC_CHECK(kv_.size(l, h) == n);
    }
    if (!repeat_) repeat_ = repeat_prompts(model_.file());
    const RepeatPrompts& rp = *repeat_;
    recon_.assign(sz(L), std::vector<std::vector<float>>(sz(Hkv), std::vector<float>(sz(int64_t{G} * n), 0.0f)));
    recon_logits_.resize(sz(c.n_vocab));
    const std::vector<int32_t> keep_context = [&] {
        std::vector<int32_t> k(sz(n));  // [n] 0 .. n - 1
        for (int32_t i = 0; i < n; ++i) k[sz(i)] = i;
        return k;
    }();
    const int32_t chunk = request_.reconstruct_chunk;
    std::vector<int32_t> input, pos;  // [repeat input], [T]
    for (int32_t begin = 0; begin < n; begin += chunk) {
        const int32_t end = std::min(n, begin + chunk);
        input = begin == 0 ? rp.first : rp.later;
        if (begin > 0) input.insert(input.end(), context.begin() + std::max(0, begin - rp.overlap), context.begin() + begin);
        input.insert(input.end(), rp.suffix.begin(), rp.suffix.end());
        input.insert(input.end(), context.begin() + begin, context.begin() + end);
        recon_chunk_ = {n, begin, end, std::min(request_.reconstruct_sinks, begin)};
        const auto n_in = static_cast<int32_t>(input.size());
        for (int32_t i = 0; i < n_in; i += options_.n_batch) {
            const int32_t T = std::min(options_.n_batch, n_in - i);
            pos.resize(sz(T));
            for (int32_t t = 0; t < T; ++t) pos[sz(t)] = n_past_ + i + t;
            forward(input.data() + i, pos.data(), T, false, recon_logits_.data(), Step::Reconstruct, false);
        }
        for (int l = 0; l < L; ++l) {
            for (int h = 0; h < Hkv; ++h) kv_.compact(l, h, keep_context);
        }
    }
    eviction_stats_.reconstruct_seconds += timer.seconds();
    recon_ready_ = true;
    repositioned_layers_ = 0;
    reposition_map_.clear();
    const auto T = static_cast<int32_t>(last_positions.size());
    for (int l = 0; l < L; ++l) run_evictor(l, T, last_positions.data(), Step::PrefillChunk, true, 0, false, false, false);
    run_observed_hooks(T, last_positions.data(), Step::PrefillChunk, true);
    recon_ready_ = false;
    recon_.clear();
    finish_repositioning();
}

// Re-rotates the kept keys of a layer to their new positions (returned [Hkv][kept_h, D]; the
// caller writes them into the cache after compacting) and records the step's re-positioning.
std::vector<std::vector<float>> Session::apply_repositioning(int layer, const LayerView& view, const KeepLists& keep,
                                                             const Repositioning& r) {
    const int D = model_.config().head_dim;
    if (model_.config().has_swa()) {
        fail("eviction policy re-positions the kept keys, which '{}' does not support: its sliding-window layers "
             "keep their positions", model_.path());
    }
    if (repositioned_layers_ > 0 && r.next_position != reposition_next_) {
        fail("eviction policy re-positioned layer {} to continue at {}, but an earlier layer of the same step at {}",
             layer, r.next_position, reposition_next_);
    }
    if (repositioned_layers_ != layer) {
        fail("eviction policy re-positioned layer {} but not every layer before it in the same step", layer);
    }
    const bool record_map = repositioned_layers_ == 0;
    ++repositioned_layers_;
    reposition_next_ = r.next_position;
    std::vector<std::vector<float>> rotated(sz(view.n_head_kv));  // [Hkv][kept_h, D]
    std::vector<int32_t> from;                                     // [kept_h] old positions
    for (int h = 0; h < view.n_head_kv; ++h) {
        const KvHeadView& hv = view.heads[sz(h)];
        const auto& k = keep[sz(h)];
        const auto& to = r.positions[sz(h)];
        auto& out = rotated[sz(h)];
        out.resize(k.size() * sz(D));
        from.resize(k.size());
        for (size_t i = 0; i < k.size(); ++i) {
            std::copy(hv.keys + int64_t{k[i]} * D, hv.keys + int64_t{k[i] + 1} * D, out.begin() + static_cast<int64_t>(i) * D);
            from[i] = hv.positions[k[i]];
            if (record_map) reposition_map_.emplace_back(from[i], to[i]);
        }
        rerotate_keys(out.data(), static_cast<int32_t>(k.size()), D, from.data(), to.data(), rope_);
    }
    // The recent queries carry the old phases: the window restarts from the next queries.
    recent_q_[sz(layer)].clear();
    return rotated;
}

// After a forward step: if the policy re-positioned the layers, the next token continues at the
// position it named, and the token ids follow their entries.
void Session::finish_repositioning() {
    if (repositioned_layers_ == 0) return;
    if (repositioned_layers_ != model_.config().n_layer) {
        fail("eviction policy re-positioned {} of {} layers in one step (all or none)", repositioned_layers_,
             model_.config().n_layer);
    }
    std::vector<int32_t> moved(sz(reposition_next_), -1);  // [next position] token ids
    for (const auto& [from, to] : reposition_map_) {
        if (from >= 0 && sz(from) < tokens_.size()) moved[sz(to)] = tokens_[sz(from)];
    }
    tokens_.swap(moved);
    n_past_ = reposition_next_;
    ++eviction_stats_.repositioned;
}

}  // namespace kvec
