// The forward pass of one sequence: a model, its KV cache, preallocated activations, and the
// eviction hook.
//
//   x = the family's layers over the embedded tokens     [T, n_embd]
//       (src/model/arch/llama.cpp: llama, qwen2, qwen3, phi3; src/model/arch/gemma.cpp: gemma3,
//       gemma2; src/model/arch/moe.cpp: qwen3moe, qwen2moe, llama with experts;
//       src/model/arch/gptoss.cpp: gpt-oss; which one: ArchTraits::family, config.h),
//       each calling the shared attention over the budgeted cache:
//         append k, v to the cache; a = attention over each KV head's entries (GQA; causal
//         inside the chunk; sliding-window layers: only the last window positions)  [T, q_dim]
//         [eviction hook: the policy sees the layer, the layer is compacted; not for
//          sliding-window layers, whose cache keeps exactly their window]
//         (gemma2: the attention logits soft-capped before the softmax; gpt-oss: each query
//          head's sink logit in the softmax's denominator, not a cache entry)
//   logits = rms_norm(x) . W_out (optional soft-capping)   [T or 1, n_vocab]
//
// The family is chosen once per forward step (a switch on ModelConfig::family), not per layer
// or token.
//
// Positions: prefill assigns n_past, n_past + 1, ... (or the positions given); decode continues
// at n_past. Entries keep their original positions after eviction, so a token generated after a
// compressed prompt of N tokens still gets position N + t. The exception is a policy that
// re-positions what it keeps (Evictor::reposition, StreamingLLM's re-rotation): the kept keys are
// re-rotated to their new positions (rerotate_keys) and the next token gets the position the
// policy names; later chunks of the same prefill move down by the same amount.
//
// Attention runs per (layer, KV head) over that head's variable-length list of entries as stored
// (tensor/attention.h: F16 keys and values read in place), one query position at a time for the
// query heads sharing the KV head (never an N x N matrix), full softmax in float32. In the same
// pass it produces the observations the attached Evictor asked for (see kvcache/eviction.h) from
// the probability rows; a policy's view gets the keys as float, converted only when it runs.
//
// Threads: OpenMP, as set by omp_set_num_threads() (the tools' -t).
//
// Files: session.cpp holds the forward step and the attention over the cache; session_eviction.cpp
// the eviction orchestration (remembered queries, a layer's view and its hook, compaction,
// re-positioning, context reconstruction).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "kvcache/eviction.h"
#include "kvcache/kv_cache.h"
#include "model/model.h"
#include "model/moe.h"
#include "model/query_ring.h"
#include "model/reconstruction.h"
#include "tensor/attention.h"
#include "tensor/ops.h"

