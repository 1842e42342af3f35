// Prefill sharing: prefill a prompt once and derive the KV cache of every one-shot eviction
// policy from it, instead of running the prompt again for each (policy, budget).
//
// Why this is exact: a one-shot policy (compression once after the prompt, no decode-time
// eviction) acts on layer l only after layer l's attention over the final chunk is computed, and
// eviction only affects later tokens (kvcache/eviction.h). So the whole prefill - hidden states,
// cache contents, the last token's logits and every observation a policy can ask for (window
// scores of the prompt's last w queries, column sums, the last attention row) - is the same
// whatever the policy. We record those observations once (PrefillRecorder), copy the full cache,
// run each policy's on_prefill per layer on the recorded views (replay_policy), compact, and
// decode from the compacted cache (adopt_cache). The result is bit-identical to attaching the
// policy to the session and prefilling, which tests/eval/test_prefill_share.cpp checks.
//
// A policy that asks for a context reconstruction (KVzip) is shared too: the recording prefill
// runs the reconstruction pass (its entries are dropped again) and the recorder, called after it,
// keeps the reconstruction scores, so one pass serves every budget of that configuration.
//
// Not shareable (they need their own prefill): chunked compression (the policy evicts between
// chunks, which changes later chunks) and decode-time eviction (the policy must stay attached).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvcache/eviction.h"
#include "kvcache/kv_cache.h"
#include "model/session.h"
#include "policy/coverage_probe.h"

namespace kvec::eval {

// True where replay_policy gives exactly what an attached policy gives: a budgeted policy with
// one-shot compression and no decode-time eviction, or the registry's "full" (never evicts).
// `name` is the policy's registry name.
bool is_one_shot(const Evictor& policy, std::string_view name);

// Observations of one layer at the end of the prompt, as a policy sees them in its LayerView.
struct LayerSnapshot {
    int32_t n_window = 0;
    int32_t chunk_begin = 0;
    int32_t chunk_end = 0;
    int32_t n_past = 0;
    std::vector<std::vector<int32_t>> positions;   // [H][n_h]
    std::vector<std::vector<float>> keys;          // [H][n_h, head_dim] post-RoPE, as float
    std::vector<std::vector<float>> values;        // [H][n_h, head_dim] as float
    std::vector<std::vector<float>> window;        // [H][group, n_h] (empty: not recorded)
    std::vector<std::vector<float>> column_sums;   // [H][group, n_h] (empty: not recorded)
    std::vector<std::vector<float>> last_row;      // [H][group, n_h] (empty: not recorded)
    std::vector<std::vector<float>> reconstruction;  // [H][group, n_h] (empty: not recorded)
    std::vector<float> queries;            // [n_q, n_head * head_dim] recent queries before RoPE
    std::vector<int32_t> query_positions;  // [n_q]
};

// Everything a one-shot policy can observe about a prompt, and the prompt's last logits.
struct PrefillSnapshot {
    ObservationRequest request;  // what was recorded
    int n_layer = 0;
    int n_head_kv = 0;
    int group = 1;
    int head_dim = 0;
    float attn_scale = 1.0f;    // LayerView::attn_scale, attn_softcap
    float attn_softcap = 0.0f;
    KvType kv_type_k = KvType::F16;  // the recorded cache's key and value types (replay re-quantises
    KvType kv_type_v = KvType::F16;  // the dequantised rows: the same blocks again)
    int32_t n_prompt = 0;
    std::vector<int32_t> tokens;       // [n_past] token id per position
    std::vector<LayerSnapshot> layers;  // [n_layer]
    std::vector<float> logits;          // [n_vocab] logits of the prompt's last token
};

// An evictor that never evicts and records the final chunk's views. Its request is the union of
// the requests it serves: window scores (one window size), column sums, last row, values, the
// most recent queries any of them asks for, context reconstruction (one configuration).
class PrefillRecorder : public Evictor {
public:
    explicit PrefillRecorder(const ObservationRequest& request);
    ObservationRequest request() const override { return request_; }
    void begin_sequence(int32_t n_prompt) override;
    bool on_prefill(const LayerView& view, KeepLists& keep) override;
    // Moves the recorded observations out, adding keys, values and logits (from the session the
    // recorder was attached to, right after its prefill).
    PrefillSnapshot take(const Session& session, std::span<const float> logits);

private:
    ObservationRequest request_;
    PrefillSnapshot snapshot_;
};

// Union of the observation requests of one-shot policies; kvec::Error if two need different
// window sizes or reconstructions, or one a window and another a reconstruction (group them
// first with share_group_key).
ObservationRequest merge_requests(const std::vector<ObservationRequest>& requests);
// Policies with the same key can share one recorded prefill: the window size (0 = any), or for a
// context reconstruction a negative key naming its chunk and sinks.
int share_group_key(const ObservationRequest& request);

// Prefills `prompt` on `session` (reset first; any evictor detached afterwards) with a recorder.
PrefillSnapshot record_prefill(Session& session, std::span<const int32_t> prompt,
                               const ObservationRequest& request);

struct ReplayResult {
    KvCache cache;                 // the compacted cache (no auxiliary scores)
    int32_t next_position = 0;     // where decoding continues (n_prompt unless re-positioned)
    bool compressed = false;       // some layer was compacted
    int64_t entries = 0;           // entries kept (all layers and heads)
};

// Runs `policy` (a one-shot policy, possibly wrapped in a CoverageProbe) on the recorded prompt,
// layer by layer, exactly as the session's eviction hook would at the final chunk, and returns the
// compacted cache. Validates keep lists and re-positionings as the session does.
ReplayResult replay_policy(const PrefillSnapshot& snapshot, Evictor& policy,
                           const ops::RopeParams& rope);

// Puts `session` (no evictor attached) in the state right after a prefill whose cache is `cache`:
// the next token goes to position next_position. The session runs one forward step of
// last_token at next_position - 1 to set its position state, then its cache is replaced (that
// step's logits are discarded: the caller already has the prompt's logits).
void adopt_cache(Session& session, KvCache&& cache, int32_t next_position, int32_t last_token);

// Bytes the kept entries occupy: keys, values and positions (policy scores not counted), the same
// measure for every policy and either sharing mode.
int64_t kv_entry_bytes(const KvCacheConfig& config);

}  // namespace kvec::eval
