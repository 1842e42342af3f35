// Parsing and validation of the bodies of POST /v1/chat/completions and POST /v1/completions:
// every field the server reads is checked for its type and range, and every problem becomes a
// 400 ApiError naming the field, before any work is done. Fields of the OpenAI API the server
// does not read are ignored, except those whose absence would change the answer (n > 1,
// logprobs, tools), which are refused.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvcache/eviction.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace kvec::server {

enum class Endpoint { Chat, Completion };

// The server's KV-cache defaults (its --policy, --budget, --ratio) and limits.
struct RequestDefaults {
    int32_t n_ctx = 0;             // context of every slot: max_tokens may not exceed it
    std::string policy;            // --policy SPEC; "" = full cache
    std::optional<int64_t> budget; // --budget
    std::optional<double> ratio;   // --ratio
    bool reuse = false;            // --kv-reuse: kv.reuse's default
};

// The KV cache a request asked for, resolved against the server's defaults.
struct KvChoice {
    std::string spec;                   // canonical "name:key=value,..."; "" = full cache, no policy
    std::shared_ptr<Evictor> policy;    // the policy, made and validated; nullptr with spec ""
    bool reuse = false;                 // continue from a slot's kept conversation, and keep this one
    bool map = false;                   // the response's kv carries the map of kept prompt positions
};

// The `kv` extension object (or nullptr when absent), resolved: {"policy": SPEC, "budget": B,
// "ratio": R, "reuse": BOOL, "map": BOOL}; policy "none" is the full cache. A request's budget or ratio replaces the
// server's; without either, the server's --budget / --ratio apply to a policy that takes them.
// ApiError 400 (code "invalid_kv") for a wrong type, an unknown field, an unknown policy or
// option, or a budget the policy does not accept.
KvChoice resolve_kv(const nlohmann::json* kv, const RequestDefaults& defaults);

struct CompletionRequest {
    Endpoint endpoint = Endpoint::Chat;
    std::string model;                    // as the client named it ("" if absent)
    std::vector<ChatMessage> messages;    // chat
    std::string prompt;                   // completion
    int32_t max_tokens = -1;              // -1: until end of generation or a full context
    SamplerParams sampling;
    std::vector<std::string> stop;
    bool stream = false;
    bool include_usage = false;           // stream_options.include_usage: a last chunk with usage
    int32_t id_slot = -1;                 // llama-server's id_slot: the slot to run on (-1: any)
    KvChoice kv;
};

// Parses and validates a request body (ApiError 400 for anything wrong). A missing seed is drawn
// at random.
CompletionRequest parse_request(std::string_view body, Endpoint endpoint, const RequestDefaults& defaults);

// The request body as JSON; ApiError 400 invalid_json naming the byte where it stops being JSON,
// with none of the body echoed (a 20 MB unterminated string is not sent back) and no parser
// internals. `hint` ends the message (what to send instead), may be empty.
nlohmann::json parse_json_body(std::string_view body, std::string_view hint = "");

}  // namespace kvec::server
