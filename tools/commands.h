// The `kvec` subcommands. Each file registers one subcommand on the CLI11 app: it declares its
// options and, when the subcommand is chosen, stores the action main() runs. Actions throw
// kvec::Error for user errors; main() prints "error: <message>" and exits with status 1.
#pragma once

#include <CLI/CLI.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvcache/kv_cache.h"
#include "model/model.h"
#include "model/session.h"
#include "tokenizer/tokenizer.h"
#include "util/mapped_file.h"

namespace kvec::tools {

using Action = std::function<int()>;

void add_run_command(CLI::App& app, Action& action);
void add_bench_command(CLI::App& app, Action& action);
void add_gen_model_command(CLI::App& app, Action& action);
void add_quantize_command(CLI::App& app, Action& action);
void add_info_command(CLI::App& app, Action& action);
void add_synth_command(CLI::App& app, Action& action);
void add_eval_command(CLI::App& app, Action& action);
void add_perplexity_command(CLI::App& app, Action& action);
void add_logits_command(CLI::App& app, Action& action);
void add_tokenize_command(CLI::App& app, Action& action);
void add_policies_command(CLI::App& app, Action& action);
void add_serve_command(CLI::App& app, Action& action);
void add_head_scores_command(CLI::App& app, Action& action);

// Shared helpers (common.cpp).
std::vector<std::string> split_commas(const std::string& s);  // "a,,b" -> {"a", "b"}
std::string format_bytes(size_t bytes);     // "1.25 MiB"
std::string format_count(int64_t n);        // "1.10 B", "68.4 M", "12.3 K"
void check_readable_file(const std::string& path, const char* what);  // throws kvec::Error
void check_threads(int threads);  // -t/--threads: >= 0 (0: all hardware threads); kvec::Error otherwise
// --mmap / --no-mmap: how the model's weights come into memory (LoadMode); neither leaves `mode`.
void add_load_flags(CLI::App* cmd, LoadMode& mode);

// What the commands that run a model open first: the forward pass's threads set (-t), the model
// loaded and its tokenizer (from the same file).
struct OpenModel {
    std::unique_ptr<Model> model;
    Tokenizer tokenizer;
};
OpenModel open_model(const std::string& path, LoadMode load, int threads);
// A session over `model`: context n_ctx (0: the training length), prefill chunks of n_batch, the
// cache's key and value types.
std::unique_ptr<Session> open_session(const Model& model, int32_t n_ctx, int32_t n_batch, KvType k, KvType v);

// KV cache element types (kv_cache.h): --cache-type-k/-ctk and --cache-type-v/-ctv as llama.cpp
// spells them (main() turns -ctk / -ctv into the long names: CLI11 cannot declare them), and
// `both_names` (--kv-type...) for keys and values at once; -ctk / -ctv win over it.
struct KvTypeFlags {
    std::string both = "f16";
    std::string k, v;  // empty: `both`
    KvType key_type() const;    // kvec::Error naming the flag for an unknown type
    KvType value_type() const;
};
void add_kv_type_flags(CLI::App* cmd, KvTypeFlags& flags, const std::string& both_names);
// "q8_0" when keys and values share the type, else "q8_0/q4_0" (keys/values).
std::string kv_types_name(KvType k, KvType v);
// A CLI11 check refusing an empty value (`-ctk ''` would otherwise read as "not given").
CLI::Validator non_empty();
// The long names of llama.cpp's -ctk / -ctv in argv (see add_kv_type_flags).
void expand_kv_type_short_flags(std::vector<std::string>& args);

}  // namespace kvec::tools
