// The endpoints: POST /v1/chat/completions, POST /v1/completions (whole or streamed),
// GET /v1/models (and /v1/models/{id}), GET /health, GET /metrics,
// POST /slots/{id}?action=save|restore|erase, and the web page at GET / (web/index.html).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include "index_html.h"
#include "server/api_error.h"
#include "server/completion.h"
#include "server/responses.h"
#include "server/server.h"
#include "server/sse.h"
#include "util/error.h"

namespace kvec::server {

using nlohmann::json;

namespace {

// What a request whose client went away gets (nginx's 499: nobody reads it; /metrics counts it).
ApiError client_closed() {
    return ApiError(499, "invalid_request_error", "client_closed_request",
                    "the client closed the connection before the response");
}

}  // namespace

void Server::add_routes() {
    router_.add("GET", "/", [](const http::Request&, http::Response& res) {
        res.set_header("Content-Security-Policy", "default-src 'self'; style-src 'unsafe-inline'; script-src 'unsafe-inline'");
        res.set_content(kIndexHtml, "text/html; charset=utf-8");
    });
    router_.add("GET", "/health", [this](const http::Request&, http::Response& res) {
        const json body = {{"status", "ok"},
                           {"slots_idle", slots_->size() - slots_->busy()},
                           {"slots_processing", slots_->busy()},
                           {"queue_length", slots_->queued()}};
        res.set_content(dump(body), "application/json");
    });
    router_.add("GET", "/v1/models", [this](const http::Request&, http::Response& res) {
        res.set_content(dump(models_json(options_.model_id, started_, slots_->n_ctx())), "application/json");
    });
    router_.add("GET", "/v1/models/(.+)", [this](const http::Request& req, http::Response& res) {
        if (req.matches[1] != options_.model_id) {
            throw ApiError(404, "invalid_request_error", "model_not_found",
                           fmt::format("no model '{}' here: this server serves '{}'", req.matches[1].substr(0, 200),
                                       options_.model_id));
        }
        res.set_content(dump(models_json(options_.model_id, started_, slots_->n_ctx()).at("data").at(0)),
                        "application/json");
    });
    router_.add("GET", "/metrics", [this](const http::Request&, http::Response& res) {
        res.set_content(metrics_.render(*slots_), "text/plain; version=0.0.4");
    });
    router_.add("POST", "/v1/chat/completions", [this](const http::Request& req, http::Response& res) {
        complete(req, res, Endpoint::Chat);
    });
    router_.add("POST", "/v1/completions", [this](const http::Request& req, http::Response& res) {
        complete(req, res, Endpoint::Completion);
    });
    router_.add("POST", R"(/slots/(\d{1,9}))", [this](const http::Request& req, http::Response& res) {
        slot_action(req, res);
    });
}

void Server::complete(const http::Request& req, http::Response& res, Endpoint endpoint) {
    // Everything that can be wrong with the request is found here, before a slot is taken.
    auto prepared = std::make_shared<PreparedRequest>(
        prepare_request(parse_request(req.body, endpoint, defaults_), tokenizer_, slots_->n_ctx()));
    // A client that goes away while its request waits or prefills frees the queue place or slot
    // then, not when the answer would be written.
    std::function<bool()> gone = req.client_gone;
    if (prepared->request.stream) {
        stream(prepared, res, std::move(gone));
        return;
    }
    const ResponseHeader header = make_header(endpoint, options_.model_id);
    SlotLease lease = acquire(*prepared, gone);
    const CompletionResult r = run_completion(*prepared, tokenizer_, lease, slots_->scheduler(), {}, gone);
    metrics_.count_generation(r.prompt_tokens - r.cached_tokens, r.completion_tokens, r.kv.eviction.evicted, r.seconds);
    if (r.reason == StopReason::Cancelled) throw client_closed();
    const json body = completion_json(header, r.text, r.reason,
                                      usage_json(r.prompt_tokens, r.completion_tokens, r.cached_tokens),
                                      kv_json(r.kv, r.kv_spec, r.slot, r.picture));
    res.set_content(dump(body), "application/json");
}

SlotLease Server::acquire(const PreparedRequest& p, const std::function<bool()>& gone) {
    SlotRequest r;
    r.prompt = p.prompt_tokens;
    r.reuse_spec = p.request.kv.reuse ? &p.request.kv.spec : nullptr;
    const KvReservation kv = kv_reservation(p, model_, options_.session, slots_->n_ctx());
    r.kv_bytes = kv.peak;
    r.kv_steady_bytes = kv.steady;
    r.reserve_reused = [&](int32_t reuse, size_t kept_bytes) {
        const KvReservation k = kv_reservation(p, model_, options_.session, slots_->n_ctx(), reuse, kept_bytes);
        return std::pair(k.peak, k.steady);
    };
    r.timeout = std::chrono::seconds(options_.queue_timeout_s);
    r.gone = gone;
    r.slot = p.request.id_slot;
    if (r.slot >= slots_->size()) {
        bad_request("invalid_value", "'id_slot' is {}, but the server has slots 0 to {}", r.slot, slots_->size() - 1);
    }
    try {
        return slots_->acquire(r);
    } catch (const SlotPool::Gone&) {
        throw client_closed();
    } catch (const SlotPool::Timeout& e) {
        throw ApiError(503, "server_error", "server_busy", fmt::format("the server is busy: {}; try again", e.what()))
            .retry_after(std::max(1, options_.queue_timeout_s / 4));
    } catch (const Error& e) {
        bad_request("kv_memory_exceeded", "{}", e.what());
    }
}

void Server::stream(std::shared_ptr<PreparedRequest> prepared, http::Response& res, std::function<bool()> gone) {
    // The slot (and KV memory) is taken before the response starts, so that a request that
    // cannot have one gets its error status (503 after the queue timeout). The provider runs after
    // the headers are sent; a client gone by then releases the slot at its first write.
    auto lease = std::make_shared<std::optional<SlotLease>>(acquire(*prepared, gone));
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_header("Content-Type", "text/event-stream");
    res.stream = [this, prepared, lease, gone](const http::ChunkWriter& write) {
        SseStream out(write);
        const ResponseHeader header = make_header(prepared->request.endpoint, options_.model_id);
        try {
            if (!out.send(role_chunk(header))) {
                lease->reset();
                return;
            }
            const CompletionResult r = run_completion(*prepared, tokenizer_, **lease, slots_->scheduler(),
                                                      [&](std::string_view text) {
                                                          return out.send(text_chunk(header, std::string(text)));
                                                      },
                                                      gone);
            lease->reset();  // the slot is free (or keeps the conversation) before the client hears the end
            metrics_.count_generation(r.prompt_tokens - r.cached_tokens, r.completion_tokens, r.kv.eviction.evicted,
                                      r.seconds);
            if (!out.open()) return;  // the client has gone
            const json usage = usage_json(r.prompt_tokens, r.completion_tokens, r.cached_tokens);
            out.send(final_chunk(header, r.reason, usage, kv_json(r.kv, r.kv_spec, r.slot, r.picture)));
            if (prepared->request.include_usage) out.send(usage_chunk(header, usage));
        } catch (const std::exception& e) {
            // The status (200) is sent: the error goes into the stream, without details.
            lease->reset();
            std::fprintf(stderr, "kvec serve: stream failed: %s\n", e.what());
            out.send(json::parse(error_body("internal server error", "server_error", "internal_error")));
        }
        out.done();
    };
}

}  // namespace kvec::server
