// Helper of the tokenizer parity test (test_tokenizer_parity.py): tokenizes each input file with
// the vocabulary of a GGUF file, as the engine does, and prints one line of ids per file.
//
//   train_tokenize MODEL.gguf TEXT_FILE...   ->  "id id id ...\n" per file (no BOS)
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s MODEL.gguf TEXT_FILE...\n", argv[0]);
        return 2;
    }
    try {
        auto file = kvec::gguf::File::open(argv[1]);
        const kvec::Tokenizer tok = kvec::Tokenizer::from_gguf(*file);
        for (int i = 2; i < argc; ++i) {
            std::ifstream in(argv[i], std::ios::binary);
            if (!in) kvec::fail("cannot open '{}'", argv[i]);
            std::stringstream ss;
            ss << in.rdbuf();
            const std::string text = ss.str();
            const std::vector<int32_t> ids = tok.encode(text, /*add_special=*/false);  // [n_tokens]
            std::string line;
            for (size_t j = 0; j < ids.size(); ++j) {
                if (j) line.push_back(' ');
                line += std::to_string(ids[j]);
            }
            std::cout << line << '\n';
        }
    } catch (const kvec::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
