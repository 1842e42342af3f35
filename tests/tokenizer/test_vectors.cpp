// llama.cpp's tokenizer test vectors (data/tokenizer-vectors): every input must tokenize to the
// expected ids (no BOS, parse_special off), and decode back to the input.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "test_common.h"

namespace kvec {
namespace {

struct Vectors {
    std::vector<std::string> inputs;
    std::vector<std::vector<int32_t>> expected;
};

// Inputs are separated (and ended) by "\n__ggml_vocab_test__\n"; the .out file has one line of
// space-separated ids per input.
Vectors load_vectors(const std::string& name) {
    const std::string base =
        test::source_path("data/tokenizer-vectors/ggml-vocab-" + name + ".gguf");
    const std::string inp = test::read_file(base + ".inp");
    const std::string out = test::read_file(base + ".out");
    Vectors v;
    const std::string sep = "\n__ggml_vocab_test__\n";
    size_t pos = 0;
    while (true) {
        const size_t hit = inp.find(sep, pos);
        if (hit == std::string::npos) break;
        v.inputs.push_back(inp.substr(pos, hit - pos));
        pos = hit + sep.size();
    }
    std::istringstream lines(out);
    std::string line;
    while (std::getline(lines, line)) {
        std::istringstream ids(line);
        std::vector<int32_t> row;
        int32_t id;
        while (ids >> id) row.push_back(id);
        v.expected.push_back(row);
    }
    return v;
}

std::string show(const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s += " " + std::to_string(id);
    return s;
}

class VocabVectors : public ::testing::TestWithParam<const char*> {};

// One test per vocabulary (each ctest test is a process that loads its vocabulary once).
TEST_P(VocabVectors, EncodeMatchesLlamaCppAndDecodeRoundTrips) {
    const std::string name = GetParam();
    const Vectors v = load_vectors(name);
    ASSERT_EQ(v.inputs.size(), 46u);
    ASSERT_EQ(v.inputs.size(), v.expected.size());
    const Tokenizer& tok = test::vocab(name);
    size_t pass = 0;
    for (size_t i = 0; i < v.inputs.size(); ++i) {
        const auto ids = tok.encode(v.inputs[i], /*add_special=*/false, /*parse_special=*/false);
        if (ids == v.expected[i]) {
            ++pass;
        } else {
            ADD_FAILURE() << name << " vector " << i << " '" << v.inputs[i]
                          << "'\n  expected:" << show(v.expected[i])
                          << "\n  got:     " << show(ids);
        }
        EXPECT_EQ(tok.decode(ids), v.inputs[i]) << name << " vector " << i;
        // With BOS (when the vocabulary adds one) and skip_special, the same text comes back.
        EXPECT_EQ(tok.decode(tok.encode(v.inputs[i], true, false), /*skip_special=*/true),
                  v.inputs[i])
            << name << " vector " << i;
    }
    std::printf("[ vectors  ] %s: %zu/%zu pass\n", name.c_str(), pass, v.inputs.size());
    EXPECT_EQ(pass, v.inputs.size());
}

// A SentencePiece-style tokenizer.json (byte fallback, "▁" normalizer) imported as "llama" must
// tokenize like Hugging Face's BPE does (ids from transformers.js, tests/tokenizer/data/README.md).
TEST(HfSentencePiece, MatchesTransformersJs) {
    Vectors v = load_vectors("llama-spm");
    v.expected.clear();
    std::istringstream lines(
        test::read_file(test::source_path("tests/tokenizer/data/lenml-llama2.out")));
    std::string line;
    while (std::getline(lines, line)) {
        std::istringstream ids(line);
        std::vector<int32_t> row;
        int32_t id;
        while (ids >> id) row.push_back(id);
        v.expected.push_back(row);
    }
    ASSERT_EQ(v.inputs.size(), v.expected.size());
    const Tokenizer& tok = test::vocab("hf-spm");
    EXPECT_EQ(tok.data().model, "llama");
    size_t pass = 0;
    for (size_t i = 0; i < v.inputs.size(); ++i) {
        const auto ids = tok.encode(v.inputs[i], false, false);
        if (ids == v.expected[i]) {
            ++pass;
        } else {
            ADD_FAILURE() << "vector " << i << " '" << v.inputs[i]
                          << "'\n  expected:" << show(v.expected[i])
                          << "\n  got:     " << show(ids);
        }
        EXPECT_EQ(tok.decode(ids), v.inputs[i]) << "vector " << i;
    }
    std::printf("[ vectors  ] hf-spm (lenml llama2 tokenizer.json): %zu/%zu pass\n", pass,
                v.inputs.size());
}

INSTANTIATE_TEST_SUITE_P(Tokenizer, VocabVectors,
                         ::testing::Values("llama-spm", "gpt-2", "llama-bpe", "qwen2"),
                         [](const auto& info) {
                             std::string s = info.param;
                             for (char& c : s) {
                                 if (c == '-') c = '_';
                             }
                             return s;
                         });

}  // namespace
}  // namespace kvec