namespace kvec {

// RoPE parameters of a model (mode, rotated dimensions, base, linear scaling, frequency factors,
// LongRoPE's attention factor) for a session of context n_ctx (0: the model's n_ctx_train), which
// chooses LongRoPE's long factors when n_ctx > ModelConfig::n_ctx_orig and the short ones
// otherwise, as llama.cpp does. The factors pointer refers to the model's weights. swa: the
// sliding-window layers' (their base and scaling, ModelConfig::rope_freq_base_swa / _scale_swa).
// YaRN (ModelConfig::rope_yarn): the model's YaRN divisors with freq_scale 1, and attn_factor
// times ops::yarn_mscale, which is the rotation ggml computes.
ops::RopeParams rope_params(const Model& model, int32_t n_ctx = 0, bool swa = false);
// The same as an eviction policy's view sees it (LayerView::rope).
RopeInfo rope_info(const ops::RopeParams& rope);

// Moves n post-RoPE keys [n, head_dim] from positions from[n] to positions to[n] in place: each
// rotated pair turns by the RoPE angle of (to - from), which equals RoPE applied at `to` to the
// un-rotated key (angles are linear in the position; NORM and NEOX layouts, freq_scale and
// freq_factors included; dimensions at or past n_rot are unchanged). Runs of equal shifts share
// one evaluation of the angles; a zero shift leaves the key untouched.
void rerotate_keys(float* keys, int32_t n, int head_dim, const int32_t* from, const int32_t* to,
                   const ops::RopeParams& rope);

// Time and volume of the eviction work of a session since the last reset() (for `kvec run` and
// the policy benchmark). The observations computed inside the attention pass are not timed
// separately (they are interleaved with it); window rows computed after the pass are.
struct EvictionStats {
    double policy_seconds = 0;   // in Evictor::on_prefill / on_decode / reposition (scoring, selection)
    double observe_seconds = 0;  // window rows computed after the pass (decode; short final chunk)
    double compact_seconds = 0;  // compaction and re-rotation of the layers
    double reconstruct_seconds = 0;  // context reconstruction passes (KVzip; a forward pass of their own)
    int64_t calls = 0;           // hook calls
    int64_t compressions = 0;    // calls that compacted a layer
    int64_t evicted = 0;         // entries removed
    int64_t repositioned = 0;    // forward steps whose layers were re-positioned
};

struct SessionOptions {
    int32_t n_ctx = 0;        // positions available; 0: the model's training context length
    int32_t n_batch = 512;    // tokens per forward step; longer prefills run as chunks of this size
    KvType kv_type_k = KvType::F16;  // element type of the cached keys (kv_cache.h)
    KvType kv_type_v = KvType::F16;  // element type of the cached values
};

// The slices of each KV head's entries for a decode step's attention over `threads` threads
// (Session::attention_split): n_head_kv x parts work items, the same count for every thread, at
// most one slice per kEntryBlock entries of the longest head; 1: no split (the query heads of a KV
// head are split instead).
int decode_split_parts(int threads, int n_head_kv, int32_t n_entries);

class Session {
public:
    explicit Session(const Model& model, const SessionOptions& options = {});

    const Model& model() const { return model_; }
    const SessionOptions& options() const { return options_; }
    int32_t n_ctx() const { return options_.n_ctx; }
    int32_t n_vocab() const { return model_.config().n_vocab; }

    // Attaches (or, with nullptr, detaches) an eviction policy. Only while the cache is empty
    // (after construction or reset()), because the cache's per-entry scores depend on it.
    void set_evictor(Evictor* evictor);
    Evictor* evictor() const { return evictor_; }

    // Empties the cache and restarts positions at 0 (and resumes a paused eviction).
    void reset();

    // While paused, the attached evictor is not called (no observations, no compression): what
    // is processed next stays in the cache. The query-agnostic protocol compresses a context,
    // pauses, then appends the question. Column sums still accumulate.
    void pause_eviction(bool paused) { eviction_paused_ = paused; }
    bool eviction_paused() const { return eviction_paused_; }

    // Forgets everything from position n_past on: entries at positions >= n_past are dropped from
    // every (layer, KV head) and the next token goes to n_past. Returns the cache to its state
    // before a continuation (a question and its answer after a compressed context), so that one
    // compressed context can answer several questions. kvec::Error unless 0 <= n_past <= n_past().
    void rollback(int32_t n_past);

    // Processes tokens in chunks of n_batch at positions n_past, n_past + 1, ... Returns the logits
    // of the last token [n_vocab], or with all_logits of every token [tokens.size(), n_vocab].
    // The evictor (if any) runs after every layer of every chunk; a prefill on an empty session
    // starts a sequence (Evictor::begin_sequence). An evictor that asks for context
    // reconstruction (ObservationRequest::reconstruct_chunk) is instead called once per layer
    // after a reconstruction pass that follows a prefill on an empty session; the logits and the
    // next position stay those of the prompt. An evictor that selects the prompt's tokens
    // (Evictor::select_prompt, GemFilter) has the session start over with them: the logits are the
    // last selected token's and n_past the number selected. Throws kvec::Error if the context
    // overflows or a token is outside the vocabulary.
    std::span<const float> prefill(std::span<const int32_t> tokens, bool all_logits = false);

    // The same at explicit positions: strictly increasing and >= n_past.
    std::span<const float> prefill_at(std::span<const int32_t> tokens,
                                      std::span<const int32_t> positions, bool all_logits = false);

    // One token at position n_past; returns its logits [n_vocab]. A batch of one (decode_batch).
    std::span<const float> decode(int32_t token);

