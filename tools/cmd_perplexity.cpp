// kvec perplexity: llama.cpp's perplexity semantics (chunks of -c tokens, the second half of each
// chunk scored), optionally with an eviction policy compressing each chunk's first half. The
// computation is in src/eval/fidelity.h; see docs/evaluation.md for exactly what is scored.
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>

#include "commands.h"
#include "engine/generator.h"
#include "eval/fidelity.h"
#include "eval/sweep.h"
#include "model/model.h"
#include "model/session.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/timer.h"
#include "util/threads.h"

namespace kvec::tools {

namespace {

struct PerplexityCmdOptions {
    std::string model;
    LoadMode load = LoadMode::Auto;
    std::string file;
    int ctx = 512;
    int chunks = -1;
    bool chunks_given = false;
    int score_last = 0;
    int threads = 0;
    int batch = 512;
    KvTypeFlags kv;
    std::string policy;
    int64_t budget = 0;
};

int run_perplexity(const PerplexityCmdOptions& o) {
    check_readable_file(o.model, "model file");
    check_readable_file(o.file, "text file");
    if (o.ctx < 4) fail("--ctx-size must be at least 4, got {}", o.ctx);
    if (o.batch <= 0) fail("--batch-size must be positive, got {}", o.batch);
    if (o.budget < 0) fail("--budget must be positive, got {}", o.budget);
    if (o.chunks_given && o.chunks < 1) fail("--chunks must be at least 1, got {}", o.chunks);
    check_threads(o.threads);
    std::string spec;
    if (!o.policy.empty()) {
        const std::vector<eval::PolicyChoice> p = eval::parse_policy_list(o.policy);
        if (p.size() != 1) fail("--policy takes one policy, got {}", p.size());
        if (p[0].budgeted) {
            if (o.budget == 0) fail("--policy {} needs --budget", o.policy);
            spec = eval::make_combos(p, {o.budget}).front().spec;
        } else {
            if (o.budget != 0) fail("policy {} has no budget", p[0].label);
            spec = p[0].spec;
        }
    } else if (o.budget != 0) {
        fail("--budget needs --policy");
    }

    const auto [model, tokenizer] = open_model(o.model, o.load, o.threads);
    const std::unique_ptr<Session> opened = open_session(*model, o.ctx, o.batch, o.kv.key_type(), o.kv.value_type());
    Session& session = *opened;
    const SessionOptions& so = session.options();

    std::ifstream in(o.file, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string part = o.score_last > 0 ? "unscored part" : "first half";
    Timer t;
    const std::vector<int32_t> tokens = eval::tokenize_for_perplexity(tokenizer, ss.str());
    fmt::print(stderr, "model: {} ({})\n", o.model, model->summary());
    fmt::print(stderr, "tokenized {} in {:.2f} s: {} tokens; context {}, batch {}, kv cache {}, threads {}{}\n", o.file,
               t.seconds(), tokens.size(), o.ctx, session.options().n_batch, kv_types_name(so.kv_type_k, so.kv_type_v), num_threads(),
               spec.empty() ? std::string() : ", policy " + spec + " on the " + part + " of each chunk");
    eval::PerplexityOptions po;
    po.n_ctx = o.ctx;
    po.n_chunks = o.chunks;
    po.score_last = o.score_last;
    po.policy_spec = spec;
    po.on_chunk = [](int chunk, double ppl) {
        fmt::print("[{}]{:.4f},", chunk, ppl);
        std::fflush(stdout);
    };
    t.reset();
    const eval::PerplexityResult r = eval::perplexity(session, tokenizer, tokens, po);
    fmt::print("\n");
    if (std::isfinite(r.ppl_error)) {
        fmt::print("Final estimate: PPL = {:.4f} +/- {:.5f}\n", r.ppl, r.ppl_error);
    } else {
        fmt::print("Final estimate: PPL = {:.4f}\n", r.ppl);
    }
    fmt::print(stderr, "{} chunks, {} scored tokens, mean NLL {:.6f}, {:.2f} s; kv cache {} per chunk{}\n", r.n_chunks,
               r.count, r.mean_nll, t.seconds(), format_bytes(static_cast<size_t>(r.kv_bytes)),
               spec.empty() ? std::string() : fmt::format(" after compressing the {} (C_head {:.3f})", part, r.c_head));
    return 0;
}

}  // namespace

void add_perplexity_command(CLI::App& app, Action& action) {
    auto o = std::make_shared<PerplexityCmdOptions>();
    CLI::App* cmd = app.add_subcommand(
        "perplexity", "perplexity of a text file as llama.cpp computes it, optionally under an eviction policy");
    cmd->add_option("-m,--model", o->model, "model file (GGUF)")->required();
    add_load_flags(cmd, o->load);
    cmd->add_option("-f,--file", o->file, "text file")->required();
    cmd->add_option("-c,--ctx-size", o->ctx, "chunk size in tokens (the second half of each chunk is scored)")
        ->capture_default_str();
    cmd->add_option("--chunks", o->chunks, "evaluate at most this many chunks (default: all)");
    cmd->add_option("--score-last", o->score_last,
                    "score only the last N tokens of each chunk; the tokens before them are the context "
                    "(a policy compresses them) (default: llama.cpp's second half)");
    cmd->add_option("-t,--threads", o->threads, "threads (default: all hardware threads)");
    cmd->add_option("-b,--batch-size", o->batch, "prefill chunk size")->capture_default_str();
    add_kv_type_flags(cmd, o->kv, "--kv-type");
    cmd->add_option("--policy", o->policy, "eviction policy compressing each chunk's first half (name[:key=value,...])");
    cmd->add_option("--budget", o->budget, "KV budget B for --policy (entries per KV head per layer)");
    cmd->callback([o, cmd, &action] {
        o->chunks_given = cmd->count("--chunks") > 0;
        action = [o] { return run_perplexity(*o); };
    });
}

}  // namespace kvec::tools
