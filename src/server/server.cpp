#include "server/server.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "engine/generator.h"
#include "policy/registry.h"
#include "server/api_error.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace kvec::server {

namespace {

// Compares without an early exit, so that the time taken says nothing about the key.
bool same_secret(const std::string& a, const std::string& b) {
    unsigned diff = a.size() == b.size() ? 0u : 1u;
    for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(i < b.size() ? b[i] : 0);
    return diff == 0;
}

void set_error(http::Response& res, int status, const std::string& message, const std::string& code) {
    res.status = status;
    res.set_content(error_body(message, error_type_for_status(status), code), "application/json");
}

}  // namespace

Server::Server(const Model& model, const Tokenizer& tokenizer, ServerOptions options)
    : model_(model), tokenizer_(tokenizer), options_(std::move(options)) {
    if (options_.parallel < 1) fail("--parallel must be at least 1, got {}", options_.parallel);
    if (options_.port < 0 || options_.port > 65535) fail("--port must be in [0, 65535], got {}", options_.port);
    if (options_.budget && options_.ratio) fail("give either --budget or --ratio, not both");
    if ((options_.budget || options_.ratio) && options_.policy.empty()) {
        fail("--budget and --ratio need an eviction policy (--policy NAME)");
    }
    check_tokenizer_fits(tokenizer, model.config().n_vocab);
    if (options_.queue_timeout_s < 1) fail("--queue-timeout must be at least 1 second, got {}", options_.queue_timeout_s);
    slots_ = std::make_unique<SlotPool>(model, options_.session, options_.parallel, options_.kv_memory);
    defaults_.n_ctx = slots_->n_ctx();
    defaults_.policy = options_.policy;
    defaults_.budget = options_.budget;
    defaults_.ratio = options_.ratio;
    defaults_.reuse = options_.kv_reuse;
    if (!options_.slot_save_path.empty()) {
        std::error_code ec;
        if (!std::filesystem::is_directory(options_.slot_save_path, ec)) {
            fail("--slot-save-path {}: not a directory", options_.slot_save_path);
        }
        options_.slot_save_path = std::filesystem::canonical(options_.slot_save_path, ec).string();
        if (const int stale = remove_stale_temporaries(options_.slot_save_path); stale > 0) {
            std::fprintf(stderr, "kvec serve: removed %d unfinished slot file(s) from %s (saves killed before they "
                         "completed)\n", stale, options_.slot_save_path.c_str());
        }
    }
    if (!options_.policy.empty()) {
        // The defaults as a request without `kv` gets them: an unknown policy or option, or a
        // budget the policy refuses, stops the server at start rather than failing every request.
        std::vector<policy::OptionOverride> overrides;
        if (options_.budget) overrides.push_back({"budget", std::to_string(*options_.budget), "--budget"});
        if (options_.ratio) overrides.push_back({"ratio", fmt::format("{}", *options_.ratio), "--ratio"});
        default_policy_ = policy::resolve(options_.policy, overrides).spec;
    }
    started_ = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    add_routes();
    http::Limits limits;
    limits.max_header_bytes = options_.max_header_bytes;
    limits.max_body_bytes = options_.max_body_bytes;
    limits.request_timeout_s = options_.read_timeout_s;
    limits.write_timeout_s = options_.write_timeout_s;
    limits.max_connections = options_.max_connections;
    http_ = std::make_unique<http::HttpServer>(
        limits, [this](http::Request& req, http::Response& res) { handle(req, res); },
        [this](const http::Request& req, int status, std::string_view why, http::Response& res) {
            refuse(req, status, why, res);
        });
}

Server::~Server() { stop(); }

void Server::handle(http::Request& req, http::Response& res) {
    try {
        // Before any route: cross-site protection (cross_site.h), then, with --api-key, the key
        // on every endpoint but /health and the page itself (static; its requests carry the key
        // the user types in).
        const bool has_body = !req.body.empty() || req.has_header("Transfer-Encoding");
        if (const auto refused = check_cross_site(req.header("Host"), req.header("Origin"), req.header("Content-Type"),
                                                  has_body, options_.cross_site)) {
            set_error(res, refused->status, refused->message, refused->code);
        } else if (!options_.api_key.empty() && req.path != "/health" && !(req.path == "/" && req.method == "GET") &&
                   !(req.header("Authorization").rfind("Bearer ", 0) == 0 &&
                     same_secret(req.header("Authorization").substr(7), options_.api_key))) {
            set_error(res, 401, "invalid or missing API key (send 'Authorization: Bearer KEY')", "invalid_api_key");
            res.set_header("WWW-Authenticate", "Bearer");
        } else if (int status = 0; !router_.dispatch(req, res, status)) {
            if (status == 405) {
                set_error(res, 405, "method not allowed on this endpoint", "method_not_allowed");
            } else {
                set_error(res, 404, "no such endpoint", "not_found");
            }
        }
    } catch (const ApiError& e) {
        res = http::Response{};
        res.status = e.status();
        if (e.retry_after() > 0) res.set_header("Retry-After", std::to_string(e.retry_after()));
        res.set_content(error_body(e), "application/json");
    } catch (const std::exception& e) {
        // Anything else a handler throws: 500 without details (they may name files); stderr has them.
        std::fprintf(stderr, "kvec serve: %s %s failed: %s\n", req.method.c_str(), req.path.c_str(), e.what());
        res = http::Response{};
        set_error(res, 500, "internal server error", "internal_error");
    }
    // Counted before the response is written (a client that reads /metrics right after its
    // response sees it counted).
    metrics_.count_request(req.path, res.status);
    if (options_.log_requests) {
        std::fprintf(stderr, "kvec serve: %s %s %d\n", req.method.c_str(), path_label(req.path).c_str(), res.status);
    }
}

void Server::refuse(const http::Request& req, int status, std::string_view why, http::Response& res) {
    switch (status) {
        case 408: set_error(res, 408, fmt::format("the request did not arrive within {} s", options_.read_timeout_s), "request_timeout"); break;
        case 413: set_error(res, 413, fmt::format("the request body is larger than the {} bytes the server accepts", options_.max_body_bytes), "request_too_large"); break;
        case 431: set_error(res, 431, fmt::format("the request line and headers are larger than the {} bytes the server accepts", options_.max_header_bytes), "headers_too_large"); break;
        case 503: set_error(res, 503, std::string(why), "server_busy"); break;
        default: set_error(res, status, fmt::format("malformed HTTP request: {}", why), "bad_request"); break;
    }
    if (!req.path.empty()) metrics_.count_request(req.path, status);
    if (options_.log_requests) {
        std::fprintf(stderr, "kvec serve: %s %s %d (%.*s)\n", req.method.empty() ? "-" : req.method.c_str(),
                     req.path.empty() ? "-" : path_label(req.path).c_str(), status, static_cast<int>(why.size()), why.data());
    }
}

int Server::bind() {
    options_.port = http_->bind(options_.host, options_.port);
    return options_.port;
}

void Server::run() { http_->run(); }

bool Server::running() const { return http_->running(); }

void Server::stop() {
    if (http_) http_->stop();
}

}  // namespace kvec::server
