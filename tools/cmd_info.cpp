// kvec info: print a GGUF file's metadata (long arrays abbreviated), tensors and, for a supported
// model, its hyper-parameters.
#include <fmt/format.h>

#include <memory>

#include "commands.h"
#include "gguf/gguf.h"
#include "engine/generator.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/terminal.h"

namespace kvec::tools {

namespace {

struct InfoOptions {
    std::string model;
    bool no_tensors = false;
    int array_items = 8;
};

// A file-controlled string on the terminal: control characters escaped, cut after `max` bytes.
std::string quoted(const std::string& s, size_t max = 60) {
    std::string out;
    for (char c : s.substr(0, max)) out += c == '"' ? std::string("\\\"") : std::string(1, c);
    return "\"" + escape_control(out) + (s.size() > max ? "..." : "") + "\"";
}

std::string value_string(const gguf::Value& v, size_t items) {
    using gguf::ValueType;
    switch (v.type) {
        case ValueType::STRING: return quoted(v.str, 200);
        case ValueType::BOOL: return v.b ? "true" : "false";
        case ValueType::FLOAT32: return fmt::format("{}", static_cast<float>(v.f));
        case ValueType::FLOAT64: return fmt::format("{}", v.f);
        case ValueType::UINT64: return fmt::format("{}", v.u);
        case ValueType::ARRAY: {
            const size_t n = v.array_size();
            std::vector<std::string> shown;
            for (size_t i = 0; i < std::min(n, items); ++i) {
                if (!v.strings.empty()) shown.push_back(quoted(v.strings[i], 24));
                else if (!v.ints.empty()) shown.push_back(fmt::format("{}", v.ints[i]));
                else if (!v.floats.empty()) shown.push_back(v.array_type == ValueType::FLOAT32
                                                                ? fmt::format("{}", static_cast<float>(v.floats[i]))
                                                                : fmt::format("{}", v.floats[i]));
                else shown.push_back("[...]");
            }
            return fmt::format("[{}{}] ({} {})", fmt::join(shown, ", "), n > items ? ", ..." : "", n,
                               gguf::value_type_name(v.array_type));
        }
        default: return fmt::format("{}", v.i);
    }
}

int info(const InfoOptions& o) {
    check_readable_file(o.model, "model file");
    auto file = gguf::File::open(o.model);
    fmt::print("file: {} (GGUF v{}, {}, alignment {})\n", o.model, file->version(), format_bytes(file->file_size()),
               file->alignment());
    fmt::print("\nmetadata ({} keys):\n", file->metadata().size());
    for (const auto& [key, value] : file->metadata()) {
        fmt::print("  {:<44} = {}\n", escape_control(key), value_string(value, static_cast<size_t>(o.array_items)));
    }
    if (!o.no_tensors) {
        fmt::print("\ntensors ({}):\n", file->tensors().size());
        for (const auto& t : file->tensors()) {
            std::vector<int64_t> dims(t.ne.begin(), t.ne.begin() + std::max(1, t.n_dims));
            fmt::print("  {:<32} {:<6} [{}] {}\n", escape_control(t.name), ggml_type_name(t.type), fmt::join(dims, ", "),
                       format_bytes(t.nbytes));
        }
    }
    fmt::print("\nmodel: ");
    try {
        auto model = Model::load(o.model, LoadMode::Map);  // read the header only
        // What `kvec run` needs besides the weights: a tokenizer whose tokens the model covers.
        const Tokenizer tokenizer = Tokenizer::from_gguf(model->file());
        check_tokenizer_fits(tokenizer, model->config().n_vocab);
        const ModelConfig& c = model->config();
        fmt::print("{}\n", model->summary());
        fmt::print("  params {}, context {}, rope {} (base {}, dims {}, scaling {}{}), rms eps {}, {} output\n",
                   format_count(model->n_params()), c.n_ctx_train, c.rope_mode == ops::RopeMode::Norm ? "norm" : "neox",
                   c.rope_freq_base, c.n_rot, c.rope_scaling, model->weights().rope_freqs.empty() ? "" : " + rope_freqs",
                   c.rms_eps, model->weights().tied_output ? "tied" : "separate");
    } catch (const Error& e) {
        fmt::print("not runnable by kvec: {}\n", e.what());
    }
    return 0;
}

}  // namespace

void add_info_command(CLI::App& app, Action& action) {
    auto o = std::make_shared<InfoOptions>();
    CLI::App* cmd = app.add_subcommand("info", "print a GGUF file's metadata, tensors and hyper-parameters");
    cmd->add_option("model", o->model, "model file (GGUF)")->required();
    cmd->add_flag("--no-tensors", o->no_tensors, "omit the tensor list");
    cmd->add_option("--array-items", o->array_items, "array elements shown before '...'")->capture_default_str();
    cmd->callback([o, &action] { action = [o] { return info(*o); }; });
}

}  // namespace kvec::tools
