// kvec run: generate text from a prompt, streaming it, then print speed and KV-cache figures;
// with --policy, the KV cache is held to a budget by an eviction policy and the run also prints
// the memory before and after eviction, the peak, the coverage diagnostics and the policy's time.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>

#include "commands.h"
#include "engine/generator.h"
#include "engine/kv_report.h"
#include "model/model.h"
#include "model/session.h"
#include "policy/coverage_probe.h"
#include "policy/registry.h"
#include "tensor/matmul.h"
#include "util/error.h"
#include "util/threads.h"

namespace kvec::tools {

namespace {

struct RunOptions {
    std::string model;
    LoadMode load = LoadMode::Auto;
    std::string prompt;
    std::string file;
    int n_predict = 128;
    int threads = 0;
    int ctx = 0;
    bool chat = false;
    std::string system;
    float temp = 0.8f;
    int top_k = 40;
    float top_p = 0.95f;
    float min_p = 0.05f;
    float repeat_penalty = 1.0f;
    int repeat_last_n = 64;
    int64_t seed = -1;
    int batch = 512;    // -b/--batch-size: tokens per forward step
    int chunk = 0;      // --chunk: > 0: chunked prefill (with a policy: evict after every chunk)
    bool batch_given = false;
    bool chunk_given = false;
    bool prompt_given = false;
    bool file_given = false;
    bool policy_given = false;
    KvTypeFlags kv;
    std::vector<std::string> stop;
    bool echo = false;
    // Eviction.
    std::string policy;          // "name[:key=value,...]"; empty: no eviction
    int64_t budget = 0;          // --budget B (0: not given)
    double ratio = 0.0;          // --ratio R (0: not given)
    bool budget_given = false;
    bool ratio_given = false;
    int decode_evict = 0;        // --decode-evict[=K]: > 0: keep the budget while decoding
    int coverage_window = 32;    // w of the coverage diagnostics' prefix
};

// The policy string of the run: --policy with --budget / --ratio / --chunk / --decode-evict
// folded in as options (each may be given once, either way). No policy: an empty spec and none.
policy::ResolvedPolicy resolve_policy(const RunOptions& o) {
    const bool any_flag = o.budget_given || o.ratio_given || o.decode_evict > 0;
    if (o.policy.empty()) {
        if (any_flag) fail("--budget, --ratio and --decode-evict need an eviction policy (--policy NAME)");
        return {};
    }
    if (o.budget_given && o.ratio_given) fail("give either --budget or --ratio, not both");
    std::vector<policy::OptionOverride> overrides;
    if (o.budget_given) overrides.push_back({"budget", std::to_string(o.budget), "--budget"});
    if (o.ratio_given) overrides.push_back({"ratio", fmt::format("{}", o.ratio), "--ratio"});
    if (o.decode_evict > 0) overrides.push_back({"decode", std::to_string(o.decode_evict), "--decode-evict"});
    if (o.chunk_given && policy::has_option(policy::find_policy(policy::parse_policy_spec(o.policy).name), "chunked")) {
        overrides.push_back({"chunked", "true", "--chunk"});
    }
    return policy::resolve(o.policy, overrides);
}

std::string join_values(const std::vector<policy::LayerCoverage>& layers, bool redundancy) {
    std::string s;
    for (const auto& l : layers) s += fmt::format("{}{:.3f}", s.empty() ? "" : " ", redundancy ? l.redundancy : l.c_head);
    return s;
}

void print_coverage(const policy::CoverageReport& r, int n_layer) {
    if (static_cast<int>(r.positions.size()) != n_layer) {
        fmt::print(stderr, "coverage:   not measured (no prompt round)\n");
        return;
    }
    fmt::print(stderr, "coverage:   prefix = positions [0, N - w) with w = {}: {} positions, {} distinct tokens\n",
               r.window, r.universe_positions, r.universe_tokens);
    if (r.universe_positions == 0) {
        fmt::print(stderr, "            (the prompt is not longer than w: nothing to measure)\n");
        return;
    }
    for (bool tokens : {false, true}) {
        const auto& layers = tokens ? r.tokens : r.positions;
        const char* unit = tokens ? "tokens   " : "positions";
        fmt::print(stderr, "  {}  cross-layer C_layer {:.3f}; cross-head C_head mean {:.3f}, per layer: {}\n", unit,
                   tokens ? r.c_layer_tokens : r.c_layer_positions, r.mean_c_head(tokens), join_values(layers, false));
        fmt::print(stderr, "  {}  redundancy R mean {:.3f}, per layer: {}\n", unit, r.mean_redundancy(tokens),
                   join_values(layers, true));
    }
}

std::string read_text_file(const std::string& path) {
    check_readable_file(path, "prompt file");
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot read prompt file '{}'", path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Memory before / after eviction, peak (and its bound in chunked mode), coverage, policy time.
void print_eviction_report(const Session& session, const Evictor& evictor, const policy::CoverageProbe& probe,
                           const GenerationStats& s) {
    const KvReport k = kv_report(session, &evictor, s);
    fmt::print(stderr, "eviction:   before {} ({} bytes, {} entries: the prompt uncompressed)\n", format_bytes(k.full_bytes),
               k.full_bytes, k.full_entries);
    fmt::print(stderr, "            after  {} ({} bytes, {} entries, {:.1f}% of before) after the prompt\n",
               format_bytes(k.prompt_bytes), k.prompt_bytes, k.prompt_entries, k.kept_percent());
    fmt::print(stderr, "            at the end {} ({} bytes, {} entries), peak {} ({} bytes)\n", format_bytes(k.end_bytes),
               k.end_bytes, k.end_entries, format_bytes(k.peak_bytes), k.peak_bytes);
    if (k.budget >= 0) {
        fmt::print(stderr, "            budget B = {} per KV head and layer: {} entries after the prompt ({})\n", k.budget,
                   k.budget_entries,
                   k.prompt_entries == k.budget_entries ? "met exactly" : fmt::format("kept {}", k.prompt_entries));
        if (k.chunked) {
            fmt::print(stderr, "            prompt peak {} ({} bytes); bound budget + chunk = {} x (B {} + C {}) entries = {} ({} bytes): {}\n",
                       format_bytes(k.prompt_peak_bytes), k.prompt_peak_bytes, k.heads, k.budget, k.chunk,
                       format_bytes(k.prompt_peak_bound), k.prompt_peak_bound,
                       k.prompt_peak_bytes <= k.prompt_peak_bound ? "within" : "EXCEEDED");
        } else {
            // One-shot eviction runs when the prompt's last chunk has passed: with more than one
            // chunk, every layer holds the whole prompt until then.
            const int64_t chunks = (s.n_prompt + k.chunk - 1) / k.chunk;
            fmt::print(stderr, "            prompt peak {} ({} bytes, {:.1f}% of before): {}\n",
                       format_bytes(k.prompt_peak_bytes), k.prompt_peak_bytes,
                       k.full_bytes > 0 ? 100.0 * static_cast<double>(k.prompt_peak_bytes) / static_cast<double>(k.full_bytes) : 0.0,
                       chunks > 1 ? fmt::format("one-shot eviction runs after the last of the prompt's {} chunks of {} "
                                                "tokens, so until then every layer holds the whole prompt; --chunk C "
                                                "bounds the peak at budget + chunk", chunks, k.chunk)
                                  : std::string("the prompt is one chunk: a per-layer policy compresses each layer "
                                                "right after its attention (one uncompressed layer at a time); one "
                                                "that selects across layers (K-VEC's global pool) holds every layer "
                                                "until the last"));
        }
    }
    const EvictionStats& e = k.eviction;
    const double policy_s = e.policy_seconds + e.observe_seconds;
    fmt::print(stderr, "            {} policy calls, {} compressions, {} entries evicted{}\n", e.calls, e.compressions,
               e.evicted, e.repositioned > 0 ? fmt::format(", {} re-rotations", e.repositioned) : "");
    fmt::print(stderr, "            policy time {:.4f} s (scoring + selection; {:.2f}% of the prompt time), compaction {:.4f} s\n",
               policy_s, s.prompt_seconds > 0 ? 100.0 * policy_s / s.prompt_seconds : 0.0, e.compact_seconds);
    if (e.reconstruct_seconds > 0) {
        fmt::print(stderr, "            context reconstruction {:.4f} s ({:.2f}% of the prompt time; a second forward pass over the prompt)\n",
                   e.reconstruct_seconds, s.prompt_seconds > 0 ? 100.0 * e.reconstruct_seconds / s.prompt_seconds : 0.0);
    }
    print_coverage(probe.report(), session.model().config().n_layer);
}

int run(const RunOptions& o) {
    if (o.prompt_given && o.file_given) fail("give the prompt with one of -p/--prompt or -f/--file, not both");
    if (!o.prompt_given && !o.file_given) fail("give the prompt with -p/--prompt or -f/--file");
    if (o.prompt_given && o.prompt.empty()) fail("the prompt is empty (-p '')");
    if (o.n_predict < -1) fail("-n/--n-predict must be >= 0, or -1 for no limit, got {}", o.n_predict);
    check_threads(o.threads);
    if (o.seed < -1) fail("-s/--seed must be >= 0, or -1 for a random seed, got {}", o.seed);
    if (o.policy_given && o.policy.empty()) fail("--policy is empty (give a policy name; see `kvec policies`)");
    const std::string prompt = o.file_given ? read_text_file(o.file) : o.prompt;
    if (o.file_given && prompt.empty()) fail("the prompt file '{}' is empty", o.file);
    check_readable_file(o.model, "model file");
    if (o.batch_given && o.batch <= 0) fail("--batch-size must be positive, got {}", o.batch);
    if (o.chunk_given && o.chunk <= 0) fail("--chunk must be positive, got {}", o.chunk);
    if (o.chunk_given && o.batch_given) {
        fail("--chunk and -b/--batch-size both set the prefill chunk size: give one (--chunk also makes "
             "the policy evict after every chunk)");
    }
    if (o.ctx < 0) fail("--ctx-size must be positive, got {}", o.ctx);
    if (o.coverage_window < 0) fail("--coverage-window must be >= 0, got {}", o.coverage_window);
    const KvType kv_type_k = o.kv.key_type(), kv_type_v = o.kv.value_type();
    auto [canonical, evictor] = resolve_policy(o);

    const auto [model, tokenizer] = open_model(o.model, o.load, o.threads);
    const std::unique_ptr<Session> opened = open_session(*model, o.ctx, o.chunk_given ? o.chunk : o.batch, kv_type_k, kv_type_v);
    Session& session = *opened;
    std::unique_ptr<policy::CoverageProbe> probe;
    if (evictor) {
        probe = std::make_unique<policy::CoverageProbe>(*evictor, o.coverage_window);
        session.set_evictor(probe.get());
    }
    Generator generator(session, tokenizer);

    GenerateOptions g;
    g.prompt = prompt;
    g.chat = o.chat;
    g.system_prompt = o.system;
    g.n_predict = o.n_predict;
    g.stop = o.stop;
    g.sampling.temperature = o.temp;
    g.sampling.top_k = o.top_k;
    g.sampling.top_p = o.top_p;
    g.sampling.min_p = o.min_p;
    g.sampling.repeat_penalty = o.repeat_penalty;
    g.sampling.repeat_last_n = o.repeat_last_n;
    g.sampling.seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}();
    validate(g.sampling);

    fmt::print(stderr, "model: {} ({})\n", o.model, model->summary());
    fmt::print(stderr, "threads: {}, context: {}, chunk: {}, kv cache: {}, matmul: {}, seed: {}\n",
               num_threads(), session.n_ctx(), session.options().n_batch, kv_types_name(kv_type_k, kv_type_v),
               matmul_backend_description(), g.sampling.seed);
    if (evictor) {
        const auto plan = evictor->budget_plan(0);
        const bool decode = plan && plan->decode_interval > 0;
        fmt::print(stderr, "policy: {} (evicts {}{})\n", canonical,
                   !plan          ? "nothing"
                   : plan->chunked ? fmt::format("after every prefill chunk of {} tokens", session.options().n_batch)
                                   : std::string("once after the prompt"),
                   decode ? fmt::format(", and every {} decode step(s)", plan->decode_interval) : "");
    }
    if (o.echo) {
        fmt::print("{}", prompt);
        std::fflush(stdout);
    }
    const GenerationResult r = generator.generate(g, [](std::string_view text) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
    });
    fmt::print("\n");
    std::fflush(stdout);