    // One decode step for each of several sessions of the same model, in one forward pass:
    // sessions[b] takes tokens[b] at its own n_past. Every weight matrix is read once for the
    // whole batch ([B, n_embd] rows); attention, eviction hooks and positions stay per session
    // (each over its own cache, with its own policy). Each session's logits are then in
    // last_logits(). Everything is checked before anything changes: kvec::Error for an empty or
    // mismatched list, a session listed twice, sessions of different models, more sessions than
    // the first one's n_batch, or a session whose token or position does not fit (check_decode);
    // afterwards for non-finite logits (NaN/Inf weights).
    static void decode_batch(std::span<Session* const> sessions, std::span<const int32_t> tokens);
    // kvec::Error unless decode(token) can run: a token in the vocabulary and a free position.
    void check_decode(int32_t token) const;
    // The logits of the last decode step [n_vocab].
    std::span<const float> last_logits() const { return logits_; }

    // How the forward steps of a prefill (its chunks, a reconstruction pass) reach the machine:
    // each runs as gate(step). kvec serve passes a scheduler that runs them between other
    // sessions' batched decode steps (engine/step_scheduler.h). Empty (the default): at once.
    // A gate that throws instead of running a prefill chunk stops the prefill there: the
    // exception propagates, and the session holds the chunks before it (n_past and tokens()).
    using StepGate = std::function<void(const std::function<void()>& step)>;
    void set_step_gate(StepGate gate) { step_gate_ = std::move(gate); }

    int32_t n_past() const { return n_past_; }        // next position
    int32_t n_prompt() const { return n_prompt_; }    // tokens of the last prefill-from-empty
    int32_t n_decoded() const { return n_decoded_; }  // decode steps since the last prefill
    // Token id at each position [n_past] (-1 where positions were skipped).
    const std::vector<int32_t>& tokens() const { return tokens_; }

    // What the session holds beside its cache, to save and restore a conversation
    // (engine/session_file.h).
    struct SequenceState {
        int32_t n_past = 0;
        int32_t n_prompt = 0;
        int32_t n_decoded = 0;
        std::vector<int32_t> tokens;  // [n_past]
    };
    SequenceState sequence_state() const { return {n_past_, n_prompt_, n_decoded_, tokens_}; }
    // Continues a saved sequence whose entries were put into the cache (KvCache::assign, with the
    // saved policy attached first): the next token goes to state.n_past. Decode-time query windows
    // start afresh. kvec::Error when the state does not fit the session (n_past beyond the context,
    // a token outside the vocabulary, an entry at or past n_past).
    void restore_sequence(SequenceState state);
    KvCache& kv_cache() { return kv_; }
    const KvCache& kv_cache() const { return kv_; }

    const EvictionStats& eviction_stats() const { return eviction_stats_; }

private:
    enum class Step { PrefillChunk, Decode, Reconstruct };

    // kvec::Error naming the model file for a NaN or infinite logit (NaN/Inf weights).
    void check_finite_logits(std::span<const float> logits, int32_t position) const;
    // Evictor::select_prompt: empties the cache and prefills the selected prompt tokens at 0, 1, ...
    std::span<const float> refill(std::span<const int32_t> selected);

