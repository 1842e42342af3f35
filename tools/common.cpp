#include <fmt/format.h>

#include <filesystem>
#include <sstream>

#include "commands.h"
#include "util/error.h"
#include "util/threads.h"

namespace kvec::tools {

OpenModel open_model(const std::string& path, LoadMode load, int threads) {
    set_num_threads(threads);
    std::unique_ptr<Model> model = Model::load(path, load);
    Tokenizer tokenizer = Tokenizer::from_gguf(model->file());
    return {std::move(model), std::move(tokenizer)};
}

std::unique_ptr<Session> open_session(const Model& model, int32_t n_ctx, int32_t n_batch, KvType k, KvType v) {
    SessionOptions so;
    so.n_ctx = n_ctx;
    so.n_batch = n_batch;
    so.kv_type_k = k;
    so.kv_type_v = v;
    return std::make_unique<Session>(model, so);
}

std::vector<std::string> split_commas(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string piece;
    while (std::getline(ss, piece, ',')) {
        if (!piece.empty()) out.push_back(piece);
    }
    return out;
}

std::string format_bytes(size_t bytes) {
    const double b = static_cast<double>(bytes);
    if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
    if (b >= 1024.0 * 1024) return fmt::format("{:.2f} MiB", b / (1024.0 * 1024));
    if (b >= 1024.0) return fmt::format("{:.2f} KiB", b / 1024.0);
    return fmt::format("{} B", bytes);
}

std::string format_count(int64_t n) {
    const double x = static_cast<double>(n);
    if (x >= 1e9) return fmt::format("{:.2f} B", x / 1e9);
    if (x >= 1e6) return fmt::format("{:.2f} M", x / 1e6);
    if (x >= 1e3) return fmt::format("{:.2f} K", x / 1e3);
    return fmt::format("{}", n);
}

void check_readable_file(const std::string& path, const char* what) {
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (ec || !std::filesystem::exists(status)) fail("{} '{}' does not exist", what, path);
    if (!std::filesystem::is_regular_file(status)) fail("{} '{}' is not a regular file", what, path);
}

void check_threads(int threads) {
    if (threads < 0) fail("-t/--threads must be >= 0 (0: all hardware threads), got {}", threads);
}

void add_load_flags(CLI::App* cmd, LoadMode& mode) {
    CLI::Option* map = cmd->add_flag_callback(
        "--mmap", [&mode] { mode = LoadMode::Map; },
        "map the weights file instead of copying it into 2 MiB pages: less private memory, slower decode");
    CLI::Option* copy = cmd->add_flag_callback(
        "--no-mmap", [&mode] { mode = LoadMode::Copy; },
        "copy the weights into anonymous memory advised for 2 MiB pages even if the model takes more than "
        "half of the available memory (the default copies where transparent huge pages are on and it fits)");
    map->excludes(copy);
}

KvType KvTypeFlags::key_type() const {
    return k.empty() ? parse_kv_type(both, "--kv-type") : parse_kv_type(k, "--cache-type-k");
}

KvType KvTypeFlags::value_type() const {
    return v.empty() ? parse_kv_type(both, "--kv-type") : parse_kv_type(v, "--cache-type-v");
}

void add_kv_type_flags(CLI::App* cmd, KvTypeFlags& flags, const std::string& both_names) {
    const std::string types = kv_type_list();
    cmd->add_option(both_names, flags.both, "KV-cache element type of keys and values: " + types)
        ->capture_default_str()
        ->check(non_empty());
    cmd->add_option("--cache-type-k", flags.k, "KV-cache element type of the keys (-ctk; default: --kv-type)")
        ->check(non_empty());
    cmd->add_option("--cache-type-v", flags.v, "KV-cache element type of the values (-ctv; default: --kv-type)")
        ->check(non_empty());
}

CLI::Validator non_empty() {
    return CLI::Validator([](std::string& s) { return s.empty() ? std::string("must not be empty") : std::string(); },
                          "NOT EMPTY");
}

std::string kv_types_name(KvType k, KvType v) {
    return k == v ? std::string(kv_type_name(k)) : fmt::format("{}/{}", kv_type_name(k), kv_type_name(v));
}

void expand_kv_type_short_flags(std::vector<std::string>& args) {
    for (std::string& a : args) {
        if (a == "-ctk") a = "--cache-type-k";
        if (a == "-ctv") a = "--cache-type-v";
    }
}

}  // namespace kvec::tools
