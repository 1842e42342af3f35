// `kvec serve`: an OpenAI-compatible HTTP server over one model, with --parallel N slots that
// each hold a conversation's KV cache under the request's eviction policy and budget. See
// docs/server.md for the endpoints.
//
// Threads: the transport (http.h) gives each connection a thread; a completion waits for a free
// slot (SlotPool), then generates on its connection's thread, taking the forward lock for each
// forward step.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "model/model.h"
#include "model/session.h"
#include "server/cross_site.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/request.h"
#include "server/slots.h"
#include "tokenizer/tokenizer.h"

namespace kvec::server {

struct PreparedRequest;

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8080;                       // 0: any free port (see Server::bind)
    int parallel = 1;                      // slots
    std::string api_key;                   // "": no authentication
    std::string model_id;                  // the name /v1/models lists and responses carry
    std::string policy;                    // default eviction policy SPEC ("" = full cache)
    std::optional<int64_t> budget;         // default --budget
    std::optional<double> ratio;           // default --ratio
    SessionOptions session;                // context (-c), prefill chunk, cache element type
    int max_connections = 256;             // open connections (--max-connections); beyond, 503
    size_t max_header_bytes = size_t{32} << 10;  // request line and headers; larger get 431
    size_t max_body_bytes = size_t{8} << 20;  // larger request bodies get 413
    int read_timeout_s = 30;               // a request's headers and body must arrive within this
    int write_timeout_s = 30;              // a client that stops reading for this long is dropped
    bool log_requests = false;             // one line per request on stderr
    bool kv_reuse = false;                 // kv.reuse's default (--kv-reuse)
    size_t kv_memory = 0;                  // bound on the KV bytes of all slots (--kv-memory; 0: none)
    int queue_timeout_s = 60;              // a queued request gets 503 after this long
    std::string slot_save_path;            // directory of slot save / restore ("": off)
    CrossSitePolicy cross_site;            // --allowed-host / --allowed-origin (cross_site.h)
};

class Server {
public:
    // Checks the options (kvec::Error naming the problem: --parallel < 1, an unknown default
    // policy, ...) and sets up the slots; serves nothing until bind() and run().
    Server(const Model& model, const Tokenizer& tokenizer, ServerOptions options);
    ~Server();
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    // Binds host:port (port 0: a free port). Returns the port; kvec::Error if it cannot bind.
    int bind();
    // Serves until stop() (from another thread or a signal-watching thread).
    void run();
    void stop();
    bool running() const;  // run() is accepting connections

    const ServerOptions& options() const { return options_; }
    // The policy of a request without `kv`, canonical ("" = full cache).
    const std::string& default_policy() const { return default_policy_; }
    SlotPool& slots() { return *slots_; }
    const Metrics& metrics() const { return metrics_; }

private:
    // Every request: cross-site checks, the API key, the route, errors as OpenAI-style bodies,
    // metrics and the log line (server.cpp).
    void handle(http::Request& req, http::Response& res);
    // What the transport refuses itself (400, 408, 413, 431, 503), the same way.
    void refuse(const http::Request& req, int status, std::string_view why, http::Response& res);
    void add_routes();      // the endpoints (routes.cpp)
    void complete(const http::Request& req, http::Response& res, Endpoint endpoint);
    void stream(std::shared_ptr<PreparedRequest> request, http::Response& res, std::function<bool()> gone);
    // A slot, the kept conversation it continues; ApiError 503 after the queue timeout, 499 when
    // `gone` says the client went away while it waited.
    SlotLease acquire(const PreparedRequest& request, const std::function<bool()>& gone);
    void slot_action(const http::Request& req, http::Response& res);  // POST /slots/{id} (slot_files.cpp)
    const std::string& model_sha256();  // of the model file, computed at the first slot save or restore

    const Model& model_;
    const Tokenizer& tokenizer_;
    ServerOptions options_;
    RequestDefaults defaults_;
    std::string default_policy_;
    std::unique_ptr<SlotPool> slots_;
    Metrics metrics_;
    http::Router router_;
    std::unique_ptr<http::HttpServer> http_;
    int64_t started_ = 0;  // Unix time
    std::once_flag model_sha256_once_;
    std::string model_sha256_;
};

}  // namespace kvec::server
