// llama-tokens: llama.cpp's tokenizer on a text file, the peer's side of the tokenizer check in
// scripts/real-models-check.sh (kvec's side is `kvec tokenize`, with the same flags).
//
//   llama-tokens MODEL.gguf TEXT.txt [--lines | --split SEP] [--no-bos] [--parse-special]
//
// Prints the ids of the whole file on one line, or with --lines one line of ids per line of the
// file (the newline not tokenized), or with --split one line per piece between separators SEP. BOS (EOS) is added as the vocabulary asks unless --no-bos;
// special-token text becomes the special token only with --parse-special. Only the vocabulary is
// loaded (llama_model_params::vocab_only).
#include <llama.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

int fail(const char* what) {
    std::fprintf(stderr, "llama-tokens: %s\n", what);
    return 1;
}

void log_errors(ggml_log_level level, const char* text, void*) {
    if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

bool tokenize(const llama_vocab* vocab, const std::string& text, bool add_special, bool parse_special,
              std::string& out) {
    std::vector<llama_token> ids(text.size() + 8);
    int n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), ids.data(),
                           static_cast<int32_t>(ids.size()), add_special, parse_special);
    if (n < 0) {
        ids.resize(static_cast<size_t>(-n));
        n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), ids.data(),
                           static_cast<int32_t>(ids.size()), add_special, parse_special);
        if (n < 0) return false;
    }
    for (int i = 0; i < n; ++i) {
        if (i > 0) out += ' ';
        out += std::to_string(ids[static_cast<size_t>(i)]);
    }
    out += '\n';
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: llama-tokens MODEL.gguf TEXT.txt [--lines | --split SEP] [--no-bos] [--parse-special]\n");
        return 2;
    }
    bool add_special = true, parse_special = false;
    std::string sep;
    for (int i = 3; i < argc; ++i) {
        if (std::strcmp(argv[i], "--lines") == 0) sep = "\n";
        else if (std::strcmp(argv[i], "--split") == 0 && i + 1 < argc) sep = argv[++i];
        else if (std::strcmp(argv[i], "--no-bos") == 0) add_special = false;
        else if (std::strcmp(argv[i], "--parse-special") == 0) parse_special = true;
        else return fail("unknown flag");
    }
    std::ifstream in(argv[2], std::ios::binary);
    if (!in) return fail("cannot read the text file");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

    llama_log_set(log_errors, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model* model = llama_model_load_from_file(argv[1], mp);
    if (!model) return fail("llama.cpp could not load the model");
    const llama_vocab* vocab = llama_model_get_vocab(model);

    std::vector<std::string> pieces;
    if (sep.empty()) {
        pieces.push_back(text);
    } else {
        size_t b = 0;
        for (size_t e; (e = text.find(sep, b)) != std::string::npos; b = e + sep.size()) pieces.push_back(text.substr(b, e - b));
        if (b < text.size()) pieces.push_back(text.substr(b));
    }
    std::string out;
    bool ok = true;
    for (size_t i = 0; ok && i < pieces.size(); ++i) ok = tokenize(vocab, pieces[i], add_special, parse_special, out);
    if (!ok) return fail("llama_tokenize failed");
    std::fwrite(out.data(), 1, out.size(), stdout);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
