// kvec bench: prompt-processing (pp) and generation (tg) throughput, like llama-bench's
// pp512 / tg128, optionally at a depth (tokens already in the cache), mean +- stddev over
// repetitions. Tests are described by BenchTest and printed by a table printer so that lists of
// sizes and other output formats can be added without touching the measurement.
#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "commands.h"
#include "engine/generator.h"
#include "model/model.h"
#include "model/session.h"
#include "tensor/matmul.h"
#include "util/error.h"
#include "util/timer.h"

namespace kvec::tools {

namespace {

struct BenchOptions {
    std::string model;
    int n_prompt = 512;
    int n_gen = 128;
    int depth = 0;
    int threads = 0;
    int reps = 5;
    int chunk = 512;
    std::string kv_type = "f16";
};

struct BenchTest {
    enum class Kind { Prompt, Generation } kind;
    int n_tokens;
    int depth;
    std::string name() const {
        std::string s = fmt::format("{}{}", kind == Kind::Prompt ? "pp" : "tg", n_tokens);
        if (depth > 0) s += fmt::format(" @ d{}", depth);
        return s;
    }
};

struct BenchResult {
    BenchTest test;
    std::vector<double> tokens_per_second;  // one per repetition
    double mean() const {
        double s = 0;
        for (double x : tokens_per_second) s += x;
        return s / static_cast<double>(tokens_per_second.size());
    }
    double stddev() const {
        if (tokens_per_second.size() < 2) return 0.0;
        const double m = mean();
        double s = 0;
        for (double x : tokens_per_second) s += (x - m) * (x - m);
        return std::sqrt(s / static_cast<double>(tokens_per_second.size() - 1));
    }
};

std::vector<int32_t> random_tokens(int n, int n_vocab, std::mt19937& rng) {
    std::uniform_int_distribution<int32_t> d(0, n_vocab - 1);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = d(rng);
    return t;
}

// One repetition: fills the cache to the depth (not timed), then times the test.
double run_once(Session& s, const BenchTest& t, std::mt19937& rng) {
    s.reset();
    if (t.depth > 0) s.prefill(random_tokens(t.depth, s.n_vocab(), rng));
    if (t.kind == BenchTest::Kind::Prompt) {
        const auto tokens = random_tokens(t.n_tokens, s.n_vocab(), rng);
        Timer timer;
        s.prefill(tokens);
        return t.n_tokens / timer.seconds();
    }
    const auto tokens = random_tokens(t.n_tokens, s.n_vocab(), rng);
    Timer timer;
    for (int32_t id : tokens) s.decode(id);
    return t.n_tokens / timer.seconds();
}

void print_table(const Model& m, const BenchOptions& o, const std::vector<BenchResult>& results) {
    const std::string model = fmt::format("{} {}", m.config().arch_name, m.weight_type_name());
    fmt::print("| {:<20} | {:>10} | {:>10} | {:>7} | {:>6} | {:>14} | {:>20} |\n", "model", "size", "params", "threads",
               "kv", "test", "t/s");
    fmt::print("| {:-<20} | {:->10} | {:->10} | {:->7} | {:->6} | {:->14} | {:->20} |\n", "", "", "", "", "", "", "");
    for (const BenchResult& r : results) {
        fmt::print("| {:<20} | {:>10} | {:>10} | {:>7} | {:>6} | {:>14} | {:>20} |\n", model, format_bytes(m.n_bytes()),
                   format_count(m.n_params()), num_threads(), o.kv_type, r.test.name(),
                   fmt::format("{:.2f} ± {:.2f}", r.mean(), r.stddev()));
    }
}

int bench(const BenchOptions& o) {
    check_readable_file(o.model, "model file");
    if (o.n_prompt < 0 || o.n_gen < 0 || o.depth < 0) fail("-p, -n and -d must not be negative");
    if (o.n_prompt == 0 && o.n_gen == 0) fail("nothing to measure: -p and -n are both 0");
    if (o.reps <= 0) fail("-r must be positive, got {}", o.reps);
    if (o.chunk <= 0) fail("--chunk must be positive, got {}", o.chunk);
    set_num_threads(o.threads);
    auto model = Model::load(o.model);
    SessionOptions so;
    so.n_ctx = o.depth + std::max(o.n_prompt, o.n_gen) + 1;
    so.n_batch = o.chunk;
    so.kv_type = o.kv_type == "f32" ? KvType::F32 : KvType::F16;
    Session session(*model, so);

    std::vector<BenchTest> tests;
    if (o.n_prompt > 0) tests.push_back({BenchTest::Kind::Prompt, o.n_prompt, o.depth});
    if (o.n_gen > 0) tests.push_back({BenchTest::Kind::Generation, o.n_gen, o.depth});

    fmt::print(stderr, "model: {} ({})\nmatmul: {}, threads: {}, repetitions: {}\n", o.model, model->summary(),
               matmul_backend_description(), num_threads(), o.reps);
    std::mt19937 rng(1234);
    // Warm-up: touches every weight page and starts the thread team.
    session.reset();
    session.prefill(random_tokens(std::min(16, so.n_ctx - 1), session.n_vocab(), rng));
    session.decode(0);

    std::vector<BenchResult> results;
    for (const BenchTest& t : tests) {
        BenchResult r{t, {}};
        for (int i = 0; i < o.reps; ++i) r.tokens_per_second.push_back(run_once(session, t, rng));
        results.push_back(r);
    }
    print_table(*model, o, results);
    return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, Action& action) {
    auto o = std::make_shared<BenchOptions>();
    CLI::App* cmd = app.add_subcommand("bench", "measure prompt-processing and generation speed (like llama-bench)");
    cmd->add_option("-m,--model", o->model, "model file (GGUF)")->required();
    cmd->add_option("-p,--n-prompt", o->n_prompt, "prompt tokens per pp test; 0 = skip")->capture_default_str();
    cmd->add_option("-n,--n-gen", o->n_gen, "generated tokens per tg test; 0 = skip")->capture_default_str();
    cmd->add_option("-d,--depth", o->depth, "tokens already in the KV cache before each test")->capture_default_str();
    cmd->add_option("-t,--threads", o->threads, "threads (default: all hardware threads)");
    cmd->add_option("-r,--repetitions", o->reps, "repetitions of each test")->capture_default_str();
    cmd->add_option("-b,--chunk,--batch-size", o->chunk, "prefill chunk size")->capture_default_str();
    cmd->add_option("--kv-type,--cache-type", o->kv_type, "KV-cache element type")
        ->check(CLI::IsMember({"f16", "f32"}))
        ->capture_default_str();
    cmd->callback([o, &action] { action = [o] { return bench(*o); }; });
}

}  // namespace kvec::tools
