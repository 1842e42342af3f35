// The eviction hook: how an eviction policy sees the KV cache and tells the engine what to keep.
// See docs/eviction-interface.md for the full description and an example.
//
// Data flow, per prompt chunk (prefill) and every k-th decode step (decode):
//   1. the engine computes layer l's attention with the layer's full KV (the chunk's new entries
//      included) and, in the same pass, the observations the policy asked for;
//   2. it calls Evictor::on_prefill / on_decode with a LayerView of layer l;
//   3. the policy fills, per KV head, the sorted entry indices to keep, and returns true;
//   4. the engine compacts layer l (memory is freed) and moves on to layer l + 1.
// The layer's output was already computed in step 1, so eviction affects later tokens only.
// Entries keep their original positions (RoPE phase); new tokens continue from the prompt length,
// unless the policy re-positions the kept entries (Evictor::reposition, StreamingLLM's
// re-rotation), in which case their keys are re-rotated and new tokens continue from there.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kvec {

// Which queries form the observation window of a prefill call.
enum class WindowScope {
    // The last min(w, chunk length) queries of each chunk, at every chunk (chunked compression).
    Chunk,
    // The last w queries of the prefill call (the prompt), whatever the chunking: provided at
    // the final chunk only (one-shot compression after the prompt). When the final chunk is
    // shorter than w, the queries of the earlier chunks are kept by the engine (w query rows
    // per layer) and their rows computed at the final chunk, causal by position.
    Prompt,
};

// What the policy wants the engine to compute. Read once when the evictor is attached.
struct ObservationRequest {
    // w > 0: for the window queries (see window_scope; at a decode-time call, the last w
    // queries the layer has seen, prompt and generated), their softmax probability rows over
    // all entries, averaged over those queries, per query head.
    int window = 0;
    // Column sums of the attention probabilities, per query head, accumulated over every query
    // since the entry entered the cache (all prefill chunks and every decode step). Kept in the
    // cache as per-entry auxiliary scores (group floats per entry) that move with compaction.
    bool column_sums = false;
    // The probability row of the last query (of the chunk, or the current decode token).
    bool last_row = false;
    // k > 0: call on_decode after every k-th decode step (k = 1: every step); 0: never.
    int decode_interval = 0;
    // Which prefill queries form the window (Chunk: each chunk's own; Prompt: the prompt's last w).
    WindowScope window_scope = WindowScope::Chunk;
    // The values of every entry as float (KvHeadView::values).
    bool values = false;
    // m > 0: the layer's last m queries before RoPE (after the biases and the Q norm), prompt and
    // generated ones, with their positions (LayerView::queries). The engine keeps them in a ring
    // of m x n_head x head_dim floats per layer.
    int queries = 0;
    // Context reconstruction (KVzip): c > 0 defers the hook of a prefill that starts on an empty
    // session until the engine has run the model over "repeat the previous context" inputs
    // appended to the prompt's cache, in chunks of c prompt tokens (docs/eviction-interface.md);
    // the hook is then called once per layer with KvHeadView::reconstruction. The first
    // reconstruct_sinks entries take part in the scoring softmax of every chunk. Cannot be
    // combined with window scores, column sums, the last row, decode-time calls or Chunk scope.
    int reconstruct_chunk = 0;
    int reconstruct_sinks = 0;
    // The policy decides for every layer together (budgets shared across layers): in each forward
    // step that evicts, the engine shows every layer's view to Evictor::observe as the step
    // reaches it, and calls the hook of every layer (in layer order) only after the step's last
    // layer. A layer's output never depends on the compaction of another, so this changes nothing
    // but when layers are compacted: one-shot compression already holds every layer in full until
    // the prompt's last chunk. The hook calls' views carry no window scores and no last row
    // (they went to observe); positions, keys, values, column sums and reconstruction scores as
    // usual. With context reconstruction, every layer is observed after the reconstruction pass.
    bool all_layers = false;
};

// The model's rotary embedding, for policies that rotate query statistics themselves. The angle of
// rotated pair i < n_rot / 2 at position p is p * freq_scale * freq_base^(-2i / n_rot) /
// freq_factors[i]; NEOX pairs are (i, i + n_rot / 2), NORM pairs (2i, 2i + 1); dimensions at or
// past n_rot do not rotate.
struct RopeInfo {
    bool neox = false;
    int n_rot = 0;
    float freq_base = 10000.0f;
    float freq_scale = 1.0f;
    const float* freq_factors = nullptr;  // [n_rot / 2] or null
    float attn_factor = 1.0f;             // scale of the rotated elements (LongRoPE, YaRN)
};

enum class EvictionPhase { Prefill, Decode };

// One KV head of the layer being compressed. Every array has one element per entry, in cache
// order (increasing original position); score arrays hold `group` rows, row g belonging to query
// head h * group + g (GGUF/llama.cpp GQA layout), so a policy reduces over the group by mean or max.
struct KvHeadView {
    int32_t n_entries = 0;
    const int32_t* positions = nullptr;      // [n] original positions
    const float* keys = nullptr;             // [n, head_dim] post-RoPE keys, as float
    const float* window_scores = nullptr;    // [group, n] or null (not requested)
    const float* column_sums = nullptr;      // [group, n] or null (not requested)
    const float* last_row = nullptr;         // [group, n] or null (not requested)
    const float* values = nullptr;           // [n, head_dim] values as float, or null (not requested)
    // [group, n] or null: per query head, the largest attention (renormalised as described at
    // ObservationRequest::reconstruct_chunk) any reconstruction query gave the entry.
    const float* reconstruction = nullptr;
};

