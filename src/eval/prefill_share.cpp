#include "eval/prefill_share.h"

#include <algorithm>
#include <limits>

#include "util/error.h"

namespace kvec::eval {

namespace {
size_t sz(int64_t n) { return static_cast<size_t>(n); }
}  // namespace

bool is_one_shot(const Evictor& policy, std::string_view name) {
    if (name == "full") return true;
    const auto plan = policy.budget_plan(0);
    return plan && !plan->chunked && plan->decode_interval <= 0 && policy.request().decode_interval <= 0;
}

int share_group_key(const ObservationRequest& request) {
    if (request.reconstruct_chunk <= 0) return request.window;
    // Distinct for every (chunk, sinks) and below every window key.
    const int64_t key = -1 - (int64_t{request.reconstruct_chunk} * 1025 + std::min(request.reconstruct_sinks, 1024));
    if (key < std::numeric_limits<int>::min()) fail("reconstruction chunk {} is too large", request.reconstruct_chunk);
    return static_cast<int>(key);
}

ObservationRequest merge_requests(const std::vector<ObservationRequest>& requests) {
    ObservationRequest r;
    r.window_scope = WindowScope::Prompt;
    for (const ObservationRequest& q : requests) {
        if (q.window > 0) {
            if (r.window > 0 && r.window != q.window) {
                fail("cannot share one prefill between observation windows {} and {}", r.window,
                     q.window);
            }
            r.window = q.window;
        }
        r.column_sums = r.column_sums || q.column_sums;
        r.last_row = r.last_row || q.last_row;
        r.values = r.values || q.values;
        r.queries = std::max(r.queries, q.queries);
        if (q.reconstruct_chunk > 0) {
            if (r.reconstruct_chunk > 0 && (r.reconstruct_chunk != q.reconstruct_chunk ||
                                            r.reconstruct_sinks != q.reconstruct_sinks)) {
                fail("cannot share one prefill between context reconstructions of chunks {} / {} sinks and "
                     "{} / {}", r.reconstruct_chunk, r.reconstruct_sinks, q.reconstruct_chunk, q.reconstruct_sinks);
            }
            r.reconstruct_chunk = q.reconstruct_chunk;
            r.reconstruct_sinks = q.reconstruct_sinks;
        }
    }
    if (r.reconstruct_chunk > 0 && (r.window > 0 || r.column_sums || r.last_row)) {
        fail("cannot share one prefill between a context reconstruction and window scores, column sums or "
             "the last row");
    }
    return r;
}

PrefillRecorder::PrefillRecorder(const ObservationRequest& request) : request_(request) {
    request_.decode_interval = 0;
    request_.window_scope = WindowScope::Prompt;
}

void PrefillRecorder::begin_sequence(int32_t n_prompt) {
    snapshot_ = PrefillSnapshot{};
    snapshot_.request = request_;
    snapshot_.n_prompt = n_prompt;
}

bool PrefillRecorder::on_prefill(const LayerView& view, KeepLists& keep) {
    if (!view.final_chunk) return false;
    PrefillSnapshot& s = snapshot_;
    if (s.layers.size() < sz(view.n_layer)) s.layers.resize(sz(view.n_layer));
    s.n_layer = view.n_layer;
    s.n_head_kv = view.n_head_kv;
    s.group = view.group;
    s.head_dim = view.head_dim;
    s.attn_scale = view.attn_scale;
    s.attn_softcap = view.attn_softcap;
    s.n_prompt = view.n_prompt;
    LayerSnapshot& l = s.layers[sz(view.layer)];
    l.n_window = view.n_window;
    l.chunk_begin = view.chunk_begin;
    l.chunk_end = view.chunk_end;
    l.n_past = view.n_past;
    const auto H = sz(view.n_head_kv);
    auto copy_rows = [&](const float* rows, int32_t n, std::vector<float>& out) {
        if (rows == nullptr) return;
        out.assign(rows, rows + int64_t{view.group} * n);
    };
    l.window.assign(H, {});
    l.column_sums.assign(H, {});
    l.last_row.assign(H, {});
    l.reconstruction.assign(H, {});
    l.queries.assign(view.queries.begin(), view.queries.end());
    l.query_positions.assign(view.query_positions.begin(), view.query_positions.end());
    for (size_t h = 0; h < H; ++h) {
        const KvHeadView& hv = view.heads[h];
        copy_rows(hv.window_scores, hv.n_entries, l.window[h]);
        copy_rows(hv.column_sums, hv.n_entries, l.column_sums[h]);
        copy_rows(hv.last_row, hv.n_entries, l.last_row[h]);
        copy_rows(hv.reconstruction, hv.n_entries, l.reconstruction[h]);
    }
    if (view.layer == view.n_layer - 1) s.tokens.assign(view.tokens.begin(), view.tokens.end());
    return false;
}

PrefillSnapshot PrefillRecorder::take(const Session& session, std::span<const float> logits) {
    PrefillSnapshot s = std::move(snapshot_);
    snapshot_ = PrefillSnapshot{};
    const KvCache& kv = session.kv_cache();
    if (s.layers.size() != sz(kv.n_layer())) {
        fail("prefill recorder: observed {} layers, the cache has {}", s.layers.size(), kv.n_layer());
    }
    s.kv_type_k = kv.config().key_type;
    s.kv_type_v = kv.config().value_type;
    const int D = kv.head_dim();
    for (int l = 0; l < kv.n_layer(); ++l) {
        LayerSnapshot& ls = s.layers[sz(l)];
        ls.positions.assign(sz(kv.n_head_kv()), {});
        ls.keys.assign(sz(kv.n_head_kv()), {});
        ls.values.assign(sz(kv.n_head_kv()), {});
        for (int h = 0; h < kv.n_head_kv(); ++h) {
            const int32_t n = kv.size(l, h);
            const int32_t* pos = kv.positions(l, h);
            ls.positions[sz(h)].assign(pos, pos + n);
            ls.keys[sz(h)].resize(sz(int64_t{n} * D));
            ls.values[sz(h)].resize(sz(int64_t{n} * D));
            kv.read_keys(l, h, 0, n, ls.keys[sz(h)].data());
            kv.read_values(l, h, 0, n, ls.values[sz(h)].data());
        }
    }
    s.logits.assign(logits.begin(), logits.end());
    return s;
}

PrefillSnapshot record_prefill(Session& session, std::span<const int32_t> prompt,
                               const ObservationRequest& request) {
    PrefillRecorder recorder(request);
    session.reset();
    session.set_evictor(&recorder);
    PrefillSnapshot snapshot;
    try {
        const std::span<const float> logits = session.prefill(prompt);
        snapshot = recorder.take(session, logits);
    } catch (...) {
        session.reset();
        session.set_evictor(nullptr);
        throw;
    }
    session.reset();
    session.set_evictor(nullptr);
    return snapshot;
}

ReplayResult replay_policy(const PrefillSnapshot& s, Evictor& policy, const ops::RopeParams& rope) {
    KvCacheConfig config;
    config.n_layer = s.n_layer;
    config.n_head_kv = s.n_head_kv;
    config.head_dim = s.head_dim;
    config.key_type = s.kv_type_k;
    config.value_type = s.kv_type_v;
    config.n_aux = 0;
    ReplayResult r{KvCache(config), s.n_prompt, false, 0};
    const ObservationRequest want = policy.request();
    if (want.window > 0 && want.window != s.request.window) {
        fail("replay: the policy needs window scores of {} queries, the prefill recorded {}",
             want.window, s.request.window);
    }
    if ((want.column_sums && !s.request.column_sums) || (want.last_row && !s.request.last_row) ||
        want.queries > s.request.queries ||
        (want.reconstruct_chunk > 0 && (want.reconstruct_chunk != s.request.reconstruct_chunk ||
                                        want.reconstruct_sinks != s.request.reconstruct_sinks))) {
        fail("replay: the policy needs observations the prefill did not record");
    }
    const int D = s.head_dim;
    const auto H = sz(s.n_head_kv);
    int repositioned = 0;
    int32_t next = 0;
    policy.begin_sequence(s.n_prompt);
    // The view of layer l as the session's hook would show it; observations = false: as the hook
    // of an all-layer policy gets it after observe (no window scores, no last row).
    std::vector<KvHeadView> heads(H);  // [H]
    auto make_view = [&](int l, bool observations) {
        const LayerSnapshot& ls = s.layers[sz(l)];
        for (size_t h = 0; h < H; ++h) {
            KvHeadView& v = heads[h];
            v = KvHeadView{};
            v.n_entries = static_cast<int32_t>(ls.positions[h].size());
            v.positions = ls.positions[h].data();
            v.keys = ls.keys[h].data();
            if (observations && want.window > 0 && !ls.window[h].empty()) v.window_scores = ls.window[h].data();
            if (want.column_sums && !ls.column_sums[h].empty()) v.column_sums = ls.column_sums[h].data();
            if (observations && want.last_row && !ls.last_row[h].empty()) v.last_row = ls.last_row[h].data();
            if (want.values) v.values = ls.values[h].data();
            if (want.reconstruct_chunk > 0 && !ls.reconstruction[h].empty()) {
                v.reconstruction = ls.reconstruction[h].data();
            }
        }
        LayerView view;
        view.phase = EvictionPhase::Prefill;
        view.layer = l;
        view.n_layer = s.n_layer;
        view.n_head_kv = s.n_head_kv;
        view.group = s.group;
        view.head_dim = D;
        view.n_window = observations && want.window > 0 ? ls.n_window : 0;
        view.chunk_begin = ls.chunk_begin;
        view.chunk_end = ls.chunk_end;
        view.final_chunk = true;
        view.n_prompt = s.n_prompt;
        view.n_past = ls.n_past;
        view.decode_step = 0;
        view.tokens = s.tokens;
        view.heads = heads;
        view.rope = rope_info(rope);
        view.attn_scale = s.attn_scale;
        view.attn_softcap = s.attn_softcap;
        if (want.queries > 0) {
            // The policy's own ring would hold the last min(its count, seen) of the recorded ones.
            const size_t n_q = std::min(ls.query_positions.size(), static_cast<size_t>(want.queries));
            const size_t skip = ls.query_positions.size() - n_q;
            const size_t stride = n_q > 0 ? ls.queries.size() / ls.query_positions.size() : 0;
            view.queries = std::span<const float>(ls.queries).subspan(skip * stride);
            view.query_positions = std::span<const int32_t>(ls.query_positions).subspan(skip);
        }
        return view;
    };
    if (want.all_layers) {
        for (int l = 0; l < s.n_layer; ++l) policy.observe(make_view(l, true));
    }
    for (int l = 0; l < s.n_layer; ++l) {
        const LayerSnapshot& ls = s.layers[sz(l)];
        for (size_t h = 0; h < H; ++h) {
            const auto n = static_cast<int32_t>(ls.positions[h].size());
            r.cache.append(l, static_cast<int>(h), n, ls.keys[h].data(), D, ls.values[h].data(), D,
                           ls.positions[h].data());
        }
        const LayerView view = make_view(l, !want.all_layers);
        KeepLists keep(H);
        if (!policy.on_prefill(view, keep)) continue;
        check_keep_lists(view, keep);
        Repositioning moves;
        const bool move = policy.reposition(view, keep, moves);
        std::vector<std::vector<float>> rotated(H);  // [H][kept_h, D]
        if (move) {
            check_repositioning(view, keep, moves);
            if (repositioned != l || (repositioned > 0 && moves.next_position != next)) {
                fail("eviction policy re-positioned some layers of the prompt but not all, or to "
                     "different next positions");
            }
            ++repositioned;
            next = moves.next_position;
            std::vector<int32_t> from;  // [kept_h] old positions
            for (size_t h = 0; h < H; ++h) {
                const auto& k = keep[h];
                rotated[h].resize(k.size() * sz(D));
                from.resize(k.size());
                for (size_t i = 0; i < k.size(); ++i) {
                    std::copy(ls.keys[h].begin() + int64_t{k[i]} * D,
                              ls.keys[h].begin() + int64_t{k[i] + 1} * D,
                              rotated[h].begin() + static_cast<int64_t>(i) * D);
                    from[i] = ls.positions[h][sz(k[i])];
                }
                rerotate_keys(rotated[h].data(), static_cast<int32_t>(k.size()), D, from.data(),
                              moves.positions[h].data(), rope);
            }
        }
        r.compressed = true;
        for (size_t h = 0; h < H; ++h) {
            r.cache.compact(l, static_cast<int>(h), keep[h]);
            if (move) {
                r.cache.reposition(l, static_cast<int>(h), 0, r.cache.size(l, static_cast<int>(h)),
                                   rotated[h].data(), moves.positions[h].data());
            }
        }
    }
    if (repositioned > 0 && repositioned != s.n_layer) {
        fail("eviction policy re-positioned {} of {} layers (all or none)", repositioned, s.n_layer);
    }
    if (repositioned > 0) r.next_position = next;
    r.entries = r.cache.total_entries();
    return r;
}

void adopt_cache(Session& session, KvCache&& cache, int32_t next_position, int32_t last_token) {
    if (session.evictor() != nullptr) fail("adopt_cache: the session has an eviction policy attached");
    const KvCacheConfig& a = session.kv_cache().config();
    const KvCacheConfig& b = cache.config();
    if (a.n_layer != b.n_layer || a.n_head_kv != b.n_head_kv || a.head_dim != b.head_dim ||
        a.key_type != b.key_type || a.value_type != b.value_type || b.n_aux != 0) {
        fail("adopt_cache: the cache's shape or element type differs from the session's");
    }
    if (next_position < 1 || next_position > session.n_ctx()) {
        fail("adopt_cache: next position {} outside [1, {}]", next_position, session.n_ctx());
    }
    session.reset();
    const int32_t pos = next_position - 1;
    session.prefill_at(std::span<const int32_t>(&last_token, 1), std::span<const int32_t>(&pos, 1));
    session.kv_cache() = std::move(cache);
}

int64_t kv_entry_bytes(const KvCacheConfig& config) {
    return static_cast<int64_t>(kv_row_bytes(config.key_type, config.head_dim) +
                                kv_row_bytes(config.value_type, config.head_dim)) + 4;
}

}  // namespace kvec::eval