    // One forward step over T <= n_batch tokens; writes logits into out ([T or 1, n_vocab]):
    // the family's layers (below), the eviction hooks of all-layer policies, the output head.
    // Prefill and reconstruction steps run through step_gate_. In a batched decode step (batch_) row b
    // is the one token of batch_[b], and the per-sequence parts run on each sequence.
    void forward(const int32_t* tokens, const int32_t* positions, int32_t T, bool all_logits,
                 float* out, Step step, bool final_chunk);
    void forward_step(const int32_t* tokens, const int32_t* positions, int32_t T, bool all_logits,
                      float* out, Step step, bool final_chunk);
    // The attention block every family shares, from the residual stream x_ [T, E] to proj_ [T, E]:
    // pre-norm (attn_norm) -> q, k, v projections (their biases and per-head q/k norms where the
    // file has them) -> RoPE -> attention over the budgeted cache -> output projection (its bias).
    // What follows it (post-norm, residual add) is the family's.
    void attention_block(int layer, const ops::RopeParams& rope, const int32_t* positions, int32_t T, Step step,
                         bool final_chunk);
    // Each family's forward pass, in a file of its own (src/model/arch/<family>.cpp): embeds the
    // tokens and runs every layer, leaving the final residual stream in x_ [T, n_embd].
    void forward_llama(const int32_t* tokens, const int32_t* positions, int32_t T, Step step, bool final_chunk);
    void forward_gemma(const int32_t* tokens, const int32_t* positions, int32_t T, Step step, bool final_chunk);
    void forward_moe(const int32_t* tokens, const int32_t* positions, int32_t T, Step step, bool final_chunk);
    void forward_gptoss(const int32_t* tokens, const int32_t* positions, int32_t T, Step step,
                        bool final_chunk);
    // The attention over the budgeted cache (shared by every family): appends the layer's keys
    // k_ and values v_, attends with q_ into att_, runs the eviction hook. Sliding-window layers
    // (ModelConfig::is_swa) mask by position and are left alone by eviction policies. In a
    // batched decode step, each sequence attends over its own cache with its row of q_, k_, v_.
    void attention(int layer, int32_t T, const int32_t* positions, Step step, bool final_chunk);
    // attention_sequence with the queries rotated into the space of the cache's stored keys and
    // the outputs rotated back from its values' (KvCache::rotate_queries, unrotate_outputs).
    void attention_rotated(int layer, int32_t T, const int32_t* positions, Step step, bool final_chunk);
    void attention_sequence(int layer, int32_t T, const int32_t* positions, Step step, bool final_chunk);
    void attention_sliding(int layer, int32_t T, const int32_t* positions);
    // Drops the entries of sliding-window layers that no later query can see (positions at or
    // before n_past - sliding_window); during decoding once kSwaSlack of them have gathered.
    void trim_sliding_windows(Step step);
    void clear_query_rings();
    // Keeps the layer's queries before RoPE (q_) for a policy that asked for them
    // (ObservationRequest::queries), per sequence in a batched decode step.
    void remember_prerope_queries(int layer, int32_t T, const int32_t* positions, Step step);
    void reconstruct_and_evict(std::span<const int32_t> context, std::span<const int32_t> last_positions);
    void window_from_recent_queries(int layer);
    // Attention work items: (KV head, slice of `width` of its query heads), items = n_head_kv * slices.
    struct GroupSplit {
        int group = 1;  // query heads per KV head
        int width = 1;
        int slices = 1;
        int items = 0;
        // Work item i: KV head h, its query heads g0 .. g0 + ng - 1 (within the group).
        struct Item {
            int h, g0, ng;
        };
        Item item(int i) const {
            const int g0 = i % slices * width;
            return {i / slices, g0, std::min(group, g0 + width) - g0};
        }
    };
    GroupSplit group_split() const;
    // One decode position whose probability rows nobody reads: each KV head's visible entries
    // decode_ranges_[h] = (first, count) cut into `parts` slices (decode_split_parts), one work
    // item each, merged (attention_merge) into att_.
    void attention_split(int layer, int parts);
    KvHeadData head_data(int layer, int h) const;
    const float* sink_logits(int layer, int h, int g0) const;
    const float* float_keys(int layer, int h);
    const float* float_values(int layer, int h);
    void check_positions(std::span<const int32_t> positions) const;
    // deferred: the hook call of an all-layer policy after the step's last layer (no window
    // scores or last row in the view).
    void run_evictor(int layer, int32_t T, const int32_t* positions, Step step, bool final_chunk,
                     int32_t n_window, bool want_window, bool want_last, bool ring_window, bool deferred = false);
    void run_observed_hooks(int32_t T, const int32_t* positions, Step step, bool final_chunk);
    std::vector<std::vector<float>> apply_repositioning(int layer, const LayerView& view,
                                                        const KeepLists& keep,
                                                        const Repositioning& r);
    void finish_repositioning();

    const Model& model_;
    SessionOptions options_;
    KvCache kv_;
    Evictor* evictor_ = nullptr;
    bool eviction_paused_ = false;
    ObservationRequest request_;
    std::vector<int> observed_layers_;  // all-layer policies: layers observed in this step, hook pending

    int32_t n_past_ = 0;
    int32_t n_prompt_ = 0;
    int32_t n_decoded_ = 0;
    std::vector<int32_t> tokens_;  // [n_past]
    EvictionStats eviction_stats_;
    ops::RopeParams rope_;
    RopeInfo rope_info_;  // the same, for policies' views
    ops::RopeParams rope_swa_;  // sliding-window layers: their own base and scaling (rope_params)