struct LayerView {
    EvictionPhase phase = EvictionPhase::Prefill;
    int layer = 0;
    int n_layer = 0;
    int n_head_kv = 0;
    int group = 1;        // query heads per KV head (n_head / n_head_kv)
    int head_dim = 0;
    int32_t n_window = 0;     // queries averaged into window_scores (0 when not requested)
    int32_t chunk_begin = 0;  // position of the first token of this chunk / of the decode token
    int32_t chunk_end = 0;    // one past the position of its last token
    bool final_chunk = true;  // prefill: this chunk ends the prompt
    int32_t n_prompt = 0;     // tokens in the whole prompt
    int32_t n_past = 0;       // positions processed so far, this chunk or step included
    int32_t decode_step = 0;  // decode: steps completed since the prompt (1 at the first step)
    std::span<const int32_t> tokens;    // [n_past] token id at each position (-1: unknown)
    std::span<const KvHeadView> heads;  // [n_head_kv]
    // The last min(m, seen) queries before RoPE, oldest first (ObservationRequest::queries):
    // query head q of query t at queries[t * n_head * head_dim + q * head_dim].
    std::span<const float> queries;            // [n_queries, n_head * head_dim] or empty
    std::span<const int32_t> query_positions;  // [n_queries]
    RopeInfo rope;
    // The layer's attention logits: scale * q.k, soft-capped at attn_softcap when > 0 (for
    // policies that score entries with queries of their own).
    float attn_scale = 1.0f;
    float attn_softcap = 0.0f;
};

// keep[h]: strictly increasing entry indices (into KvHeadView h) to keep.
using KeepLists = std::vector<std::vector<int32_t>>;

// New positions for the kept entries of a layer (StreamingLLM's re-rotation to contiguous
// positions). The engine rotates each kept key by the RoPE angle of (new - old position), which
// is exactly the key RoPE would have produced at the new position (NORM and NEOX layouts,
// frequency scaling and factors included), stores the new positions, and gives the next token
// processed position next_position.
struct Repositioning {
    std::vector<std::vector<int32_t>> positions;  // [n_head_kv][kept_h] strictly increasing, >= 0
    int32_t next_position = 0;                    // > every new position
};

// What a budgeted policy holds a prompt to, for reports and memory reservations: the entries per
// KV head per layer it keeps and when it compresses.
struct BudgetPlan {
    int64_t budget = 0;           // B for this prompt (the fixed budget, or its ratio of the prompt)
    bool chunked = false;         // compresses after every prefill chunk (else once after the prompt)
    int64_t decode_interval = 0;  // > 0: keeps the budget while decoding, every k steps
};

class Evictor {
public:
    virtual ~Evictor() = default;

    virtual ObservationRequest request() const = 0;

    // The budget for a prompt of n_prompt tokens; nullopt for a policy that keeps no fixed number of
    // entries per head (no eviction, probes).
    virtual std::optional<BudgetPlan> budget_plan(int64_t n_prompt) const { return std::nullopt; }

    // A new sequence starts (the engine resets its cache); n_prompt tokens will be prefilled.
    virtual void begin_sequence(int32_t n_prompt) {}

    // Right after layer view.layer's attention over a prefill chunk. `keep` arrives sized
    // [n_head_kv] and empty. Return false to leave the layer as it is.
    virtual bool on_prefill(const LayerView& view, KeepLists& keep) = 0;

    // Right after layer view.layer's attention at a decode step, every decode_interval steps.
    virtual bool on_decode(const LayerView& view, KeepLists& keep) { return false; }

    // ObservationRequest::all_layers: right after layer view.layer's attention in a step that
    // evicts (the view the hook would get), before the hook of any layer of that step is called.
    virtual void observe(const LayerView& view) {}

    // Called after on_prefill / on_decode returned true, with the validated keep lists, before
    // the layer is compacted. Return true and fill `out` (one list of new positions per head,
    // one per kept entry) to move the kept entries. Within one forward step (a prefill chunk or
    // a decode step) either every layer is re-positioned, with the same next_position, or none
    // (kvec::Error otherwise). Default: entries keep their original positions.
    virtual bool reposition(const LayerView& view, const KeepLists& keep, Repositioning& out) {
        return false;
    }

    // Prompt selection (GemFilter): called once after a prompt's prefill on an empty session (its
    // hooks all ran). Return true and fill `positions` (strictly increasing prompt positions) to
    // have the session start over with only those tokens, at positions 0, 1, ...: the cache is
    // emptied and the selected tokens are prefilled without calling the evictor; the logits are
    // those of the last selected token. Default: the prompt stays as it is.
    virtual bool select_prompt(std::vector<int32_t>& positions) { return false; }
};

// Helpers for policies.

enum class GroupReduction { Mean, Max };

// out[n] = mean or max over the group rows of scores [group, n].
void reduce_over_group(const float* scores, int group, int32_t n, GroupReduction reduction,
                       float* out);

// Throws kvec::Error (naming the layer, head and index) unless keep has one strictly
// increasing, in-range list per head of the view.
void check_keep_lists(const LayerView& view, const KeepLists& keep);

// Throws kvec::Error unless `r` has one list per head, as long as that head's keep list,
// strictly increasing, non-negative and below r.next_position.
void check_repositioning(const LayerView& view, const KeepLists& keep, const Repositioning& r);

}  // namespace kvec
