#include "model/session.h"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <exception>
#include <numeric>

#include "tensor/attention.h"
#include "tensor/matmul.h"
#include "tensor/ops.h"
#include "util/error.h"
#include "util/timer.h"

namespace kvec {

namespace {

KvCacheConfig cache_config(const ModelConfig& c, const SessionOptions& o, int n_aux) {
    KvCacheConfig k;
    k.n_layer = c.n_layer;
    k.n_head_kv = c.n_head_kv;
    k.head_dim = c.head_dim;
    k.key_type = o.kv_type_k;
    k.value_type = o.kv_type_v;
    k.n_aux = n_aux;
    return k;
}

size_t sz(int64_t n) { return static_cast<size_t>(n); }

// At most this many query positions of a prefill chunk per attention call (kvec::attention_causal).
constexpr int64_t kPositionsPerCall = 16;

// Query positions per kernel call for T positions over heads of at most n_max entries, `width`
// query heads per work item: each block of keys is converted once for all of them; the
// probability rows of a call stay within about 4 MiB per thread.
int32_t positions_per_call(int32_t T, int width, int32_t n_max) {
    const int64_t fit = (int64_t{4} << 20) / (int64_t{4} * width * std::max<int32_t>(n_max, 1));
    return static_cast<int32_t>(std::clamp<int64_t>(fit, 1, std::min<int64_t>(T, kPositionsPerCall)));
}

// The first of n entries (positions pos, ascending) that a query at `position` sees through a
// sliding window of `window` positions (pos > position - window, llama.cpp's SWA mask).
int32_t window_start(const int32_t* pos, int32_t n, int32_t position, int32_t window) {
    return static_cast<int32_t>(std::lower_bound(pos, pos + n, position - window + 1) - pos);
}

// The threads a parallel region opened here would run on: one inside another region (the
// sequences of a batched step shared out over the threads, Session::attention), where OpenMP
// runs a nested region on the thread that opens it.
int threads_here() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

// Multiply-adds of q.K in a layer's attention (T * entries * head_dim * query heads) from which it
// opens a parallel region: below, the fork and barriers cost more than the second thread saves.
constexpr int64_t kParallelAttentionMin = int64_t{1} << 16;

// This thread's probability rows for the attention kernels, at least n floats: grow-only (every
// column read is written first), so a prefill chunk does not allocate and zero them again for
// each layer; one buffer per thread for global and sliding-window layers alike.
float* attention_scratch(size_t n) {
    thread_local std::vector<float> s;
    if (s.size() < n) s.resize(n);
    return s.data();
}

// sum of x[0 .. n) in 8 float lanes (vectorised; the reconstruction's renormalisation).
double sum_f32(const float* x, int32_t n) {
    float lane[8] = {};
    int32_t j = 0;
    for (; j + 8 <= n; j += 8) {
        for (int k = 0; k < 8; ++k) lane[k] += x[j + k];
    }
    double s = 0.0;
    for (float v : lane) s += v;
    for (; j < n; ++j) s += x[j];
    return s;
}

}  // namespace

ops::RopeParams rope_params(const Model& model, int32_t n_ctx, bool swa) {
    const ModelConfig& c = model.config();
    const ModelWeights& w = model.weights();
    ops::RopeParams rope;
    rope.mode = c.rope_mode;
    rope.n_rot = c.n_rot;
    rope.freq_base = swa ? c.rope_freq_base_swa : c.rope_freq_base;
    rope.freq_scale = swa ? c.rope_freq_scale_swa : c.rope_freq_scale;
    rope.attn_factor = c.rope_attn_factor;
    if (n_ctx <= 0) n_ctx = c.n_ctx_train;
    // llama.cpp (llama_model::get_rope_factors): rope_freqs, else LongRoPE's long factors past the
    // original context, else its short ones (either may be absent: no factors).
    const std::vector<float>& factors = !w.rope_freqs.empty() ? w.rope_freqs
                                        : n_ctx > c.n_ctx_orig ? w.rope_long
                                                               : w.rope_short;
    rope.freq_factors = factors.empty() ? nullptr : factors.data();
    const std::vector<float>& yarn = swa ? w.rope_yarn_swa : w.rope_yarn;
    if (c.rope_yarn && !yarn.empty()) {  // the divisors include rope_freqs already
        rope.attn_factor *= ops::yarn_mscale({rope.freq_scale, c.n_ctx_orig});
        rope.freq_scale = 1.0f;
        rope.freq_factors = yarn.data();
    }
    return rope;
}

RopeInfo rope_info(const ops::RopeParams& rope) {
    RopeInfo r;
    r.neox = rope.mode == ops::RopeMode::Neox;
    r.n_rot = rope.n_rot;
    r.freq_base = rope.freq_base;
    r.freq_scale = rope.freq_scale;
    r.freq_factors = rope.freq_factors;
    r.attn_factor = rope.attn_factor;
    return r;
}

void rerotate_keys(float* keys, int32_t n, int head_dim, const int32_t* from, const int32_t* to,
                   const ops::RopeParams& rope_at) {
    KVEC_CHECK(n >= 0 && head_dim > 0);
    ops::RopeParams rope = rope_at;
    rope.attn_factor = 1.0f;  // a pure rotation: the keys hold their attention factor already
    int32_t i = 0;
    while (i < n) {
        const int64_t delta = int64_t{to[i]} - from[i];
        int32_t j = i + 1;
        while (j < n && int64_t{to[j]} - from[j] == delta) ++j;
        if (delta != 0) {
            if (delta < INT32_MIN || delta > INT32_MAX) fail("re-rotation by {} positions", delta);
            // The run [i, j) as the heads of one token: one evaluation of the angles of `delta`.
            const auto d = static_cast<int32_t>(delta);
            ops::rope(keys + int64_t{i} * head_dim, 1, j - i, head_dim, &d, rope);
        }
        i = j;
    }
}

Session::Session(const Model& model, const SessionOptions& options)
    : model_(model), options_(options), kv_(cache_config(model.config(), options, 0)) {
    const ModelConfig& c = model.config();
    if (options_.n_ctx < 0) fail("context size must be positive, got {}", options_.n_ctx);
    if (options_.n_ctx == 0) options_.n_ctx = c.n_ctx_train;
    if (options_.n_batch <= 0) fail("batch (chunk) size must be positive, got {}", options_.n_batch);
    options_.n_batch = std::min(options_.n_batch, options_.n_ctx);
    const int64_t B = options_.n_batch;
    x_.resize(sz(B * c.n_embd));
    xn_.resize(sz(B * c.n_embd));
    q_.resize(sz(B * c.q_dim()));
    k_.resize(sz(B * c.kv_dim()));
    v_.resize(sz(B * c.kv_dim()));
    att_.resize(sz(B * c.q_dim()));
    proj_.resize(sz(B * c.n_embd));
    const int64_t F = c.has_moe() ? c.n_ff_shexp : c.n_ff;  // MoE: the shared expert's (or none)
    gate_.resize(sz(B * F));
    up_.resize(sz(B * F));
    if (c.n_ff_shexp > 0) shexp_gate_.resize(sz(B));
    logits_.resize(sz(c.n_vocab));
    const auto H = sz(c.n_head_kv);
    keys_f_.resize(H);
    window_.resize(H);
    last_row_.resize(H);
    colsum_.resize(H);
    values_f_.resize(H);
    rope_ = rope_params(model, options_.n_ctx);
    rope_info_ = rope_info(rope_);
    rope_swa_ = rope_params(model, options_.n_ctx, true);
}

void Session::set_evictor(Evictor* evictor) {
    if (n_past_ != 0 || kv_.total_entries() != 0) {
        fail("an eviction policy can only be attached to an empty session (call reset() first)");
    }
    evictor_ = evictor;
    request_ = evictor != nullptr ? evictor->request() : ObservationRequest{};
    if (request_.window < 0 || request_.decode_interval < 0 || request_.queries < 0 ||
        request_.reconstruct_chunk < 0 || request_.reconstruct_sinks < 0) {
        fail("eviction policy requests a negative window ({}), decode interval ({}), query count ({}), "
             "reconstruction chunk ({}) or sink count ({})", request_.window, request_.decode_interval,
             request_.queries, request_.reconstruct_chunk, request_.reconstruct_sinks);
    }
    if (request_.reconstruct_chunk > 0 && (request_.window > 0 || request_.column_sums || request_.last_row ||
                                           request_.decode_interval > 0)) {
        fail("eviction policy requests context reconstruction together with window scores, column sums, the "
             "last row or decode-time calls, which the deferred hook cannot provide");
    }
    const ModelConfig& c = model_.config();
    if (c.has_swa() && request_.reconstruct_chunk > 0) {
        fail("eviction policy with context reconstruction is not supported on '{}': it reconstructs across all "
             "layers, and {} has sliding-window layers, which policies leave alone (other policies act on its "
             "global layers)", model_.path(), c.arch_name);
    }
    kv_ = KvCache(cache_config(c, options_, request_.column_sums ? c.n_group() : 0));
    const bool ring = request_.window > 0 &&
                      (request_.decode_interval > 0 || request_.window_scope == WindowScope::Prompt);
    const auto L = sz(c.n_layer);
    recent_q_.assign(L, ring ? QueryRing(request_.window, c.q_dim()) : QueryRing());
    prerope_q_.assign(L, request_.queries > 0 ? QueryRing(request_.queries, c.q_dim()) : QueryRing());
}

// The recent-query rings start afresh (after a reset, a rollback or a restore: their queries
// belonged to positions that are gone or were never run here).
void Session::clear_query_rings() {
    for (QueryRing& r : recent_q_) r.clear();
    for (QueryRing& r : prerope_q_) r.clear();
}

void Session::reset() {
    kv_.clear();
    kv_.reset_peak();
    n_past_ = 0;
    n_prompt_ = 0;
    n_decoded_ = 0;
    tokens_.clear();
    eviction_stats_ = EvictionStats{};
    eviction_paused_ = false;
    clear_query_rings();
    defer_hook_ = false;
    recon_ready_ = false;
    recon_.clear();
}

void Session::rollback(int32_t n_past) {
    if (n_past < 0 || n_past > n_past_) fail("rollback to position {} outside [0, {}]", n_past, n_past_);
    const ModelConfig& c = model_.config();
    for (int l = 0; l < c.n_layer && c.has_swa(); ++l) {
        // A sliding-window layer must still hold what position n_past would see.
        if (!c.is_swa(l) || n_past == 0 || kv_.size(l, 0) == 0) continue;
        const int32_t oldest = kv_.positions(l, 0)[0];
        if (oldest > std::max(0, n_past - c.sliding_window + 1)) {
            fail("rollback to position {}: the sliding-window layers already dropped positions before {} (window {})",
                 n_past, oldest, c.sliding_window);
        }
    }
    std::vector<int32_t> keep;  // [kept] entry indices: positions increase, so a prefix
    for (int l = 0; l < c.n_layer; ++l) {
        for (int h = 0; h < c.n_head_kv; ++h) {
            const int32_t n = kv_.size(l, h);
            const int32_t* pos = kv_.positions(l, h);
            const auto k = static_cast<int32_t>(std::lower_bound(pos, pos + n, n_past) - pos);
            if (k == n) continue;
            keep.resize(sz(k));
            std::iota(keep.begin(), keep.end(), 0);
            kv_.compact(l, h, keep);
        }
    }
    n_past_ = n_past;
    tokens_.resize(sz(n_past));
    n_decoded_ = 0;
    clear_query_rings();
}

void Session::restore_sequence(SequenceState state) {
    if (state.n_past < 0 || state.n_past > options_.n_ctx) {
        fail("the saved sequence ends at position {}, outside this session's context of {}", state.n_past,
             options_.n_ctx);
    }
    if (state.tokens.size() != sz(state.n_past) || state.n_prompt < 0 || state.n_prompt > state.n_past ||
        state.n_decoded < 0 || state.n_decoded > state.n_past) {
        fail("the saved sequence is inconsistent: {} tokens for {} positions, {} prompt tokens, {} decoded",
             state.tokens.size(), state.n_past, state.n_prompt, state.n_decoded);
    }
    for (const int32_t t : state.tokens) {
        if (t < -1 || t >= n_vocab()) fail("the saved sequence holds token {}, outside the model's vocabulary of {}", t, n_vocab());
    }
    const ModelConfig& c = model_.config();
    for (int l = 0; l < c.n_layer; ++l) {
        for (int h = 0; h < c.n_head_kv; ++h) {
            const int32_t n = kv_.size(l, h);
            if (n > 0 && kv_.positions(l, h)[n - 1] >= state.n_past) {
                fail("the saved cache holds position {} (layer {}, KV head {}) at or past the sequence's end {}",
                     kv_.positions(l, h)[n - 1], l, h, state.n_past);
            }
        }
    }
    n_past_ = state.n_past;
    n_prompt_ = state.n_prompt;
    n_decoded_ = state.n_decoded;
    tokens_ = std::move(state.tokens);
    eviction_stats_ = EvictionStats{};
    kv_.reset_peak();
    clear_query_rings();
}

void Session::check_positions(std::span<const int32_t> positions) const {
    for (size_t i = 0; i < positions.size(); ++i) {
        const int32_t p = positions[i];
        if (p >= options_.n_ctx) {
            fail("context full: position {} is past the context size {} (use a larger -c, up to the "
                 "model's {})", p, options_.n_ctx, model_.config().n_ctx_train);
        }
        if (p < n_past_ || (i > 0 && p <= positions[i - 1])) {
            fail("positions must increase and continue after {} (got {} at index {})", n_past_ - 1, p, i);
        }
    }
}

std::span<const float> Session::prefill(std::span<const int32_t> tokens, bool all_logits) {
    if (tokens.empty()) fail("cannot process an empty list of tokens");
    if (static_cast<int64_t>(n_past_) + static_cast<int64_t>(tokens.size()) > options_.n_ctx) {
        fail("the prompt needs {} positions but the context holds {} (-c {}, {} already used)",
             static_cast<int64_t>(n_past_) + static_cast<int64_t>(tokens.size()), options_.n_ctx,
             options_.n_ctx, n_past_);
    }
    std::vector<int32_t> positions(tokens.size());  // [n]
    for (size_t i = 0; i < tokens.size(); ++i) positions[i] = n_past_ + static_cast<int32_t>(i);
    return prefill_at(tokens, positions, all_logits);
}

std::span<const float> Session::prefill_at(std::span<const int32_t> tokens,
                                           std::span<const int32_t> positions, bool all_logits) {
    if (tokens.empty()) fail("cannot process an empty list of tokens");
    if (tokens.size() != positions.size()) {
        fail("{} tokens but {} positions", tokens.size(), positions.size());
    }
    check_positions(positions);
    const int32_t V = n_vocab();
    for (int32_t t : tokens) {
        if (t < 0 || t >= V) fail("token id {} is outside the model's vocabulary [0, {})", t, V);
    }
    const auto n = static_cast<int32_t>(tokens.size());
    const bool starts_sequence = n_past_ == 0 && evictor_ != nullptr && !refilling_;
    if (starts_sequence) evictor_->begin_sequence(positions.back() + 1);
    // Context reconstruction: the hook of a prompt waits for the reconstruction pass.
    defer_hook_ = evictor_ != nullptr && request_.reconstruct_chunk > 0 && n_past_ == 0;
    n_prompt_ = positions.back() + 1;
    n_decoded_ = 0;
    if (all_logits) all_logits_.resize(sz(int64_t{n} * V));
    int32_t shift = 0;  // positions given up by re-positioning evictions of earlier chunks
    std::vector<int32_t> chunk_pos;  // [T] positions of the current chunk
    for (int32_t i = 0; i < n; i += options_.n_batch) {
        const int32_t T = std::min(options_.n_batch, n - i);
        chunk_pos.assign(positions.begin() + i, positions.begin() + i + T);
        for (int32_t& p : chunk_pos) p -= shift;
        const int32_t last = chunk_pos.back();
        const int32_t past_before = n_past_;
        tokens_.resize(sz(last + 1), -1);
        for (int32_t t = 0; t < T; ++t) tokens_[sz(chunk_pos[sz(t)])] = tokens[sz(i + t)];
        n_past_ = last + 1;
        float* out = all_logits ? all_logits_.data() + int64_t{i} * V : logits_.data();
        try {
            forward(tokens.data() + i, chunk_pos.data(), T, all_logits, out, Step::PrefillChunk, i + T == n);
        } catch (...) {  // a step gate that refused the chunk: the session ends before it
            n_past_ = past_before;
            tokens_.resize(sz(past_before));
            throw;
        }
        shift += last + 1 - n_past_;  // > 0 only after a re-positioning
    }
    if (defer_hook_) {
        defer_hook_ = false;
        reconstruct_and_evict(tokens, chunk_pos);
    }
    std::vector<int32_t> selected;  // [k] prompt positions the evictor selects (GemFilter)
    if (starts_sequence && evictor_->select_prompt(selected)) {
        if (all_logits) fail("a policy that selects the prompt's tokens cannot return every position's logits");
        return refill(selected);
    }
    if (all_logits) {
        check_finite_logits(all_logits_, positions.front());
        return all_logits_;
    }
    check_finite_logits(logits_, positions.back());
    return logits_;
}

// Prompt selection: the session starts over with the selected tokens only, at positions 0, 1, ...
// (eviction paused while they run).
std::span<const float> Session::refill(std::span<const int32_t> selected) {
    std::vector<int32_t> tokens;  // [k] the selected tokens
    for (size_t i = 0; i < selected.size(); ++i) {
        const int32_t p = selected[i];
        if (p < 0 || p >= n_past_ || (i > 0 && p <= selected[i - 1]) || tokens_[sz(p)] < 0) {
            fail("the policy selected prompt position {}, not a strictly increasing position of the prompt (0..{})", p,
                 n_past_ - 1);
        }
        tokens.push_back(tokens_[sz(p)]);
    }
    if (tokens.empty()) fail("the policy selected none of the prompt's tokens");
    reset();
    pause_eviction(true);
    refilling_ = true;  // the same sequence for the evictor: no begin_sequence, no second selection
    try {
        prefill(tokens);
    } catch (...) {
        pause_eviction(false);
        refilling_ = false;
        throw;
    }
    pause_eviction(false);
    refilling_ = false;
    return logits_;
}

void Session::check_finite_logits(std::span<const float> logits, int32_t position) const {
    // A non-finite float has every exponent bit set. One pass without an early exit, which the
    // compiler vectorises (a 262k vocabulary is checked at each step); the search only after.
    constexpr uint32_t kExponentBits = 0x7f800000u;
    uint32_t all_ones = 0;
    for (const float x : logits) all_ones |= (std::bit_cast<uint32_t>(x) & kExponentBits) == kExponentBits;
    if (all_ones == 0) return;
    for (const float x : logits) {
        if (!std::isfinite(x)) {
            fail("'{}': the forward pass produced a non-finite logit ({}) at position {}: the model's weights "
                 "hold NaN/Inf values or overflow float; its output would be meaningless",
                 model_.file().path(), x, position);
        }
    }
}

void Session::check_decode(int32_t token) const {
    const int32_t pos = n_past_;
    check_positions(std::span<const int32_t>(&pos, 1));
    if (token < 0 || token >= n_vocab()) fail("token id {} is outside the model's vocabulary [0, {})", token, n_vocab());
}

std::span<const float> Session::decode(int32_t token) {
    Session* self = this;
    decode_batch(std::span<Session* const>(&self, 1), std::span<const int32_t>(&token, 1));
    return logits_;
}

void Session::decode_batch(std::span<Session* const> sessions, std::span<const int32_t> tokens) {
    if (sessions.empty() || sessions.size() != tokens.size()) {
        fail("a batched decode step needs one token per session ({} sessions, {} tokens)", sessions.size(),
             tokens.size());
    }
    Session& lead = *sessions[0];
    const auto B = static_cast<int32_t>(sessions.size());
    if (B > lead.options_.n_batch) {
        fail("a batched decode step of {} sessions exceeds the batch size {} (n_batch)", B, lead.options_.n_batch);
    }
    std::vector<int32_t> positions(sz(B));  // [B] each session's next position
    for (int32_t b = 0; b < B; ++b) {
        const Session& s = *sessions[sz(b)];
        if (&s.model_ != &lead.model_) fail("a batched decode step mixes sessions of different models");
        if (std::find(sessions.begin(), sessions.begin() + b, &s) != sessions.begin() + b) {
            fail("a batched decode step lists one session twice");
        }
        s.check_decode(tokens[sz(b)]);
        positions[sz(b)] = s.n_past_;
    }
    for (int32_t b = 0; b < B; ++b) {
        Session& s = *sessions[sz(b)];
        s.tokens_.push_back(tokens[sz(b)]);
        s.n_past_ = positions[sz(b)] + 1;
        ++s.n_decoded_;
    }
    if (B == 1) {
        lead.forward(tokens.data(), positions.data(), 1, false, lead.logits_.data(), Step::Decode, true);
    } else {
        const int64_t V = lead.n_vocab();
        lead.all_logits_.resize(sz(B * V));
        lead.batch_ = sessions;
        struct EndBatch {
            Session& s;
            ~EndBatch() { s.batch_ = {}; }
        } end_batch{lead};
        lead.forward(tokens.data(), positions.data(), B, true, lead.all_logits_.data(), Step::Decode, true);
        for (int32_t b = 0; b < B; ++b) {
            const float* row = lead.all_logits_.data() + b * V;  // [V]
            std::copy(row, row + V, sessions[sz(b)]->logits_.begin());
        }
    }
    for (int32_t b = 0; b < B; ++b) sessions[sz(b)]->check_finite_logits(sessions[sz(b)]->logits_, positions[sz(b)]);
}

void Session::forward(const int32_t* tokens, const int32_t* positions, int32_t T, bool all_logits,
                      float* out, Step step, bool final_chunk) {
    if (step_gate_ && step != Step::Decode) {
        step_gate_([&] { forward_step(tokens, positions, T, all_logits, out, step, final_chunk); });
    } else {
        forward_step(tokens, positions, T, all_logits, out, step, final_chunk);
    }
}

void Session::forward_step(const int32_t* tokens, const int32_t* positions, int32_t T, bool all_logits,
                           float* out, Step step, bool final_chunk) {
    const ModelConfig& c = model_.config();
    const ModelWeights& W = model_.weights();
    const int64_t E = c.n_embd, V = c.n_vocab;
    Session* self = this;
    // The sequences of the step and their rows: this session with all T, or one row each.
    const std::span<Session* const> sequences = batch_.empty() ? std::span<Session* const>(&self, 1) : batch_;
    const int32_t rows_each = batch_.empty() ? T : 1;
    for (Session* s : sequences) {
        s->repositioned_layers_ = 0;
        s->reposition_map_.clear();
        s->observed_layers_.clear();
    }

    switch (c.family) {  // x [T, E] = the family's layers over the embedded tokens
        case Family::Llama: forward_llama(tokens, positions, T, step, final_chunk); break;
        case Family::Gemma: forward_gemma(tokens, positions, T, step, final_chunk); break;
        case Family::Moe: forward_moe(tokens, positions, T, step, final_chunk); break;
        case Family::GptOss: forward_gptoss(tokens, positions, T, step, final_chunk); break;
    }
    for (size_t b = 0; b < sequences.size(); ++b) {
        Session& s = *sequences[b];
        s.run_observed_hooks(rows_each, positions + b, step, final_chunk);
        s.finish_repositioning();
        if (c.has_swa()) s.trim_sliding_windows(step);
    }
    // Output head: final norm, the output matrix (tied: token_embd), optional soft-capping.
    const int64_t rows = all_logits ? T : 1;
    ops::rms_norm(x_.data() + (T - rows) * E, W.output_norm.data(), xn_.data(), rows, E, c.rms_eps);
    matmul(xn_.data(), rows, W.output, out);  // [rows, V]
    if (c.final_logit_softcap > 0.0f) {
#pragma omp parallel for schedule(static) if (rows > 1)
        for (int64_t r = 0; r < rows; ++r) ops::softcap(out + r * V, V, 1.0f, c.final_logit_softcap);
    }
}

// Sliding-window layers keep only what a later query can see: the next position n_past sees
// keys at positions > n_past - window. During decoding the dropping waits until kSwaSlack
// entries have gathered (a compaction copies the whole window), so between steps a head holds
// at most window - 1 + kSwaSlack - 1 entries; a prefill chunk leaves exactly window - 1.
void Session::trim_sliding_windows(Step step) {
    constexpr int32_t kSwaSlack = 32;
    const ModelConfig& c = model_.config();
    const int32_t first = n_past_ - c.sliding_window + 1;  // oldest position still visible
    std::vector<int32_t> keep;                              // [kept] entry indices (a suffix)
    for (int l = 0; l < c.n_layer; ++l) {
        if (!c.is_swa(l)) continue;
        for (int h = 0; h < c.n_head_kv; ++h) {
            const int32_t n = kv_.size(l, h);
            const int32_t* pos = kv_.positions(l, h);
            const auto drop = static_cast<int32_t>(std::lower_bound(pos, pos + n, first) - pos);
            if (drop == 0 || (step == Step::Decode && drop < kSwaSlack)) continue;
            keep.resize(sz(n - drop));
            std::iota(keep.begin(), keep.end(), drop);
            kv_.compact(l, h, keep);
        }
    }
}

// The sink logits of query heads h * group + g0 .. of a layer (gpt-oss's attn_sinks: they join
// each row's softmax denominator, attention.h), or null for a model without them.
const float* Session::sink_logits(int layer, int h, int g0) const {
    const std::vector<float>& s = model_.weights().layers[sz(layer)].attn_sinks;  // [n_head]
    return s.empty() ? nullptr : s.data() + int64_t{h} * model_.config().n_group() + g0;
}

// The cache of (layer, h) as stored, for the attention kernels.
KvHeadData Session::head_data(int layer, int h) const {
    KvHeadData d;
    d.key_type = kv_.config().key_type;
    d.value_type = kv_.config().value_type;
    d.keys = kv_.key_data(layer, h);
    d.values = kv_.value_data(layer, h);
    d.head_dim = kv_.head_dim();
    return d;
}

// Work items of a layer's attention: (KV head, slice of its query heads). A slice's query heads
// share every load of the head's keys and values; enough slices to give every thread work (the
// observations of one query head are written by one work item only).
Session::GroupSplit Session::group_split() const {
    const ModelConfig& c = model_.config();
    const int G = c.n_group(), Hkv = c.n_head_kv;
    const int slices = std::clamp((threads_here() + Hkv - 1) / Hkv, 1, G);
    GroupSplit s;
    s.group = G;
    s.width = (G + slices - 1) / slices;
    s.slices = (G + s.width - 1) / s.width;
    s.items = Hkv * s.slices;
    return s;
}

int decode_split_parts(int threads, int n_head_kv, int32_t n_entries) {
    const int even = threads / std::gcd(n_head_kv, threads);  // n_head_kv * even items: as many per thread
    return std::clamp(n_entries / kEntryBlock, 1, even);
}

void Session::attention_split(int layer, int parts) {
    const ModelConfig& c = model_.config();
    const int G = c.n_group(), D = c.head_dim, Hkv = c.n_head_kv;
    const int items = Hkv * parts;
    part_out_.resize(sz(int64_t{items} * G * D));
    part_lse_.resize(sz(int64_t{items} * G));
    int32_t n_max = 0;
    for (int h = 0; h < Hkv; ++h) n_max = std::max(n_max, decode_ranges_[sz(h)].second);
    const int32_t width = (n_max + parts - 1) / parts;  // entries of the largest slice
    const int64_t work = int64_t{n_max} * D * c.n_head;
#pragma omp parallel if (work >= kParallelAttentionMin)
    {
        float* s = attention_scratch(sz(int64_t{G} * width));  // [G, width]
#pragma omp for schedule(dynamic, 1)
        for (int item = 0; item < items; ++item) {
            const int h = item / parts, k = item % parts;
            const auto [first, n] = decode_ranges_[sz(h)];
            const auto j0 = static_cast<int32_t>(first + int64_t{n} * k / parts);
            const auto j1 = static_cast<int32_t>(first + int64_t{n} * (k + 1) / parts);
            float* o = part_out_.data() + int64_t{item} * G * D;  // [G, D]
            float* lse = part_lse_.data() + int64_t{item} * G;    // [G]
            if (j1 == j0) {  // a head with fewer entries than slices: this one adds nothing
                std::fill(lse, lse + G, -INFINITY);
                std::fill(o, o + int64_t{G} * D, 0.0f);
                continue;
            }
            kvec::attention_causal(q_.data() + int64_t{h} * G * D, {0, D}, 1, G, head_data(layer, h).from(j0),
                                   j1 - j0, c.attn_scale, s, width, o, {0, D}, c.attn_logit_softcap, nullptr, 0,
                                   lse);
        }
#pragma omp for
        for (int h = 0; h < Hkv; ++h) {
            attention_merge(parts, G, D, part_lse_.data() + int64_t{h} * parts * G,
                            part_out_.data() + int64_t{h} * parts * G * D, sink_logits(layer, h, 0),
                            att_.data() + int64_t{h} * G * D, D);
        }
    }
}

void Session::attention_block(int layer, const ops::RopeParams& rope, const int32_t* positions, int32_t T, Step step,
                              bool final_chunk) {
    const ModelConfig& c = model_.config();
    const LayerWeights& L = model_.weights().layers[sz(layer)];
    const int64_t E = c.n_embd, Q = c.q_dim(), KV = c.kv_dim(), D = c.head_dim;
    ops::rms_norm(x_.data(), L.attn_norm.data(), xn_.data(), T, E, c.rms_eps);  // [T, E]
    const MatmulOut qkv[] = {{&L.wq, q_.data()}, {&L.wk, k_.data()}, {&L.wv, v_.data()}};
    matmul_group(xn_.data(), T, qkv);  // q [T, Q], k [T, KV], v [T, KV]
    if (!L.bq.empty()) ops::add_bias(q_.data(), L.bq.data(), T, Q);
    if (!L.bk.empty()) ops::add_bias(k_.data(), L.bk.data(), T, KV);
    if (!L.bv.empty()) ops::add_bias(v_.data(), L.bv.data(), T, KV);
    if (!L.q_norm.empty()) ops::rms_norm(q_.data(), L.q_norm.data(), q_.data(), T * c.n_head, D, c.rms_eps);
    if (!L.k_norm.empty()) ops::rms_norm(k_.data(), L.k_norm.data(), k_.data(), T * c.n_head_kv, D, c.rms_eps);
    remember_prerope_queries(layer, T, positions, step);
    ops::rope(q_.data(), T, c.n_head, D, positions, rope);     // [T, n_head, D]
    ops::rope(k_.data(), T, c.n_head_kv, D, positions, rope);  // [T, n_head_kv, D]
    attention(layer, T, positions, step, final_chunk);         // att [T, Q]
    matmul(att_.data(), T, L.wo, proj_.data());                // [T, E]
    if (!L.bo.empty()) ops::add_bias(proj_.data(), L.bo.data(), T, E);
}

void Session::attention(int layer, int32_t T, const int32_t* positions, Step step, bool final_chunk) {
    if (batch_.empty()) {
        attention_rotated(layer, T, positions, step, final_chunk);
        return;
    }
    const int64_t Q = model_.config().q_dim(), KV = model_.config().kv_dim();
    const auto B = static_cast<int>(batch_.size());
    // The sequences are independent. With at least one per thread, the threads share them out
    // whole: one parallel region per layer, where each sequence's own regions (one or two, over
    // its few entries) would each pay a fork and barriers and leave threads waiting. Inside, a
    // sequence's regions then run on its one thread (threads_here).
    std::exception_ptr error;
#pragma omp parallel for schedule(dynamic, 1) if (B >= omp_get_max_threads())
    for (int b = 0; b < B; ++b) {
        try {
            Session& s = *batch_[sz(b)];
            if (b > 0) {  // its rows [Q], [KV], [KV] into its own buffers, its output [Q] back
                std::copy_n(q_.begin() + b * Q, Q, s.q_.begin());
                std::copy_n(k_.begin() + b * KV, KV, s.k_.begin());
                std::copy_n(v_.begin() + b * KV, KV, s.v_.begin());
            }
            s.attention_rotated(layer, 1, positions + b, step, final_chunk);
            if (b > 0) std::copy_n(s.att_.begin(), Q, att_.begin() + b * Q);
        } catch (...) {
#pragma omp critical(kvec_batch_attention_error)
            if (!error) error = std::current_exception();
        }
    }
    if (error) std::rethrow_exception(error);
}

void Session::attention_rotated(int layer, int32_t T, const int32_t* positions, Step step, bool final_chunk) {
    const int64_t Q = model_.config().q_dim();
    kv_.rotate_queries(q_.data(), T * Q);    // q [T, Q] as the cache's keys are stored
    attention_sequence(layer, T, positions, step, final_chunk);
    kv_.unrotate_outputs(att_.data(), T * Q);  // att [T, Q] out of the values' storage
}

void Session::attention_sequence(int layer, int32_t T, const int32_t* positions, Step step, bool final_chunk) {
    const ModelConfig& c = model_.config();
    const int G = c.n_group(), D = c.head_dim, Hkv = c.n_head_kv;
    const int64_t Q = c.q_dim(), KV = c.kv_dim();
    const float scale = c.attn_scale;

    // New entries (post-RoPE) join each KV head's list.
    for (int h = 0; h < Hkv; ++h) {
        kv_.append(layer, h, T, k_.data() + int64_t{h} * D, KV, v_.data() + int64_t{h} * D, KV, positions);
    }
    if (c.is_swa(layer)) {  // bounded by its window already: no observations, no eviction
        attention_sliding(layer, T, positions);
        return;
    }

    const bool reconstruct = step == Step::Reconstruct;
    const bool evict = evictor_ != nullptr && !eviction_paused_ && !defer_hook_ &&
                       (step == Step::PrefillChunk ||
                        (step == Step::Decode && request_.decode_interval > 0 &&
                         n_decoded_ % request_.decode_interval == 0));
    const bool prompt_scope = request_.window_scope == WindowScope::Prompt;
    const bool ring = request_.window > 0 && (request_.decode_interval > 0 || prompt_scope) && !reconstruct;
    if (ring) recent_q_[sz(layer)].append(q_.data(), T, positions);
    bool want_window = evict && request_.window > 0 && step == Step::PrefillChunk;
    // Prompt scope: the window is the prompt's last w queries, needed at the final chunk only;
    // when that chunk holds fewer than w queries and earlier ones exist, all come from the ring.
    bool ring_window = false;
    if (want_window && prompt_scope) {
        if (!final_chunk) {
            want_window = false;
        } else if (T < request_.window && recent_q_[sz(layer)].count() > T) {
            want_window = false;
            ring_window = true;
        }
    }
    const bool want_last = evict && request_.last_row;
    const bool want_colsum = request_.column_sums && !reconstruct;
    const int32_t n_window = want_window ? std::min(request_.window, T) : 0;
    const ReconChunk rc = recon_chunk_;

    // The kernels read each head's keys and values as stored (F16 in place, no float copy).
    int32_t n_max = 0;
    for (int h = 0; h < Hkv; ++h) {
        const int32_t n_h = kv_.size(layer, h);
        n_max = std::max(n_max, n_h);
        if (want_window) window_[sz(h)].assign(sz(int64_t{G} * n_h), 0.0f);
        if (want_last) last_row_[sz(h)].assign(sz(int64_t{G} * n_h), 0.0f);
    }

    // A decode step whose probability rows nobody reads: each KV head's entries over the threads.
    const bool rows_read = want_colsum || want_window || want_last || reconstruct;
    const int parts = T == 1 && !rows_read ? decode_split_parts(threads_here(), Hkv, n_max) : 1;
    if (parts > 1) {
        decode_ranges_.resize(sz(Hkv));
        for (int h = 0; h < Hkv; ++h) decode_ranges_[sz(h)] = {0, kv_.size(layer, h)};
        attention_split(layer, parts);
        if (evict) run_evictor(layer, T, positions, step, final_chunk, n_window, want_window, want_last, ring_window);
        return;
    }
    const GroupSplit split = group_split();
    const int64_t work = int64_t{T} * n_max * D * c.n_head;  // multiply-adds of q.K (and of p.V)
    const int32_t n_pos = positions_per_call(T, split.width, n_max);
#pragma omp parallel if (work >= kParallelAttentionMin)
    {
        float* s = attention_scratch(sz(int64_t{n_pos} * split.width * n_max));  // [n_pos * width, n_max]
#pragma omp for schedule(dynamic, 1)
        for (int item = 0; item < split.items; ++item) {
            const auto [h, g0, ng] = split.item(item);
            const int32_t n_h = kv_.size(layer, h);
            const int32_t n_old = n_h - T;
            const KvHeadData kv = head_data(layer, h);
            const float inv_w = n_window > 0 ? 1.0f / static_cast<float>(n_window) : 0.0f;
            for (int32_t t0 = 0; t0 < T; t0 += n_pos) {
                const int32_t np = std::min(n_pos, T - t0);
                const int64_t q0 = t0 * Q + int64_t{h * G + g0} * D;  // query heads h * G + g0 .. + ng
                // Position t0 + dt sees n_old + t0 + dt + 1 entries (causal in the chunk).
                kvec::attention_causal(q_.data() + q0, {Q, D}, np, ng, kv, n_old + t0 + 1, scale, s,
                                       n_max, att_.data() + q0, {Q, D}, c.attn_logit_softcap,
                                       sink_logits(layer, h, g0));
                for (int32_t dt = 0; dt < np; ++dt) {
                    const int32_t t = t0 + dt;
                    const int32_t vis = n_old + t + 1;
                    for (int gi = 0; gi < ng; ++gi) {
                        const int g = g0 + gi;
                        const float* p = s + (int64_t{dt} * ng + gi) * n_max;  // [vis]
                        if (want_colsum) {
                            float* acc = kv_.aux(layer, h, g);  // [n_h]
                            for (int32_t j = 0; j < vis; ++j) acc[j] += p[j];
                        }
                        if (want_window && t >= T - n_window) {
                            float* win = window_[sz(h)].data() + int64_t{g} * n_h;  // [n_h]
                            for (int32_t j = 0; j < vis; ++j) win[j] += p[j] * inv_w;
                        }
                        if (want_last && t == T - 1) {
                            std::copy(p, p + vis, last_row_[sz(h)].begin() + int64_t{g} * n_h);
                        }
                        if (reconstruct) {
                            // KVzip's score: the probability renormalised over the sinks, the
                            // chunk being reconstructed and the reconstruction's own entries.
                            const double mass = sum_f32(p, rc.sinks) + sum_f32(p + rc.begin, rc.end - rc.begin) +
                                                sum_f32(p + rc.n_context, vis - rc.n_context);
                            const auto inv = static_cast<float>(mass > 0.0 ? 1.0 / mass : 0.0);
                            float* rec = recon_[sz(layer)][sz(h)].data() + int64_t{g} * rc.n_context;  // [n_context]
                            for (int32_t j = rc.begin; j < rc.end; ++j) {
                                const float v = p[j] * inv;
                                rec[j] = rec[j] < v ? v : rec[j];
                            }
                        }
                    }
                }
            }
        }
    }
    if (evict) run_evictor(layer, T, positions, step, final_chunk, n_window, want_window, want_last, ring_window);
}

// A sliding-window layer's attention: position p sees the entries at positions
// p - sliding_window < pos <= p (llama.cpp's standard SWA mask), passed to the kernels as the
// head's rows from the first visible one on. A block of query positions whose windows all start
// at the same entry (a sequence shorter than the window) goes to the kernel in one call; past
// the window, one position per call.
void Session::attention_sliding(int layer, int32_t T, const int32_t* positions) {
    const ModelConfig& c = model_.config();
    const int G = c.n_group(), D = c.head_dim, Hkv = c.n_head_kv;
    const int64_t Q = c.q_dim();
    const float scale = c.attn_scale;
    const int32_t window = c.sliding_window;
    int32_t n_max = 0;
    for (int h = 0; h < Hkv; ++h) n_max = std::max(n_max, kv_.size(layer, h));
    if (T == 1) {  // a decode step: each KV head's window of entries over the threads
        decode_ranges_.resize(sz(Hkv));
        int32_t n_vis = 0;
        for (int h = 0; h < Hkv; ++h) {
            const int32_t n_h = kv_.size(layer, h);
            const int32_t* pos = kv_.positions(layer, h);  // [n_h]
            const int32_t first = window_start(pos, n_h, positions[0], window);
            decode_ranges_[sz(h)] = {first, n_h - first};
            n_vis = std::max(n_vis, n_h - first);
        }
        if (const int parts = decode_split_parts(threads_here(), Hkv, n_vis); parts > 1) {
            attention_split(layer, parts);
            return;
        }
    }
    const GroupSplit split = group_split();
    const int64_t work = int64_t{T} * std::min(n_max, window) * D * c.n_head;
    const int32_t n_pos = positions_per_call(T, split.width, n_max);
#pragma omp parallel if (work >= kParallelAttentionMin)
    {
        float* s = attention_scratch(sz(int64_t{n_pos} * split.width * n_max));  // [n_pos * width, n_max]
#pragma omp for schedule(dynamic, 1)
        for (int item = 0; item < split.items; ++item) {
            const auto [h, g0, ng] = split.item(item);
            const int32_t n_h = kv_.size(layer, h);
            const int32_t n_old = n_h - T;
            const int32_t* pos = kv_.positions(layer, h);  // [n_h]
            const KvHeadData kv = head_data(layer, h);
            // The first entry position t sees (its window's start).
            auto start_of = [&](int32_t t) { return window_start(pos, n_old + t + 1, positions[t], window); };
            for (int32_t t0 = 0; t0 < T;) {
                const int32_t np = std::min(n_pos, T - t0);
                const int32_t first = start_of(t0);
                // Entries of consecutive positions from the first position's window to the block's
                // last (a prefill): the block in one call, each position masked to its own window.
                // Otherwise the block only where every position sees the same first entry.
                const int32_t last = n_old + t0 + np - 1;
                const bool consecutive = pos[last] - pos[first] == last - first;
                const int32_t n = consecutive || start_of(t0 + np - 1) == first ? np : 1;
                const int64_t q0 = t0 * Q + int64_t{h * G + g0} * D;  // query heads h * G + g0 .. + ng
                kvec::attention_causal(q_.data() + q0, {Q, D}, n, ng, kv.from(first),
                                       n_old + t0 + 1 - first, scale, s, n_max, att_.data() + q0,
                                       {Q, D}, c.attn_logit_softcap,
                                       sink_logits(layer, h, g0), consecutive ? window : 0);
                t0 += n;
            }
        }
    }
}

// The eviction hook of one layer after its attention: builds the view, asks the policy, compacts
// (and re-positions) the layer.
}  // namespace kvec
