// kvec eval: one sweep over eviction policies x KV budgets on a synthetic suite or LongBench
// files (scores, coverage, KV bytes, tables, plots), or --fidelity: KL divergence and top-1
// agreement with the full cache over a text. All logic is in src/eval (the output directory, its
// resume and costs: eval/out_dir); this file maps flags, writes config.json and prints. See docs/evaluation.md.
#include <fmt/format.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "commands.h"
#include "engine/generator.h"
#include "eval/eval_items.h"
#include "eval/fidelity.h"
#include "eval/merge.h"
#include "eval/out_dir.h"
#include "eval/provenance.h"
#include "eval/report.h"
#include "util/sha256.h"
#include "eval/shard.h"
#include "eval/sweep.h"
#include "eval/text_source.h"
#include "model/model.h"
#include "model/session.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/timer.h"
#include "util/threads.h"

namespace kvec::tools {

namespace {

namespace fs = std::filesystem;

struct EvalOptions {
    std::string model;
    LoadMode load = LoadMode::Auto;
    std::string suite;
    std::string data;
    std::string policies = "full,streamingllm,h2o,snapkv,pyramidkv,adakv,knorm,lagkv,expected-attention,kvzip,kvec";
    std::string budgets = "64,128,256,512";
    bool budgets_given = false;  // --budgets on the command line (with --compression: both kinds of column)
    std::string compression;  // "0.25,0.5": compression ratios instead of budgets
    int samples = 0;
    std::string tasks;
    std::string out;
    int threads = 0;
    std::optional<uint64_t> seed;
    std::string split = "all";
    std::string protocol = "query-aware";
    int ctx = 0;
    int batch = 512;
    KvTypeFlags kv;
    bool chat = false;
    bool no_chat = false;
    int64_t max_length = 0;
    int max_new_tokens = 0;
    bool no_share = false;
    int decode_batch = 16;  // shared combinations decoding together
    double task_floor = 0;  // tasks the full cache scores below this leave the averages
    bool overwrite = false;
    std::string fidelity;
    bool save_items = false;  // --save-items: <out>/items.jsonl
    int prefix = 0;
    int continuation = 128;
    int segments = 1;
    std::string reference_kv;  // --reference-kv-type: KV type of the fidelity reference ("": the run's)
    std::optional<std::string> shard;  // --shard: "K/N", "slurm", "k8s/N" (eval/shard.h); "" is refused
};

std::vector<int64_t> parse_budgets(const std::string& s) {
    std::vector<int64_t> out;
    for (const std::string& piece : split_commas(s)) {
        size_t used = 0;
        int64_t v = 0;
        try {
            v = std::stoll(piece, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used != piece.size() || v <= 0) fail("--budgets: '{}' is not a positive integer", piece);
        for (int64_t b : out) {
            if (b == v) fail("--budgets: {} is listed twice", v);
        }
        out.push_back(v);
    }
    if (out.empty()) fail("--budgets is empty");
    return out;
}

std::string now_iso8601() {
    const std::time_t t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return buf;
}

int run_eval(const EvalOptions& o) {
    if (o.model.empty()) fail("--model is required (the GGUF model file)");
    check_readable_file(o.model, "model file");
    if (o.chat && o.no_chat) fail("--chat and --no-chat exclude each other");
    const bool fidelity = !o.fidelity.empty();
    const int sources = (o.suite.empty() ? 0 : 1) + (o.data.empty() ? 0 : 1) + (fidelity ? 1 : 0);
    if (sources != 1) fail("give exactly one of --suite, --data or --fidelity");
    if (o.batch <= 0) fail("--batch-size must be positive, got {}", o.batch);
    if (o.ctx < 0) fail("--ctx-size must be positive, got {}", o.ctx);
    if (o.samples < 0) fail("--samples must be positive, got {}", o.samples);
    check_threads(o.threads);
    if (o.max_length < 0 || o.max_length == 1) {
        fail("--max-length must be at least 2 (prompts are truncated in the middle to M tokens; 0: the default), got {}",
             o.max_length);
    }
    if (o.max_new_tokens < 0) fail("--max-new-tokens must be positive (0: each task's own), got {}", o.max_new_tokens);
    if (o.prefix < 0) fail("--prefix must be positive (0: the default), got {}", o.prefix);
    if (o.continuation <= 0) fail("--continuation must be positive, got {}", o.continuation);
    if (o.segments <= 0) fail("--segments must be positive, got {}", o.segments);
    const eval::Protocol protocol = eval::parse_protocol(o.protocol);
    std::optional<eval::Shard> shard;
    if (o.shard) {
        if (fidelity) fail("--shard goes with --suite or --data (fidelity runs over one text)");
        shard = eval::parse_shard(*o.shard);
    }
    const eval::HeldoutSplit split = eval::parse_heldout_split(o.split);
    const uint64_t seed = o.seed.value_or(eval::default_seed(split));
    if (split != eval::HeldoutSplit::All && o.suite.empty()) fail("--split goes with --suite (the synthetic suite's text and seed)");
    if (protocol != eval::Protocol::QueryAware && fidelity) {
        fail("--protocol: fidelity is query-agnostic by nature (the prefix is compressed, the continuation is not)");
    }
    const std::vector<eval::PolicyChoice> policies = eval::parse_policy_list(o.policies);
    std::vector<int64_t> budgets;  // B > 0, or compression codes (eval::compression_code)
    if (o.compression.empty() || o.budgets_given) budgets = parse_budgets(o.budgets);
    if (!o.compression.empty()) {
        for (const std::string& piece : split_commas(o.compression)) {
            size_t used = 0;
            double c = 0;
            try {
                c = std::stod(piece, &used);
            } catch (const std::exception&) {
                used = 0;
            }
            if (used != piece.size()) fail("--compression: '{}' is not a number", piece);
            const int64_t code = eval::compression_code(c);
            if (std::find(budgets.begin(), budgets.end(), code) != budgets.end()) {
                fail("--compression: {} is listed twice", piece);
            }
            budgets.push_back(code);
        }
        if (split_commas(o.compression).empty()) fail("--compression is empty");
    }
    const std::vector<eval::Combo> combos = eval::make_combos(policies, budgets);
    std::vector<std::string> data_files = split_commas(o.data);
    for (const auto& f : data_files) check_readable_file(f, "data file");
    // --fidelity heldout:SPLIT: the held-out addresses of that split (dev for choosing, test for reporting).
    const bool heldout_fidelity = fidelity && o.fidelity.rfind("heldout:", 0) == 0;
    const eval::HeldoutSplit fidelity_split =
        heldout_fidelity ? eval::parse_heldout_split(o.fidelity.substr(8)) : eval::HeldoutSplit::All;
    if (fidelity && !heldout_fidelity) check_readable_file(o.fidelity, "fidelity text file");

    const auto [model, tokenizer] = open_model(o.model, o.load, o.threads);
    const std::unique_ptr<Session> opened = open_session(*model, o.ctx, o.batch, o.kv.key_type(), o.kv.value_type());
    Session& session = *opened;
    const SessionOptions& so = session.options();
    Generator generator(session, tokenizer);
    // --reference-kv-type: the fidelity reference is a full cache of that type (keys and values),
    // in a second session over the same model and context.
    std::unique_ptr<Session> reference;
    if (!o.reference_kv.empty()) {
        if (!fidelity) fail("--reference-kv-type goes with --fidelity");
        SessionOptions ro = so;
        ro.n_ctx = session.n_ctx();
        ro.kv_type_k = ro.kv_type_v = parse_kv_type(o.reference_kv, "--reference-kv-type");
        reference = std::make_unique<Session>(*model, ro);
    }

    std::string out_dir = o.out;
    if (out_dir.empty()) {
        out_dir = fidelity           ? std::string("kvec-eval-fidelity")
                  : !o.suite.empty() ? "kvec-eval-" + o.suite
                                     : std::string("kvec-eval-longbench");
        if (shard) out_dir += fmt::format("-shard-{}-of-{}", shard->index, shard->count);
    }
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec) fail("cannot create output directory '{}': {}", out_dir, ec.message());
    const eval::DirLock lock(out_dir);  // one run per directory, until this one exits

    fmt::print(stderr, "model: {} ({})\n", o.model, model->summary());
    fmt::print(stderr, "hashing the model file ...\n");
    const std::string model_hash = sha256_file(o.model);

    nlohmann::ordered_json run;  // what must match for a resumed sweep
    run["model_sha256"] = model_hash;
    std::vector<std::string> specs;
    for (const auto& c : combos) specs.push_back(c.spec);
    nlohmann::ordered_json policy_list = nlohmann::ordered_json::array();
    for (const auto& p : policies) policy_list.push_back({{"label", p.label}, {"spec", p.spec}});
    run["policies"] = policy_list;
    run["budgets"] = budgets;
    run["combinations"] = specs;
    run["ctx"] = session.n_ctx();
    run["batch"] = session.options().n_batch;
    run["kv_type"] = kv_types_name(so.kv_type_k, so.kv_type_v);
    if (reference) {
        run["reference_kv_type"] = kv_types_name(reference->options().kv_type_k, reference->options().kv_type_v);
    }
    run["seed"] = seed;
    // Written only when not the default, so that runs made before these options resume.
    if (protocol != eval::Protocol::QueryAware) run["protocol"] = eval::protocol_name(protocol);
    if (split != eval::HeldoutSplit::All) run["split"] = eval::heldout_split_name(split);
    run["chat"] = o.chat ? "on" : o.no_chat ? "off" : "auto";
    run["samples"] = o.samples;
    if (!o.tasks.empty()) run["tasks"] = split_commas(o.tasks);  // only when given: older runs resume
    run["max_length"] = o.max_length;
    run["max_new_tokens_cap"] = o.max_new_tokens;
    run["coverage_window"] = 32;
    if (!o.suite.empty()) run["suite"] = o.suite;
    if (shard) run["shard"] = {{"index", shard->index}, {"count", shard->count}};
    if (!data_files.empty()) {
        nlohmann::ordered_json files = nlohmann::ordered_json::array();
        for (const auto& f : data_files) files.push_back({{"file", fs::path(f).filename().string()}, {"sha256", sha256_file(f)}});
        run["data"] = files;
    }
    if (fidelity) {
        run["fidelity_text"] = heldout_fidelity
                                   ? nlohmann::ordered_json{{"heldout", eval::heldout_split_name(fidelity_split)},
                                                            {"sha256", sha256_hex(eval::heldout_text(eval::default_text_dir(), fidelity_split))}}
                                   : nlohmann::ordered_json{{"file", fs::path(o.fidelity).filename().string()},
                                                            {"sha256", sha256_file(o.fidelity)}};
        run["prefix"] = o.prefix;
        run["continuation"] = o.continuation;
        run["segments"] = o.segments;
    }

    nlohmann::ordered_json config;
    config["kvec"] = {{"version", eval::engine_version()}, {"git_commit", eval::git_commit()}};
    config["model"] = {{"path", fs::absolute(o.model).string()},
                       {"sha256", model_hash},
                       {"summary", model->summary()},
                       {"n_ctx_train", model->config().n_ctx_train}};
    config["run"] = run;
    config["options"] = {{"threads", num_threads()}, {"share_prefill", !o.no_share}, {"decode_batch", o.decode_batch},
                         {"out", out_dir}};
    if (o.task_floor > 0) config["options"]["task_floor"] = o.task_floor;
    config["created"] = now_iso8601();

    const std::string config_path = out_dir + "/config.json";
    const std::string pred_path = out_dir + "/predictions.jsonl";
    if (fidelity) {
        eval::write_text_file(config_path, config.dump(2) + "\n");
        std::string text;
        if (heldout_fidelity) {
            text = eval::heldout_text(eval::default_text_dir(), fidelity_split);
        } else {
            std::ifstream in(o.fidelity, std::ios::binary);
            std::stringstream ss;
            ss << in.rdbuf();
            text = ss.str();
        }
        const std::vector<int32_t> tokens = eval::tokenize_for_perplexity(tokenizer, text);
        eval::FidelityOptions fo;
        fo.prefix = o.prefix;
        fo.continuation = o.continuation;
        fo.segments = o.segments;
        fo.share_prefill = !o.no_share;
        fo.reference = reference.get();
        eval::ProgressBar real("fidelity", static_cast<int64_t>(combos.size()) * std::max(1, o.segments));
        fo.on_progress = [&real](int64_t done, int64_t total) {
            real.set_total(total);
            real.update(done);
        };
        Timer t;
        const eval::FidelityReport rep = eval::run_fidelity(session, tokens, policies, combos, fo);
        real.finish();
        std::string header = fmt::format("# kvec eval --fidelity\n\nModel `{}` (sha256 {}), text `{}`, kvec {} ({}).\n",
                                         fs::path(o.model).filename().string(), model_hash.substr(0, 12),
                                         heldout_fidelity ? o.fidelity : fs::path(o.fidelity).filename().string(), eval::engine_version(),
                                         eval::git_commit());
        header += fmt::format("KV cache {}; reference: the full cache of {}.\n", kv_types_name(so.kv_type_k, so.kv_type_v),
                              reference ? kv_types_name(reference->options().kv_type_k, reference->options().kv_type_v)
                                        : kv_types_name(so.kv_type_k, so.kv_type_v));
        eval::write_fidelity_outputs(rep, policies, budgets, out_dir, header);
        fmt::print(stderr, "fidelity: {} combinations in {:.1f} s; results in {}/\n", combos.size(), t.seconds(), out_dir);
        return 0;
    }

    eval::open_run_dir(out_dir, run, o.overwrite);
    eval::write_text_file(config_path, config.dump(2) + "\n");
    const eval::InvocationCosts costs(out_dir);

    eval::ItemOptions io;
    io.suite = o.suite;
    io.data_files = data_files;
    io.samples = o.samples;
    io.tasks = split_commas(o.tasks);
    io.seed = seed;
    io.split = split;
    io.chat = o.chat ? eval::ChatMode::On : o.no_chat ? eval::ChatMode::Off : eval::ChatMode::Auto;
    io.max_length = o.max_length;
    io.max_new_tokens = o.max_new_tokens;
    eval::ItemSummary isum;
    Timer prep;
    std::vector<eval::EvalItem> items = eval::build_items(io, tokenizer, generator, session.n_ctx(), &isum);
    fmt::print(stderr, "{}: {} samples, {} tasks, format {}{}; prepared in {:.1f} s\n", isum.source, items.size(),
               isum.tasks.size(), isum.format,
               isum.truncated > 0 ? fmt::format(", {} prompts truncated in the middle", isum.truncated) : "",
               prep.seconds());
    const size_t items_total = items.size();
    if (o.save_items) {  // what a peer engine needs to run the same items (scripts/peer/kvpress.sh)
        std::string lines;
        for (const eval::EvalItem& it : items) {
            const nlohmann::ordered_json j = {{"id", it.id},
                                              {"task", it.task},
                                              {"metric", it.metric},
                                              {"references", it.references},
                                              {"all_classes", it.all_classes},
                                              {"max_new_tokens", it.max_new_tokens},
                                              {"min_new_tokens", it.min_new_tokens},
                                              {"end_tokens", it.end_tokens},
                                              {"n_context", it.n_context},
                                              {"prompt", it.prompt}};
            lines += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
        }
        eval::write_text_file(out_dir + "/items.jsonl", lines);
    }
    if (shard) {  // this shard's items only; shard.json tells `kvec eval merge` which
        const std::vector<size_t> mine = eval::shard_items(items, protocol, *shard);
        eval::write_text_file(out_dir + "/shard.json", eval::shard_manifest(items, mine, *shard, isum.format).dump(1) + "\n");
        std::vector<eval::EvalItem> own;
        for (size_t i : mine) own.push_back(std::move(items[i]));
        items = std::move(own);
        fmt::print(stderr, "shard {} ({}): {} of {} samples\n", eval::shard_name(*shard), shard->source, items.size(),
                   items_total);
    }

    std::vector<eval::EvalRecord> records = eval::load_predictions(pred_path);
    std::set<eval::RecordKey> done;
    for (const auto& r : records) done.insert({r.id, r.policy, r.budget});
    if (!records.empty()) fmt::print(stderr, "resuming: {} predictions already in {}\n", records.size(), pred_path);

    eval::RecordAppender pred(pred_path);
    const int64_t total = static_cast<int64_t>(items.size() * combos.size());
    fmt::print(stderr, "sweep: {} policies x {} budgets = {} combinations x {} samples = {} generations; prefill "
               "sharing {}\n", policies.size(), budgets.size(), combos.size(), items.size(), total,
               o.no_share ? "off (--no-share-prefill): every combination prefills its prompt"
                          : "on: one-shot policies share one prefill per sample");
    eval::ProgressBar bar("eval", total);
    eval::SweepOptions so2;
    so2.protocol = protocol;
    so2.share_prefill = !o.no_share;
    so2.decode_batch = o.decode_batch;
    so2.on_record = [&](const eval::EvalRecord& r) {
        pred.append(eval::to_json(r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        records.push_back(r);
    };
    so2.on_stats = [&costs](const eval::SweepStats& so_far) { costs.record(so_far); };
    so2.on_progress = [&bar](int64_t d, int64_t) { bar.update(d); };
    const eval::SweepStats st = eval::run_sweep(session, tokenizer, items, policies, combos, done, so2);
    bar.finish();
    costs.record(st);

    const eval::SweepSummary summary = eval::summarize(items, policies, budgets, records, o.task_floor);
    const std::string mode_text =
        o.no_share ? "separate prefill per combination (--no-share-prefill)"
                   : fmt::format("prefill shared: {} prefills for {} generations ({} derived from a shared prefill)",
                                 st.prefills, st.generations, st.shared_generations);
    nlohmann::ordered_json extra;
    extra["mode"] = {{"share_prefill", !o.no_share},
                     {"description", mode_text},
                     {"prefills", st.prefills},
                     {"generations", st.generations},
                     {"shared_generations", st.shared_generations},
                     {"skipped_existing", st.skipped}};
    extra["timing"] = {{"wall_seconds", st.wall_seconds},
                       {"prefill_seconds", st.prefill_seconds},
                       {"replay_seconds", st.replay_seconds},
                       {"decode_seconds", st.decode_seconds},
                       {"threads", num_threads()}};
    // Every invocation's cost, killed ones included (up to their last record).
    const nlohmann::json all = costs.totals();
    auto total_of = [&](const char* key) { return all.value(key, 0.0); };
    const double total_wall = total_of("wall_seconds");
    const double total_prefills = total_of("prefills");
    const double total_generations = total_of("generations");
    const double invocations = total_of("invocations");
    extra["total"] = {{"wall_seconds", total_wall},
                      {"prefill_seconds", total_of("prefill_seconds")},
                      {"replay_seconds", total_of("replay_seconds")},
                      {"decode_seconds", total_of("decode_seconds")},
                      {"prefills", total_prefills},
                      {"generations", total_generations},
                      {"invocations", invocations}};
    const std::string what = !o.suite.empty() ? o.suite : std::string("LongBench");
    eval::SweepTitle title;
    title.what = what;
    title.model_file = fs::path(o.model).filename().string();
    title.model_sha256 = model_hash;
    title.samples = static_cast<int64_t>(items.size());
    title.format = isum.format;
    title.protocol = eval::protocol_name(protocol);
    if (!o.suite.empty()) {
        title.split = eval::heldout_split_name(split);
        title.seed = seed;
    }
    title.version = eval::engine_version();
    title.commit = eval::git_commit();
    std::string header = eval::sweep_title(title);
    if (shard) {
        header += fmt::format("\nShard {} of a sharded run: {} of its {} samples (`kvec eval merge` joins the shards).\n",
                              eval::shard_name(*shard), items.size(), items_total);
    }
    header += fmt::format(
        "\nMode: {}. Sweep wall time {:.1f} s in total ({:.0f} prefills for {:.0f} generations over {:.0f} "
        "invocation(s); this one {:.1f} s, {} threads).\n",
        mode_text, total_wall, total_prefills, total_generations, invocations, st.wall_seconds, num_threads());
    const std::string md = eval::write_sweep_outputs(summary, out_dir, header, extra, what);
    fmt::print("{}", md);
    fmt::print(stderr, "\n{}; wall {:.1f} s (prefill {:.1f} s, replay {:.2f} s, decode {:.1f} s); results in {}/\n",
               mode_text, st.wall_seconds, st.prefill_seconds, st.replay_seconds, st.decode_seconds, out_dir);
    return 0;
}

}  // namespace

void add_eval_command(CLI::App& app, Action& action) {
    auto o = std::make_shared<EvalOptions>();
    CLI::App* cmd = app.add_subcommand(
        "eval", "evaluate eviction policies x KV budgets: synthetic suite, LongBench files, or fidelity to the full cache");
    cmd->add_option("-m,--model", o->model, "model file (GGUF; required)");
    add_load_flags(cmd, o->load);
    cmd->add_option("--suite", o->suite, "synthetic suite: synthetic-1k|2k|4k|8k|16k|32k");
    cmd->add_option("--data", o->data, "LongBench JSONL file(s), comma-separated (named <dataset>.jsonl)");
    cmd->add_option("--fidelity", o->fidelity,
                    "text file (or heldout:dev|test|all, the held-out addresses): KL divergence, top-1 agreement and "
                    "continuation NLL against the full cache");
    cmd->add_option("--policies", o->policies, "policies, comma-separated; options as name:key=value,key=value")
        ->capture_default_str();
    cmd->add_option("--budgets", o->budgets, "KV budgets B (entries per KV head per layer), comma-separated")
        ->capture_default_str();
    cmd->add_option("--compression", o->compression,
                    "compression ratios, comma-separated (kvpress's view: 0.75 evicts 75 % of the compressed "
                    "prompt's entries; B = 0.25 x its tokens per head); instead of the budgets, or after them when "
                    "--budgets is given too (one prefill serves both kinds of column)");
    cmd->add_option("--samples", o->samples, "first N samples per task (suite) or per file (default: all)");
    cmd->add_option("--tasks", o->tasks, "suite: only these tasks, comma-separated (default: every task)");
    cmd->add_option("--out", o->out, "output directory (default: kvec-eval-<suite|longbench|fidelity>)");
    cmd->add_option("-t,--threads", o->threads, "threads (default: all hardware threads)");
    cmd->add_option("--seed", o->seed, "seed of the synthetic instances (default: 1; 2 with --split dev)");
    cmd->add_option("--split", o->split,
                    "held-out material of the synthetic suite: all, or its disjoint halves dev (choosing defaults) "
                    "and test (reporting)")
        ->check(CLI::IsMember({"all", "dev", "test"}))
        ->capture_default_str();
    cmd->add_option("--protocol", o->protocol,
                    "query-aware: compress the whole prompt (question included); query-agnostic: compress the "
                    "context before the question is seen, then ask")
        ->check(CLI::IsMember({"query-aware", "query-agnostic"}))
        ->capture_default_str();
    cmd->add_option("-c,--ctx-size", o->ctx, "context size (default: the model's training context)");
    cmd->add_option("-b,--batch-size", o->batch, "prefill chunk size")->capture_default_str();
    add_kv_type_flags(cmd, o->kv, "--kv-type");
    cmd->add_flag("--chat", o->chat, "use the model's chat template (default: when the model has one)");
    cmd->add_flag("--no-chat", o->no_chat, "never use the chat template (completion format)");
    cmd->add_option("--max-length", o->max_length,
                    "LongBench: middle-truncate prompts to M tokens (pred.py's model2maxlen; default: context - "
                    "max_new_tokens - 64)");
    cmd->add_option("--max-new-tokens", o->max_new_tokens, "cap every task's generation length (not the official setting)");
    cmd->add_flag("--save-items", o->save_items,
                  "write the items as run (token ids, where the context ends, references, generation limits) to "
                  "<out>/items.jsonl, for running them through another engine (scripts/peer/kvpress.sh)");
    cmd->add_flag("--no-share-prefill", o->no_share, "prefill every combination separately (for timing comparisons)");
    cmd->add_option("--decode-batch", o->decode_batch,
                    "shared-prefill combinations of an item decoding together in one batched forward pass per "
                    "token (1: one after another)")
        ->capture_default_str()
        ->check(CLI::Range(1, 64));
    cmd->add_option("--task-floor", o->task_floor,
                    "keep tasks on which the full cache scores below this (0-100) out of the averages and paired "
                    "comparisons (needs the full policy; default 0: every task counts)")
        ->check(CLI::Range(0.0, 100.0));
    cmd->add_flag("--overwrite", o->overwrite, "discard earlier predictions in the output directory");
    cmd->add_option("--prefix", o->prefix, "fidelity: prompt tokens per segment (default: context - continuation - 1)");
    cmd->add_option("--continuation", o->continuation, "fidelity: teacher-forced tokens per segment")->capture_default_str();
    cmd->add_option("--segments", o->segments, "fidelity: segments of the text")->capture_default_str();
    cmd->add_option("--reference-kv-type", o->reference_kv,
                    "fidelity: KV-cache type (keys and values) of the reference full cache, e.g. f16 to measure a "
                    "quantised cache (-ctk/-ctv) against the f16 one (default: the run's types)");
    cmd->add_option("--shard", o->shard,
                    "run only shard K of N of the items (0-based K/N; slurm: the array task; k8s/N: "
                    "JOB_COMPLETION_INDEX of N); join the shards with `kvec eval merge`");
    cmd->callback([o, cmd, &action] {
        o->budgets_given = cmd->count("--budgets") > 0;
        if (cmd->get_subcommands().empty()) action = [o] { return run_eval(*o); };
    });

    // kvec eval merge OUT SHARD_DIR...
    auto merge_out = std::make_shared<std::string>();
    auto merge_dirs = std::make_shared<std::vector<std::string>>();
    CLI::App* merge = cmd->add_subcommand(
        "merge", "join the output directories of the shards of one sweep (--shard) into the outputs of one run");
    merge->add_option("OUT", *merge_out, "output directory of the merged run")->required();
    merge->add_option("SHARD_DIR", *merge_dirs, "the output directories of the shards, in any order")->required();
    merge->callback([merge_out, merge_dirs, &action] {
        action = [merge_out, merge_dirs] {
            const std::string md = eval::merge_shards(*merge_out, *merge_dirs);
            fmt::print("{}", md);
            fmt::print(stderr, "\nmerged {} shards into {}/\n", merge_dirs->size(), *merge_out);
            return 0;
        };
    });
}

}  // namespace kvec::tools
