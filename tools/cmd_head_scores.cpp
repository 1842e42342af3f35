// kvec head-scores: HeadKV's per-head importance of a model, estimated on the model itself
// (src/eval/head_scores.h), written as the file the headkv policy reads (scores=FILE).
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "commands.h"
#include "engine/generator.h"
#include "eval/eval_items.h"
#include "eval/head_scores.h"
#include "eval/text_source.h"
#include "model/model.h"
#include "model/session.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/sha256.h"
#include "util/timer.h"
#include "util/threads.h"

namespace kvec::tools {

namespace {

struct HeadScoresOptions {
    std::string model;
    std::string out;
    std::string suite = "synthetic-2k";
    std::string tasks = "niah_single,niah_multikey,niah_multivalue";
    std::string split = "dev";
    int samples = 8;
    int64_t top_k = 20;
    int threads = 0;
    LoadMode load = LoadMode::Auto;
};

int run_head_scores(const HeadScoresOptions& o) {
    check_readable_file(o.model, "model");
    check_threads(o.threads);
    if (o.samples < 1) fail("--samples must be at least 1, got {}", o.samples);
    if (o.top_k < 1) fail("--top-k must be at least 1, got {}", o.top_k);
    const auto [model, tokenizer] = open_model(o.model, o.load, o.threads);
    Session session(*model, SessionOptions{});
    Generator generator(session, tokenizer);

    eval::ItemOptions io;
    io.suite = o.suite;
    io.samples = o.samples;
    io.split = eval::parse_heldout_split(o.split);
    io.seed = eval::default_seed(io.split);
    io.tasks = split_commas(o.tasks);
    const std::vector<eval::EvalItem> items = eval::build_items(io, tokenizer, generator, session.n_ctx());
    fmt::print(stderr, "head scores: {} items of {} ({} split), top {} entries per step\n", items.size(), o.suite,
               o.split, o.top_k);
    Timer timer;
    eval::HeadScoreOptions ho;
    ho.top_k = o.top_k;
    policy::HeadImportance h = eval::estimate_head_importance(session, tokenizer, items, ho);
    h.model = std::filesystem::path(o.model).filename().string();
    h.sha256 = sha256_file(o.model);
    h.method = fmt::format("copy mass among the top {} entries of each answer step, {} {} split, tasks {}, {} "
                           "samples per task (kvec head-scores)",
                           o.top_k, o.suite, o.split, o.tasks, o.samples);
    policy::write_head_importance(h, o.out);
    // The most important heads, for a first look.
    std::vector<std::pair<double, std::pair<int, int>>> ranked;
    for (int l = 0; l < h.n_layer(); ++l) {
        for (int k = 0; k < h.n_head_kv(); ++k) ranked.push_back({h.scores[l][k], {l, k}});
    }
    std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    fmt::print(stderr, "wrote {} ({} layers x {} KV heads, {} items, {:.1f} s); top heads:", o.out, h.n_layer(),
               h.n_head_kv(), h.items, timer.seconds());
    for (size_t i = 0; i < std::min<size_t>(5, ranked.size()); ++i) {
        fmt::print(stderr, " L{}H{} {:.3f}", ranked[i].second.first, ranked[i].second.second, ranked[i].first);
    }
    fmt::print(stderr, "\n");
    return 0;
}

}  // namespace

void add_head_scores_command(CLI::App& app, Action& action) {
    auto o = std::make_shared<HeadScoresOptions>();
    CLI::App* cmd = app.add_subcommand(
        "head-scores", "HeadKV's per-head importance of a model, estimated on it (the headkv policy's scores=FILE)");
    cmd->add_option("-m,--model", o->model, "GGUF model")->required();
    cmd->add_option("--out", o->out, "importance file to write (JSON)")->required();
    cmd->add_option("--suite", o->suite, "synthetic suite of the needle items")->capture_default_str();
    cmd->add_option("--tasks", o->tasks, "needle tasks whose answers are copied from the prompt")->capture_default_str();
    cmd->add_option("--split", o->split, "held-out split of the items (dev: keep test for reporting)")
        ->check(CLI::IsMember({"all", "dev", "test"}))
        ->capture_default_str();
    cmd->add_option("--samples", o->samples, "items per task")->capture_default_str();
    cmd->add_option("--top-k", o->top_k, "entries of each attention row that count")->capture_default_str();
    cmd->add_option("-t,--threads", o->threads, "threads (default: all hardware threads)");
    add_load_flags(cmd, o->load);
    cmd->callback([o, &action] { action = [o] { return run_head_scores(*o); }; });
}

}  // namespace kvec::tools
