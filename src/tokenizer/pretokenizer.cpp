#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenizer.h"

#include <pcre2.h>

#include "util/error.h"

namespace kvec::tok {

const char* const kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// o200k (GPT-4o, gpt-oss: tokenizer.ggml.pre "gpt-4o"), the tokenizer.json original that
// llama.cpp's LLAMA_VOCAB_PRE_TYPE_GPT4O quotes (PCRE2 reads its \p{Lu} classes and (?i:)).
const char* const kGpt4oRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

pcre2_code* as_code(void* p) { return static_cast<pcre2_code*>(p); }

std::string pcre2_message(int code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(code, buf, sizeof buf);
    return reinterpret_cast<const char*>(buf);
}

}  // namespace

Regex::Regex(const std::string& pattern) : pattern_(pattern) {
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_offset, nullptr);
    if (code == nullptr) {
        fail("tokenizer: cannot compile regex '{}': {} at offset {}", pattern, pcre2_message(err),
             static_cast<size_t>(err_offset));
    }
    // JIT is an optimisation: without it (unsupported CPU) the interpreter is used.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    code_ = code;
}

Regex::~Regex() { pcre2_code_free(as_code(code_)); }

void Regex::split(std::string_view text, size_t begin, size_t end,
                  std::vector<std::pair<size_t, size_t>>& out) const {
    if (begin >= end) return;
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(as_code(code_), nullptr);
    KVEC_CHECK(md != nullptr);
    // The subject is only the piece, so lookaheads do not see past it (as in llama.cpp).
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + begin);
    const size_t len = end - begin;
    size_t pos = 0;   // search start
    size_t last = 0;  // end of the previous match (start of the current gap)
    while (pos < len) {
        const int rc = pcre2_match(as_code(code_), subject, len, pos, 0, md, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) fail("tokenizer: regex '{}' failed: {}", pattern_, pcre2_message(rc));
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t ms = ov[0], me = ov[1];
        if (me == ms) {  // empty match: none of our patterns has one, but never loop forever
            pos = ms + 1;
            while (pos < len && (static_cast<uint8_t>(subject[pos]) & 0xC0) == 0x80) ++pos;
            continue;
        }
        if (ms > last) out.emplace_back(begin + last, begin + ms);
        out.emplace_back(begin + ms, begin + me);
        last = pos = me;
    }
    if (last < len) out.emplace_back(begin + last, end);
    pcre2_match_data_free(md);
}

bool Regex::full_match(std::string_view s) const {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(as_code(code_), nullptr);
    const int rc = pcre2_match(as_code(code_), reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0,
                               PCRE2_ANCHORED | PCRE2_ENDANCHORED, md, nullptr);
    pcre2_match_data_free(md);
    return rc >= 0;
}

std::vector<std::pair<size_t, size_t>> PreTokenizer::split(std::string_view text) const {
    std::vector<std::pair<size_t, size_t>> pieces;  // [n_words] byte ranges into text
    if (text.empty()) return pieces;
    pieces.emplace_back(0, text.size());
    std::vector<std::pair<size_t, size_t>> next;
    for (const auto& re : regexes) {
        next.clear();
        next.reserve(pieces.size() * 2);
        for (const auto& [b, e] : pieces) re->split(text, b, e, next);
        pieces.swap(next);
    }
    return pieces;
}

std::string supported_pretokenizers() {
    return "default, gpt-2 (alias gpt2), llama-bpe (aliases llama3, llama-v3), qwen2, smollm, "
           "gpt-4o";
}

std::unique_ptr<PreTokenizer> make_pretokenizer(const std::string& name) {
    auto pre = std::make_unique<PreTokenizer>();
    std::vector<std::string> patterns;
    if (name == "default") {
        // llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEFAULT list (old conversions without a pre name).
        pre->kind = PreKind::DEFAULT;
        pre->canonical = "default";
        patterns = {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2Regex, R"(\p{N}+)", "[0-9][0-9][0-9]"};
    } else if (name == "gpt-2" || name == "gpt2") {
        pre->kind = PreKind::GPT2;
        pre->canonical = "gpt-2";
        patterns = {kGpt2Regex};
    } else if (name == "llama-bpe" || name == "llama3" || name == "llama-v3") {
        pre->kind = PreKind::LLAMA3;
        pre->canonical = "llama-bpe";
        pre->ignore_merges = true;
        patterns = {kLlama3Regex};
    } else if (name == "qwen2") {
        pre->kind = PreKind::QWEN2;
        pre->canonical = "qwen2";
        pre->nfc = true;
        patterns = {kQwen2Regex};
    } else if (name == "smollm") {
        // Digits split one by one, then the GPT-2 regex (HF: Digits(individual) + ByteLevel).
        pre->kind = PreKind::SMOLLM;
        pre->canonical = "smollm";
        patterns = {R"(\p{N})", kGpt2Regex};
    } else if (name == "gpt-4o") {
        // o200k (gpt-oss); llama.cpp keeps the merges and spaces as they are for it.
        pre->kind = PreKind::GPT4O;
        pre->canonical = "gpt-4o";
        patterns = {kGpt4oRegex};
    } else {
        fail("tokenizer: unknown pre-tokenizer '{}' (supported: {})", name,
             supported_pretokenizers());
    }
    for (const auto& p : patterns) pre->regexes.push_back(std::make_unique<Regex>(p));
    return pre;
}

const std::vector<KnownSplitRegex>& known_split_regexes() {
    static const std::vector<KnownSplitRegex> known = {
        // Llama 3 (meta-llama/Meta-Llama-3-8B and later 3.x).
        {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
         "llama-bpe"},
        // Qwen2 / Qwen2.5 / Qwen3.
        {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
         "qwen2"},
        // o200k: GPT-4o, gpt-oss.
        {kGpt4oRegex, "gpt-4o"},
        // GPT-2, written out as a Split.
        {R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", "gpt-2"},
        {R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))", "gpt-2"},
    };
    return known;
}

}  // namespace kvec::tok
