// kvec logits: the logits of every position of a token sequence, as raw float32, for comparisons
// with other engines (scripts/parity-vs-llama-cpp.sh runs it beside llama.cpp on the same tokens).
#include <fmt/format.h>

#include <cstdint>
#include <fstream>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "commands.h"
#include "engine/generator.h"
#include "model/model.h"
#include "model/session.h"
#include "util/error.h"
#include "util/threads.h"

namespace kvec::tools {

namespace {

struct LogitsOptions {
    std::string model;
    LoadMode load = LoadMode::Auto;
    std::string tokens;
    std::string out;
    int threads = 0;
    KvTypeFlags kv;
};

std::vector<int32_t> read_token_ids(const std::string& path) {
    std::ifstream in(path);
    std::vector<int32_t> ids;
    for (int64_t id; in >> id;) {
        if (id < 0 || id > std::numeric_limits<int32_t>::max()) fail("token file '{}': id {} is not a token id", path, id);
        ids.push_back(static_cast<int32_t>(id));
    }
    if (!in.eof()) fail("token file '{}' holds something other than whole numbers", path);
    if (ids.empty()) fail("token file '{}' holds no token ids", path);
    return ids;
}

int run_logits(const LogitsOptions& o) {
    check_readable_file(o.model, "model file");
    check_readable_file(o.tokens, "token file");
    check_threads(o.threads);
    const std::vector<int32_t> tokens = read_token_ids(o.tokens);
    std::ofstream out(o.out, std::ios::binary);
    if (!out) fail("cannot write '{}'", o.out);

    set_num_threads(o.threads);
    auto model = Model::load(o.model, o.load);
    // One forward step over the whole sequence, like llama.cpp given it as one batch.
    SessionOptions so;
    so.n_ctx = static_cast<int32_t>(tokens.size());
    so.n_batch = so.n_ctx;
    so.kv_type_k = o.kv.key_type();
    so.kv_type_v = o.kv.value_type();
    Session session(*model, so);
    const std::span<const float> logits = session.prefill(tokens, /*all_logits=*/true);

    out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size_bytes()));
    if (!out.flush()) fail("cannot write '{}'", o.out);
    fmt::print(stderr, "{} tokens x {} logits (float32) -> {}\n", tokens.size(), session.n_vocab(), o.out);
    return 0;
}

}  // namespace

void add_logits_command(CLI::App& app, Action& action) {
    auto o = std::make_shared<LogitsOptions>();
    CLI::App* cmd = app.add_subcommand(
        "logits", "write the logits of every position of a token sequence (raw float32 [tokens, vocab])");
    cmd->add_option("-m,--model", o->model, "model file (GGUF)")->required();
    add_load_flags(cmd, o->load);
    cmd->add_option("--tokens", o->tokens, "file of token ids separated by white space (used as given: no BOS added)")
        ->required();
    cmd->add_option("-o,--output", o->out, "output file: float32 [tokens, vocab], row i after token i")->required();
    cmd->add_option("-t,--threads", o->threads, "threads (default: all hardware threads)");
    add_kv_type_flags(cmd, o->kv, "--kv-type");
    cmd->callback([o, &action] { action = [o] { return run_logits(*o); }; });
}

}  // namespace kvec::tools
