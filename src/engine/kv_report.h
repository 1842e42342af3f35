// What the KV cache did during one generation, in numbers: the prompt's cache uncompressed
// ("before"), after the prompt's eviction ("after"), at the end, the peaks, and for a
// budgeted policy the budget B, the entries it allows after the prompt and whether the cache kept
// to them. `kvec run` prints it; `kvec serve` returns it as a request's `kv` object.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/generator.h"
#include "kvcache/eviction.h"
#include "model/session.h"

namespace kvec {

struct KvReport {
    int64_t heads = 0;                // n_layer * n_head_kv: the (layer, KV head) lists
    size_t entry_bytes = 0;           // bytes of one entry
    int64_t full_entries = 0;         // before: heads * prompt tokens, the prompt uncompressed
    size_t full_bytes = 0;
    int64_t prompt_entries = 0;       // after: right after the prompt (and its eviction)
    size_t prompt_bytes = 0;
    int64_t end_entries = 0;          // at the end of the generation
    size_t end_bytes = 0;
    size_t peak_bytes = 0;            // largest allocation during the generation
    size_t prompt_peak_bytes = 0;     // largest allocation during the prompt
    // Budgeted policies only (Evictor::budget_plan); budget < 0 otherwise.
    int64_t budget = -1;              // B per (layer, KV head) for this prompt
    int64_t budget_entries = -1;      // heads * min(B, prompt tokens): what the prompt may keep
    bool budget_held = true;          // prompt_entries <= budget_entries
    bool chunked = false;             // eviction after every prefill chunk
    int64_t chunk = 0;                // prefill chunk (tokens per forward step)
    size_t prompt_peak_bound = 0;     // chunked: heads * (B + chunk) entries, in bytes
    EvictionStats eviction;           // policy calls, evicted entries, times

    // after / before in percent (0 for an empty prompt).
    double kept_percent() const;
};

// policy: the session's eviction policy itself (not a wrapper such as a coverage probe), or nullptr.
KvReport kv_report(const Session& session, const Evictor* policy, const GenerationStats& stats);

}  // namespace kvec