    const GenerationStats& s = r.stats;
    fmt::print(stderr, "\n");
    fmt::print(stderr, "prompt:     {} tokens in {:.3f} s ({:.2f} tokens/s)\n", s.n_prompt, s.prompt_seconds,
               s.prompt_tokens_per_second());
    fmt::print(stderr, "generation: {} tokens, {} decode steps in {:.3f} s ({:.2f} tokens/s)\n", s.n_generated,
               s.n_decoded, s.decode_seconds, s.decode_tokens_per_second());
    fmt::print(stderr, "kv cache:   {} ({} bytes, {} entries), peak {} ({} bytes)\n", format_bytes(s.kv_bytes),
               s.kv_bytes, s.kv_entries, format_bytes(s.kv_peak_bytes), s.kv_peak_bytes);
    const KvCache& kv = session.kv_cache();
    fmt::print(stderr, "kv types:   keys {} ({} bytes per key), values {} ({} bytes per value): {} bytes per entry "
               "with its position and policy scores\n", kv_type_name(kv_type_k), kv_row_bytes(kv_type_k, kv.head_dim()),
               kv_type_name(kv_type_v), kv_row_bytes(kv_type_v, kv.head_dim()), kv.entry_bytes());
    if (const ModelConfig& c = model->config(); c.has_swa()) {
        // Bytes allocated per layer kind: sliding-window layers are bounded by their window.
        int64_t bytes[2] = {0, 0}, entries[2] = {0, 0};
        int layers[2] = {0, 0};
        for (int l = 0; l < c.n_layer; ++l) {
            const int kind = c.is_swa(l) ? 0 : 1;
            ++layers[kind];
            for (int h = 0; h < c.n_head_kv; ++h) {
                bytes[kind] += static_cast<int64_t>(kv.capacity(l, h)) * static_cast<int64_t>(kv.entry_bytes());
                entries[kind] += kv.size(l, h);
            }
        }
        fmt::print(stderr, "kv layers:  {} sliding-window layers (window {}): {} ({} bytes, {} entries); {} global "
                   "layers: {} ({} bytes, {} entries)\n", layers[0], c.sliding_window, format_bytes(static_cast<size_t>(bytes[0])), bytes[0],
                   entries[0], layers[1], format_bytes(static_cast<size_t>(bytes[1])), bytes[1], entries[1]);
    }
    fmt::print(stderr, "weights:    {}\n", model->residency());
    if (evictor) print_eviction_report(session, *evictor, *probe, s);
    fmt::print(stderr, "stopped:    {}\n", stop_reason_name(s.stop_reason));
    return 0;
}

}  // namespace

