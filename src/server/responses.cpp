#include "server/responses.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <random>

namespace kvec::server {

using nlohmann::json;

ResponseHeader make_header(Endpoint endpoint, const std::string& model) {
    static std::atomic<uint64_t> counter{0};
    static const uint64_t salt = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
    ResponseHeader h;
    h.endpoint = endpoint;
    h.model = model;
    h.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    h.id = fmt::format("{}-{:016x}{:08x}", endpoint == Endpoint::Chat ? "chatcmpl" : "cmpl", salt, counter.fetch_add(1) + 1);
    return h;
}

const char* finish_reason(StopReason reason) {
    switch (reason) {
        case StopReason::EndOfGeneration:
        case StopReason::StopString: return "stop";
        case StopReason::Length:
        case StopReason::ContextFull: return "length";
        case StopReason::Cancelled: return "cancelled";
    }
    return "stop";
}

json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
    return {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

json kv_json(const KvReport& r, const std::string& spec, int slot, const KvPicture& picture) {
    json kv = {{"policy", spec.empty() ? "none" : spec},
               {"slot", slot},
               {"entries_before", r.full_entries},
               {"bytes_before", r.full_bytes},
               {"entries_after", r.prompt_entries},
               {"bytes_after", r.prompt_bytes},
               {"entries_end", r.end_entries},
               {"bytes_end", r.end_bytes},
               {"peak_bytes", r.peak_bytes},
               {"prompt_peak_bytes", r.prompt_peak_bytes},
               {"evicted", r.eviction.evicted},
               {"budget", nullptr},
               {"budget_entries", nullptr},
               {"budget_held", nullptr}};
    if (r.budget >= 0) {
        kv["budget"] = r.budget;
        kv["budget_entries"] = r.budget_entries;
        kv["budget_held"] = r.budget_held;
    }
    if (r.chunked) {
        kv["prompt_peak_bound_bytes"] = r.prompt_peak_bound;
    }
    kv["coverage"] = picture.coverage;
    kv["layer_coverage"] = picture.layer_coverage;
    if (!picture.runs.empty()) kv["map"] = {{"n_prompt", picture.n_prompt}, {"runs", picture.runs}};
    return kv;
}

namespace {

json base(const ResponseHeader& h, const char* object) {
    return {{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}

const char* chunk_object(const ResponseHeader& h) {
    return h.endpoint == Endpoint::Chat ? "chat.completion.chunk" : "text_completion";
}

json chunk_choice(const ResponseHeader& h, const json& text_or_delta, const json& reason) {
    if (h.endpoint == Endpoint::Chat) {
        return {{"index", 0}, {"delta", text_or_delta}, {"logprobs", nullptr}, {"finish_reason", reason}};
    }
    return {{"index", 0}, {"text", text_or_delta}, {"logprobs", nullptr}, {"finish_reason", reason}};
}

}  // namespace

json completion_json(const ResponseHeader& h, const std::string& text, StopReason reason, const json& usage,
                     const json& kv) {
    json r = base(h, h.endpoint == Endpoint::Chat ? "chat.completion" : "text_completion");
    json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason(reason)}};
    if (h.endpoint == Endpoint::Chat) {
        choice["message"] = {{"role", "assistant"}, {"content", text}};
    } else {
        choice["text"] = text;
    }
    r["choices"] = json::array({choice});
    r["usage"] = usage;
    r["kv"] = kv;
    return r;
}

json role_chunk(const ResponseHeader& h) {
    json r = base(h, chunk_object(h));
    r["choices"] = json::array({chunk_choice(h, h.endpoint == Endpoint::Chat ? json{{"role", "assistant"}, {"content", ""}} : json(""), nullptr)});
    return r;
}

json text_chunk(const ResponseHeader& h, const std::string& text) {
    json r = base(h, chunk_object(h));
    r["choices"] = json::array({chunk_choice(h, h.endpoint == Endpoint::Chat ? json{{"content", text}} : json(text), nullptr)});
    return r;
}

json final_chunk(const ResponseHeader& h, StopReason reason, const json& usage, const json& kv) {
    json r = base(h, chunk_object(h));
    r["choices"] = json::array({chunk_choice(h, h.endpoint == Endpoint::Chat ? json::object() : json(""), finish_reason(reason))});
    r["usage"] = usage;
    r["kv"] = kv;
    return r;
}

json usage_chunk(const ResponseHeader& h, const json& usage) {
    json r = base(h, chunk_object(h));
    r["choices"] = json::array();
    r["usage"] = usage;
    return r;
}

json models_json(const std::string& model, int64_t created, int32_t n_ctx) {
    return {{"object", "list"},
            {"data", json::array({{{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "kvec"},
                                   {"meta", {{"n_ctx", n_ctx}}}}})}};
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace kvec::server
