// kvec run: generate text from a prompt, streaming it, then print speed and KV-cache figures.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>

#include "commands.h"
#include "engine/generator.h"
#include "model/model.h"
#include "model/session.h"
#include "tensor/matmul.h"
#include "util/error.h"

namespace kvec::tools {

namespace {

struct RunOptions {
    std::string model;
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
    int chunk = 512;
    std::string kv_type = "f16";
    std::vector<std::string> stop;
    bool echo = false;
};

std::string read_text_file(const std::string& path) {
    check_readable_file(path, "prompt file");
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot read prompt file '{}'", path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

int run(const RunOptions& o) {
    if (o.prompt.empty() == o.file.empty()) fail("give the prompt with exactly one of -p/--prompt or -f/--file");
    const std::string prompt = o.file.empty() ? o.prompt : read_text_file(o.file);
    check_readable_file(o.model, "model file");
    if (o.chunk <= 0) fail("--chunk must be positive, got {}", o.chunk);
    if (o.ctx < 0) fail("--ctx-size must be positive, got {}", o.ctx);
    const KvType kv_type = o.kv_type == "f32" ? KvType::F32 : KvType::F16;

    set_num_threads(o.threads);
    auto model = Model::load(o.model);
    const Tokenizer tokenizer = Tokenizer::from_gguf(model->file());
    SessionOptions so;
    so.n_ctx = o.ctx;
    so.n_batch = o.chunk;
    so.kv_type = kv_type;
    Session session(*model, so);
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
               num_threads(), session.n_ctx(), session.options().n_batch, kv_type_name(kv_type),
               matmul_backend_description(), g.sampling.seed);
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
    fmt::print(stderr, "stopped:    {}\n", stop_reason_name(s.stop_reason));
    return 0;
}

}  // namespace

void add_run_command(CLI::App& app, Action& action) {
    auto o = std::make_shared<RunOptions>();
    CLI::App* cmd = app.add_subcommand("run", "generate text from a prompt (streams it, then prints speed and KV-cache bytes)");
    cmd->add_option("-m,--model", o->model, "model file (GGUF)")->required();
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
    cmd->add_option("-b,--chunk,--batch-size", o->chunk, "prefill chunk size (tokens per forward step)")
        ->capture_default_str();
    cmd->add_option("--kv-type,--cache-type", o->kv_type, "KV-cache element type")
        ->check(CLI::IsMember({"f16", "f32"}))
        ->capture_default_str();
    cmd->add_option("--stop,-r,--reverse-prompt", o->stop, "stop when this text appears (repeatable)");
    cmd->add_flag("--echo", o->echo, "print the prompt before the generated text");
    cmd->callback([o, &action] { action = [o] { return run(*o); }; });
}

}  // namespace kvec::tools