void add_run_command(CLI::App& app, Action& action) {
    auto o = std::make_shared<RunOptions>();
    CLI::App* cmd = app.add_subcommand("run", "generate text from a prompt (streams it, then prints speed and KV-cache bytes)");
    cmd->add_option("-m,--model", o->model, "model file (GGUF)")->required();
    add_load_flags(cmd, o->load);
    cmd->add_option("-p,--prompt", o->prompt, "prompt text");
    cmd->add_option("-f,--file", o->file, "read the prompt from a file");
    cmd->add_option("-n,--n-predict", o->n_predict, "tokens to generate; -1 = until end of generation or a full context")
        ->capture_default_str();
    cmd->add_option("-t,--threads", o->threads, "threads (default: all hardware threads)");
    cmd->add_option("-c,--ctx-size", o->ctx, "context size in tokens (default: the model's training context)");
    cmd->add_flag("--chat", o->chat, "wrap the prompt in the model's chat template (a user turn)");
    cmd->add_option("--system", o->system, "system message for --chat");
    cmd->add_option("--temp", o->temp, "temperature; 0 = greedy")->capture_default_str();
    cmd->add_option("--top-k", o->top_k, "top-k sampling; 0 = off")->capture_default_str();
    cmd->add_option("--top-p", o->top_p, "top-p (nucleus) sampling; 1 = off")->capture_default_str();
    cmd->add_option("--min-p", o->min_p, "min-p sampling; 0 = off")->capture_default_str();
    cmd->add_option("--repeat-penalty", o->repeat_penalty, "penalise repeated tokens; 1 = off")->capture_default_str();
    cmd->add_option("--repeat-last-n", o->repeat_last_n, "tokens the repeat penalty looks back; -1 = all")
        ->capture_default_str();
    cmd->add_option("-s,--seed", o->seed, "random seed; -1 = random")->capture_default_str();
    cmd->add_option("-b,--batch-size", o->batch, "prefill chunk size (tokens per forward step); eviction once after the prompt")
        ->capture_default_str();
    cmd->add_option("--chunk", o->chunk,
                    "chunked prefill: C tokens per forward step, and the policy evicts after every chunk "
                    "(peak KV memory about budget + chunk)");
    cmd->add_option("--policy", o->policy,
                    "eviction policy NAME[:opt=val,...] (see `kvec policies`); default: none (full cache)");
    cmd->add_option("--budget", o->budget, "KV entries kept per KV head and layer (the policy's budget option)");
    cmd->add_option("--ratio", o->ratio, "budget as a fraction of the prompt length (the policy's ratio option)");
    cmd->add_flag("--decode-evict{1}", o->decode_evict,
                  "keep the budget while decoding, re-selecting every K steps (--decode-evict=K; default 1)");
    cmd->add_option("--coverage-window", o->coverage_window,
                    "w of the coverage diagnostics (prefix = positions [0, N - w)), the same for every policy")
        ->capture_default_str();
    add_kv_type_flags(cmd, o->kv, "--kv-type,--cache-type");
    cmd->add_option("--stop,-r,--reverse-prompt", o->stop, "stop when this text appears (repeatable)");
    cmd->add_flag("--echo", o->echo, "print the prompt before the generated text");
    cmd->callback([o, cmd, &action] {
        o->batch_given = cmd->count("--batch-size") > 0;
        o->chunk_given = cmd->count("--chunk") > 0;
        o->budget_given = cmd->count("--budget") > 0;
        o->ratio_given = cmd->count("--ratio") > 0;
        o->prompt_given = cmd->count("--prompt") > 0;
        o->file_given = cmd->count("--file") > 0;
        o->policy_given = cmd->count("--policy") > 0;
        action = [o] { return run(*o); };
    });
}

}  // namespace kvec::tools
