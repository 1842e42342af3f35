#include "server/server.h"

#include <httplib.h>
#include <sys/socket.h>

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

void set_error(httplib::Response& res, int status, const std::string& message, const std::string& code) {
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
        const std::string folded = policy::add_policy_options(options_.policy, overrides);
        policy::make_policy(folded);
        default_policy_ = policy::policy_options(folded).canonical();
    }
    started_ = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    http_ = std::make_unique<httplib::Server>();
    configure();
    add_routes();
}

Server::~Server() { stop(); }

void Server::configure() {
    const int threads = options_.http_threads > 0 ? options_.http_threads : options_.parallel + 8;
    http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    http_->set_payload_max_length(options_.max_body_bytes);
    http_->set_read_timeout(options_.read_timeout_s, 0);
    http_->set_write_timeout(options_.write_timeout_s, 0);
    http_->set_keep_alive_timeout(5);
    // httplib's default sets SO_REUSEPORT, with which a second server binds the same port and
    // silently takes half of its connections. SO_REUSEADDR only: a port in use is an error.
    http_->set_socket_options([this](socket_t sock) {
        int yes = 1;
        ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
        listen_socket_ = sock;
    });

    // Before any route: cross-site protection (cross_site.h), then, with --api-key, the key on
    // every endpoint but /health and the page itself (static; its requests carry the key the user
    // types in).
    http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        // The body is not read yet here: a body is announced by its length or by chunks.
        const std::string length = req.get_header_value("Content-Length");
        const bool has_body = (!length.empty() && length.find_first_not_of('0') != std::string::npos) ||
                              req.has_header("Transfer-Encoding");
        if (const auto refused = check_cross_site(req.get_header_value("Host"), req.get_header_value("Origin"),
                                                  req.get_header_value("Content-Type"), has_body, options_.cross_site)) {
            set_error(res, refused->status, refused->message, refused->code);
            return httplib::Server::HandlerResponse::Handled;
        }
        if (options_.api_key.empty() || req.path == "/health" || (req.path == "/" && req.method == "GET")) {
            return httplib::Server::HandlerResponse::Unhandled;
        }
        const std::string auth = req.get_header_value("Authorization");
        const std::string prefix = "Bearer ";
        if (auth.compare(0, prefix.size(), prefix) == 0 && same_secret(auth.substr(prefix.size()), options_.api_key)) {
            return httplib::Server::HandlerResponse::Unhandled;
        }
        set_error(res, 401, "invalid or missing API key (send 'Authorization: Bearer KEY')", "invalid_api_key");
        res.set_header("WWW-Authenticate", "Bearer");
        return httplib::Server::HandlerResponse::Handled;
    });
    // Statuses httplib sets itself (404 no route, 413 body too large, 400 bad request line) get
    // an OpenAI-style body; bodies the handlers wrote are left alone.
    const size_t max_body = options_.max_body_bytes;
    http_->set_error_handler(httplib::Server::HandlerWithResponse([max_body](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        switch (res.status) {
            case 404: set_error(res, 404, "no such endpoint", "not_found"); break;
            case 405: set_error(res, 405, "method not allowed on this endpoint", "method_not_allowed"); break;
            case 413: set_error(res, 413, fmt::format("the request body is larger than the {} bytes the server accepts", max_body), "request_too_large"); break;
            default: set_error(res, res.status, fmt::format("HTTP error {}", res.status), "http_error"); break;
        }
        return httplib::Server::HandlerResponse::Handled;
    }));
    // Anything a handler throws: 500 without details (they may name files); stderr has them.
    http_->set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
            std::rethrow_exception(ep);
        } catch (const ApiError& e) {
            res.status = e.status();
            if (e.retry_after() > 0) res.set_header("Retry-After", std::to_string(e.retry_after()));
            res.set_content(error_body(e), "application/json");
            return;
        } catch (const std::exception& e) {
            what = e.what();
        } catch (...) {
        }
        std::fprintf(stderr, "kvec serve: %s %s failed: %s\n", req.method.c_str(), req.path.c_str(), what.c_str());
        set_error(res, 500, "internal server error", "internal_error");
    });
    // Counted before the response is written (a client that reads /metrics right after its
    // response sees it counted); logged after.
    http_->set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        metrics_.count_request(req.path, res.status);
    });
    http_->set_logger([this](const httplib::Request& req, const httplib::Response& res) {
        if (options_.log_requests) {
            std::fprintf(stderr, "kvec serve: %s %s %d\n", req.method.c_str(), path_label(req.path).c_str(), res.status);
        }
    });
}

int Server::bind() {
    if (options_.port == 0) {
        const int port = http_->bind_to_any_port(options_.host);
        if (port < 0) fail("cannot bind to {} (any port)", options_.host);
        options_.port = port;
    } else if (!http_->bind_to_port(options_.host, options_.port)) {
        fail("cannot bind to {}:{} (in use, or not an address of this machine)", options_.host, options_.port);
    }
    // cpp-httplib 0.11 listens with a backlog of 5: a burst of more clients than that overflows
    // the accept queue and some of them see their connection reset. listen() again raises it.
    if (listen_socket_ >= 0) ::listen(listen_socket_, SOMAXCONN);
    return options_.port;
}

void Server::run() { http_->listen_after_bind(); }

bool Server::running() const { return http_->is_running(); }

void Server::stop() {
    if (http_) http_->stop();
}

}  // namespace kvec::server