    StepGate step_gate_;
    // The sequences of the batched decode step this session runs (row b of the activations is
    // batch_[b]'s token; batch_[0] is this session); empty outside such a step.
    std::span<Session* const> batch_;

    // Re-positioning within the current forward step.
    int repositioned_layers_ = 0;
    int32_t reposition_next_ = 0;
    std::vector<std::pair<int32_t, int32_t>> reposition_map_;  // [kept] (old, new) position of one layer

    // Activations, preallocated for n_batch tokens.
    std::vector<float> x_;        // [n_batch, n_embd] residual stream
    std::vector<float> xn_;       // [n_batch, n_embd] normalised
    std::vector<float> q_;        // [n_batch, q_dim]
    std::vector<float> k_;        // [n_batch, kv_dim]
    std::vector<float> v_;        // [n_batch, kv_dim]
    std::vector<float> att_;      // [n_batch, q_dim] attention output
    std::vector<std::pair<int32_t, int32_t>> decode_ranges_;  // [n_head_kv] (first, count) visible entries
    std::vector<float> part_out_;  // [n_head_kv, parts, group, head_dim] attention_split's slices
    std::vector<float> part_lse_;  // [n_head_kv, parts, group] their rows' log-sum-exps
    std::vector<float> proj_;     // [n_batch, n_embd] output projections
    std::vector<float> gate_;     // [n_batch, n_ff] (MoE: [n_batch, n_ff_shexp], the shared expert)
    std::vector<float> up_;       // [n_batch, n_ff] (MoE: [n_batch, n_ff_shexp])
    moe::Scratch moe_;            // the routed experts' buffers (MoE)
    std::vector<float> shexp_gate_;  // [n_batch] the shared expert's gate (qwen2moe)
    std::vector<float> logits_;   // [n_vocab] last-token logits
    std::vector<float> all_logits_;  // [tokens, n_vocab] when asked for every token; [B, n_vocab] batched decode

    // Attention scratch (per KV head of the current layer).
    std::vector<std::vector<float>> keys_f_;    // [n_head_kv][n_h, head_dim] keys as float for a policy's view (F16 cache)
    std::vector<std::vector<float>> window_;    // [n_head_kv][group, n_h]
    std::vector<std::vector<float>> last_row_;  // [n_head_kv][group, n_h]
    std::vector<std::vector<float>> colsum_;    // [n_head_kv][group, n_h] (view copy of the aux scores)

    // Recent queries per layer: post-RoPE for decode-time and prompt-scope window scores
    // ([window, q_dim] each), before RoPE for ObservationRequest::queries ([queries, q_dim]);
    // capacity 0 where the policy asks for neither.
    std::vector<QueryRing> recent_q_;   // [n_layer]
    std::vector<QueryRing> prerope_q_;  // [n_layer]
    std::vector<float> queries_view_;                // [n_queries, q_dim] oldest first, for a view
    std::vector<int32_t> query_positions_view_;      // [n_queries]
    std::vector<std::vector<float>> values_f_;       // [n_head_kv][n_h, head_dim] values as float (F16 cache)

    // Context reconstruction (ObservationRequest::reconstruct_chunk).
    struct ReconChunk {
        int32_t n_context = 0;     // prompt entries per head (indices below are entry indices)
        int32_t begin = 0, end = 0;  // the prompt entries this chunk reconstructs
        int32_t sinks = 0;         // entries [0, sinks) also take part in the scoring softmax
    };
    bool defer_hook_ = false;      // a prefill whose hook waits for the reconstruction
    bool refilling_ = false;       // prefilling a prompt selection (Evictor::select_prompt)
    bool recon_ready_ = false;     // the deferred hook runs: views carry the scores
    ReconChunk recon_chunk_;
    std::vector<std::vector<std::vector<float>>> recon_;  // [n_layer][n_head_kv][group, n_context]
    std::vector<float> recon_logits_;                     // [n_vocab] discarded logits of the pass
    std::optional<RepeatPrompts> repeat_;                 // tokenized once per session
};

}  // namespace kvec
