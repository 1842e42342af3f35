// One completion on a slot: the request's prompt tokenized (the chat template applied exactly as
// `kvec run --chat` applies it) and checked against the context, then generated on a leased
// slot with the request's policy, streaming its text, and summarised (tokens, finish reason,
// what the KV cache did).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/generator.h"
#include "engine/kv_report.h"
#include "server/request.h"
#include "server/responses.h"
#include "server/slots.h"

namespace kvec::server {

struct PreparedRequest {
    CompletionRequest request;
    GenerateOptions options;             // what the generator runs (prompt, sampling, stop, limit)
    std::vector<int32_t> prompt_tokens;  // the prompt as the model sees it
};

// ApiError 400 when the prompt does not tokenize (no chat template, a role the template refuses)
// or has more tokens than the context holds (code "context_length_exceeded").
PreparedRequest prepare_request(CompletionRequest request, const Tokenizer& tokenizer, int32_t n_ctx);

// The KV bytes a request may reach on a slot (what --kv-memory reserves): (layers x KV heads) x
// entries x bytes per entry (key and value rows of the cache types, position, the policy's scores),
// with the decode growth of an allocation (max(16 entries, 1/8)). Entries per head:
//   peak    while the prompt runs: the prompt for the full cache or a policy that compresses once
//           the whole prompt is in, at most B + one prefill chunk for a budgeted policy that evicts
//           chunk by chunk; plus max_tokens (the rest of the context without a limit) for the full
//           cache and policies without a budget;
//   steady  from the first decode step on: min(B, prompt) + max_tokens for a budgeted policy
//           (what it keeps of the prompt and what the answer adds), the peak otherwise.
// A budgeted request continuing `reuse` prompt tokens of a slot's kept conversation (which holds
// kept_bytes) peaks at kept_bytes plus the rest of the prompt (one chunk with chunked=true): only
// that rest is prefilled, on top of the compressed cache.
struct KvReservation {
    size_t peak = 0;
    size_t steady = 0;
};
KvReservation kv_reservation(const PreparedRequest& request, const Model& model, const SessionOptions& options,
                             int32_t n_ctx, int32_t reuse = 0, size_t kept_bytes = 0);

// Which prompt positions (< n_prompt) the session's cache holds, per layer and KV head: coverage
// always, the (start, length) runs with `runs`.
KvPicture kv_picture(const Session& session, int32_t n_prompt, bool runs);

struct CompletionResult {
    std::string text;
    StopReason reason = StopReason::Length;
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;
    int64_t cached_tokens = 0;  // prompt tokens reused from the slot's kept conversation
    KvReport kv;
    KvPicture picture;    // coverage of the prompt at the end (and the map with kv.map)
    std::string kv_spec;  // the policy as run ("" = full cache)
    int slot = 0;
    double seconds = 0;   // prefill + decode wall time
};

// Generates on the leased slot: continuing its kept conversation (the lease's reuse(), under the
// kept policy), or with its session reset and the request's policy attached. With kv.reuse the
// slot keeps the conversation afterwards (not after a policy that re-positions the cache, whose
// tokens no longer follow the text). on_text gets
// the text as it becomes final and returns false when nobody is listening any more; the
// generation then stops before its next forward step (StopReason::Cancelled), as it does when
// `gone` (asked before every forward step: each prefill chunk and decode step) says the client
// went away. Forward steps take the scheduler (batched with the other slots' steps). kvec::Error
// from the engine propagates.
CompletionResult run_completion(const PreparedRequest& request, const Tokenizer& tokenizer, SlotLease& lease,
                                StepScheduler& scheduler, const std::function<bool(std::string_view)>& on_text,
                                const std::function<bool()>& gone = {});

}  // namespace kvec::server
