// kvec serve: the OpenAI-compatible HTTP server (src/server, docs/server.md). Loads the model,
// sets up the slots and serves until SIGINT or SIGTERM.
#include <fmt/format.h>

#include <csignal>
#include <filesystem>
#include <memory>
#include <pthread.h>
#include <thread>

#include "commands.h"
#include "engine/generator.h"
#include "model/model.h"
#include "server/server.h"
#include "tensor/matmul.h"
#include "util/error.h"
#include "util/threads.h"

namespace kvec::tools {

namespace {

struct ServeOptions {
    std::string model;
    LoadMode load = LoadMode::Auto;
    server::ServerOptions server;
    int threads = 0;
    int ctx = 0;
    int64_t budget = 0;
    double ratio = 0.0;
    KvTypeFlags kv;
    std::string alias;
};

int serve(ServeOptions o, bool budget_given, bool ratio_given) {
    check_threads(o.threads);
    check_readable_file(o.model, "model file");
    if (o.ctx < 0) fail("--ctx-size must be positive, got {}", o.ctx);
    if (budget_given) o.server.budget = o.budget;
    if (ratio_given) o.server.ratio = o.ratio;
    o.server.session.n_ctx = o.ctx;
    o.server.session.kv_type_k = o.kv.key_type();
    o.server.session.kv_type_v = o.kv.value_type();
    o.server.model_id = o.alias.empty() ? std::filesystem::path(o.model).filename().string() : o.alias;
    o.server.log_requests = true;

    // SIGINT / SIGTERM stop the server from a thread of their own (blocked everywhere else).
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

    const auto [model, tokenizer] = open_model(o.model, o.load, o.threads);
    server::Server srv(*model, tokenizer, o.server);
    const int port = srv.bind();
    fmt::print(stderr, "model: {} ({})\n", o.model, model->summary());
    fmt::print(stderr, "threads: {}, context: {}, slots: {}, kv cache: {}, matmul: {}\n", num_threads(), srv.slots().n_ctx(),
               o.server.parallel, kv_types_name(o.server.session.kv_type_k, o.server.session.kv_type_v), matmul_backend_description());
    fmt::print(stderr, "policy: {} (requests without a kv object)\n",
               srv.default_policy().empty() ? std::string("none (full cache)") : srv.default_policy());
    fmt::print(stderr, "listening on http://{}:{}{}\n", o.server.host, port,
               o.server.api_key.empty() ? "" : " (API key required)");

    std::thread watcher([&] {
        int sig = 0;
        sigwait(&stop_signals, &sig);
        fmt::print(stderr, "kvec serve: signal {}, stopping\n", sig);
        srv.stop();
    });
    srv.run();
    // run() also returns if the listening socket fails: wake the watcher to end it.
    pthread_kill(watcher.native_handle(), SIGTERM);
    watcher.join();
    return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, Action& action) {
    auto o = std::make_shared<ServeOptions>();
    CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with a budgeted KV cache per request (docs/server.md)");
    cmd->add_option("-m,--model", o->model, "model file (GGUF)")->required();
    add_load_flags(cmd, o->load);
    cmd->add_option("--host", o->server.host, "address to listen on")->capture_default_str();
    cmd->add_option("--port", o->server.port, "port to listen on (0: any free port)")->capture_default_str();
    cmd->add_option("--parallel", o->server.parallel, "slots: requests served at once (more wait in a queue)")
        ->capture_default_str();
    cmd->add_option("--policy", o->server.policy,
                    "default eviction policy NAME[:opt=val,...] (see `kvec policies`); default: none (full cache)");
    cmd->add_option("--budget", o->budget, "default KV entries kept per KV head and layer (the policy's budget)");
    cmd->add_option("--ratio", o->ratio, "default budget as a fraction of the prompt length (the policy's ratio)");
    cmd->add_flag("--kv-reuse", o->server.kv_reuse,
                  "keep each conversation's cache in its slot after the request, and continue a later request whose "
                  "prompt starts with it from there (a request's \"kv\": {\"reuse\": false} opts out)");
    cmd->add_option("--kv-memory", o->server.kv_memory,
                    "bound on the KV-cache bytes of all slots together (e.g. 4GiB): requests reserve what they may "
                    "reach and wait in the queue until it fits (0: no bound)")
        ->transform(CLI::AsSizeValue(false));
    cmd->add_option("--queue-timeout", o->server.queue_timeout_s,
                    "seconds a request may wait for a slot and KV memory before it gets 503")
        ->capture_default_str();
    cmd->add_option("--slot-save-path", o->server.slot_save_path,
                    "directory where POST /slots/{id}?action=save|restore writes and reads kept conversations");
    cmd->add_option("--api-key", o->server.api_key, "require 'Authorization: Bearer KEY' on every endpoint but /health");
    cmd->add_option("--allowed-host", o->server.cross_site.allowed_hosts,
                    "a host name requests may be sent to besides IP addresses and localhost (repeatable; others get "
                    "403: DNS rebinding protection)");
    cmd->add_option("--allowed-origin", o->server.cross_site.allowed_origins,
                    "a web origin (scheme://host[:port]) whose pages may call the server from a browser (repeatable; "
                    "other origins get 403)");
    cmd->add_option("--alias", o->alias, "model name in /v1/models and responses (default: the file name)");
    cmd->add_option("-t,--threads", o->threads, "threads (default: all hardware threads)");
    cmd->add_option("-c,--ctx-size", o->ctx, "context size of every slot in tokens (default: the model's training context)");
    add_kv_type_flags(cmd, o->kv, "--kv-type,--cache-type");
    cmd->add_option("--timeout", o->server.read_timeout_s,
                    "seconds a client may take to send a whole request, from its first byte (and to read)")
        ->capture_default_str()
        ->check(CLI::Range(1, 86400));
    cmd->add_option("--max-connections", o->server.max_connections,
                    "open connections served at once (one thread each); more get 503")
        ->capture_default_str()
        ->check(CLI::Range(1, 65536));
    cmd->callback([o, cmd, &action] {
        const bool budget_given = cmd->count("--budget") > 0;
        const bool ratio_given = cmd->count("--ratio") > 0;
        if (cmd->count("--policy") > 0 && o->server.policy.empty()) {
            fail("--policy is empty (give a policy name; see `kvec policies`)");
        }
        o->server.write_timeout_s = o->server.read_timeout_s;
        action = [o, budget_given, ratio_given] { return serve(*o, budget_given, ratio_given); };
    });
}

}  // namespace kvec::tools
