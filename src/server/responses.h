// The OpenAI response objects the server sends: chat.completion, text_completion, their stream
// chunks (chat.completion.chunk), usage, the model list, and the `kv` extension object that
// says what the KV cache did.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "engine/generator.h"
#include "engine/kv_report.h"
#include "server/request.h"

namespace kvec::server {

// What identifies one response in every object and chunk of it.
struct ResponseHeader {
    std::string id;       // "chatcmpl-..." or "cmpl-..."
    int64_t created = 0;  // Unix time
    std::string model;    // the served model's id
    Endpoint endpoint = Endpoint::Chat;
};
ResponseHeader make_header(Endpoint endpoint, const std::string& model);

// "stop" (end of generation, a stop string), "length" (max_tokens, a full context), "cancelled".
const char* finish_reason(StopReason reason);

// cached_tokens: prompt tokens taken from the slot's kept conversation (prompt_tokens_details).
nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens = 0);
// What the cache holds of the prompt at the end of a request (kv_picture in completion.h).
struct KvPicture {
    int32_t n_prompt = 0;
    double coverage = 0;                 // prompt positions kept by some head of some layer / n_prompt
    std::vector<double> layer_coverage;  // [n_layer] prompt positions kept by some head of the layer / n_prompt
    // [n_layer][n_head_kv] kept prompt positions as (start, length) pairs; empty unless kv.map.
    std::vector<std::vector<std::vector<int32_t>>> runs;
};

// spec: the policy as run ("" for the full cache); slot: the slot that ran it; picture: coverage
// (and, with runs, the map of kept positions per layer and KV head).
nlohmann::json kv_json(const KvReport& report, const std::string& spec, int slot, const KvPicture& picture);

// A whole (non-streamed) response.
nlohmann::json completion_json(const ResponseHeader& h, const std::string& text, StopReason reason,
                               const nlohmann::json& usage, const nlohmann::json& kv);

// Stream chunks: the first (chat: the assistant role), one per piece of text, the last (finish
// reason, usage and kv), and the usage chunk of stream_options.include_usage (no choices).
nlohmann::json role_chunk(const ResponseHeader& h);
nlohmann::json text_chunk(const ResponseHeader& h, const std::string& text);
nlohmann::json final_chunk(const ResponseHeader& h, StopReason reason, const nlohmann::json& usage,
                           const nlohmann::json& kv);
nlohmann::json usage_chunk(const ResponseHeader& h, const nlohmann::json& usage);

// GET /v1/models.
nlohmann::json models_json(const std::string& model, int64_t created, int32_t n_ctx);

// JSON text of a response; invalid UTF-8 (never produced by the decoder) would become U+FFFD.
std::string dump(const nlohmann::json& j);

}  // namespace kvec::server
