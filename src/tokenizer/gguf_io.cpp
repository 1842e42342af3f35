// Tokenizer <-> GGUF metadata (tokenizer.ggml.* and tokenizer.chat_template), with llama.cpp's
// defaults for keys a file leaves out.
#include <string>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace kvec {

namespace {

constexpr const char* kModel = "tokenizer.ggml.model";
constexpr const char* kPre = "tokenizer.ggml.pre";
constexpr const char* kTokens = "tokenizer.ggml.tokens";
constexpr const char* kScores = "tokenizer.ggml.scores";
constexpr const char* kTypes = "tokenizer.ggml.token_type";
constexpr const char* kMerges = "tokenizer.ggml.merges";
constexpr const char* kBos = "tokenizer.ggml.bos_token_id";
constexpr const char* kEos = "tokenizer.ggml.eos_token_id";
constexpr const char* kEot = "tokenizer.ggml.eot_token_id";
constexpr const char* kUnk = "tokenizer.ggml.unknown_token_id";
constexpr const char* kPad = "tokenizer.ggml.padding_token_id";
constexpr const char* kAddBos = "tokenizer.ggml.add_bos_token";
constexpr const char* kAddEos = "tokenizer.ggml.add_eos_token";
constexpr const char* kAddSpacePrefix = "tokenizer.ggml.add_space_prefix";
constexpr const char* kChatTemplate = "tokenizer.chat_template";

}  // namespace

Tokenizer Tokenizer::from_gguf(const gguf::File& file) {
    using gguf::ValueType;
    VocabData d;
    d.model = file.get_string(kModel);
    const bool spm = d.model == "llama";
    if (!spm && d.model != "gpt2") {
        fail(
            "'{}': unknown tokenizer model '{}' in {} (supported: llama (SentencePiece BPE), gpt2 "
            "(byte-level BPE))",
            file.path(), d.model, kModel);
    }
    d.pre = file.get_string(kPre, "default");
    if (d.pre.empty()) d.pre = "default";

    d.tokens = file.get_array(kTokens, ValueType::STRING).strings;
    const size_t n = d.tokens.size();
    if (n == 0) fail("'{}': {} is empty", file.path(), kTokens);
    if (file.has(kScores)) {
        const auto& s = file.get_array(kScores, ValueType::FLOAT32).floats;
        if (s.size() != n)
            fail("'{}': {} has {} entries for {} tokens", file.path(), kScores, s.size(), n);
        d.scores.assign(s.begin(), s.end());
    }
    if (file.has(kTypes)) {
        const auto& t = file.get_array(kTypes, ValueType::INT32).ints;
        if (t.size() != n)
            fail("'{}': {} has {} entries for {} tokens", file.path(), kTypes, t.size(), n);
        d.types.resize(n);
        for (size_t i = 0; i < n; ++i) {
            if (t[i] < 0 || t[i] > static_cast<int64_t>(TokenType::BYTE)) {
                fail("'{}': {}[{}] = {} is not a token type", file.path(), kTypes, i, t[i]);
            }
            d.types[i] = static_cast<TokenType>(t[i]);
        }
    }
    if (!spm) {
        if (!file.has(kMerges))
            fail("'{}': byte-level BPE vocabulary without {}", file.path(), kMerges);
        d.merges = file.get_array(kMerges, ValueType::STRING).strings;
    }

    // llama.cpp's defaults, then the file's keys.
    const bool llama3_pre = d.pre == "llama-bpe" || d.pre == "llama3" || d.pre == "llama-v3";
    if (spm) {
        d.bos_id = 1;
        d.eos_id = 2;
        d.unk_id = 0;
        d.add_bos = true;
        d.add_space_prefix = true;
    } else {
        d.add_bos = llama3_pre;
        d.add_space_prefix = false;
    }
    const std::pair<const char*, int32_t*> ids[] = {{kBos, &d.bos_id},
                                                    {kEos, &d.eos_id},
                                                    {kEot, &d.eot_id},
                                                    {kUnk, &d.unk_id},
                                                    {kPad, &d.pad_id}};
    for (const auto& [key, id] : ids) {
        if (!file.has(key)) {
            if (*id >= static_cast<int64_t>(n)) *id = -1;
            continue;
        }
        const uint64_t v = file.get_uint(key);
        if (v >= n)
            fail("'{}': {} = {} is not a token id (vocabulary of {})", file.path(), key, v, n);
        *id = static_cast<int32_t>(v);
    }
    d.add_bos = file.get_bool(kAddBos, d.add_bos);
    d.add_eos = file.get_bool(kAddEos, d.add_eos);
    if (spm) d.add_space_prefix = file.get_bool(kAddSpacePrefix, d.add_space_prefix);
    d.chat_template = file.get_string(kChatTemplate, "");
    try {
        return Tokenizer(std::move(d));
    } catch (const Error& e) {
        fail("'{}': {}", file.path(), e.what());
    }
}

void Tokenizer::write_gguf_metadata(gguf::Writer& writer) const {
    const VocabData& d = data();
    writer.set_string(kModel, d.model);
    writer.set_string(kPre, d.pre);
    writer.set(kTokens, gguf::Value::from_strings(d.tokens));
    if (!d.scores.empty()) writer.set(kScores, gguf::Value::from_f32s(d.scores));
    std::vector<int32_t> types(d.types.size());  // [n_vocab]
    for (size_t i = 0; i < types.size(); ++i) types[i] = static_cast<int32_t>(d.types[i]);
    writer.set(kTypes, gguf::Value::from_i32s(types));
    if (d.model == "gpt2") writer.set(kMerges, gguf::Value::from_strings(d.merges));
    const std::pair<const char*, int32_t> ids[] = {
        {kBos, d.bos_id}, {kEos, d.eos_id}, {kEot, d.eot_id}, {kUnk, d.unk_id}, {kPad, d.pad_id}};
    for (const auto& [key, id] : ids) {
        if (id >= 0) writer.set_u32(key, static_cast<uint32_t>(id));
    }
    writer.set_bool(kAddBos, d.add_bos);
    writer.set_bool(kAddEos, d.add_eos);
    writer.set_bool(kAddSpacePrefix, d.add_space_prefix);
    if (!d.chat_template.empty()) writer.set_string(kChatTemplate, d.chat_template);
}

}  // namespace kvec
