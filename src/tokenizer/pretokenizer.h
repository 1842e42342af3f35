// Byte-level BPE pre-tokenizers (internal): the text is split into words by a list of regexes
// (PCRE2 with UTF + UCP, JIT-compiled), applied one after the other as llama.cpp's
// unicode_regex_split does: each regex splits every piece of the previous step into its matches
// and the gaps between them (the Hugging Face "Isolated" split behaviour).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvec::tok {

// A compiled PCRE2 pattern (UTF, UCP, invalid UTF-8 never matches). Thread-safe to use.
class Regex {
public:
    explicit Regex(const std::string& pattern);  // throws kvec::Error naming the pattern
    ~Regex();
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;

    const std::string& pattern() const { return pattern_; }
    // Splits text[begin, end) into matches and gaps; appends their [begin, end) byte offsets
    // (relative to `text`) to `out`.
    void split(std::string_view text, size_t begin, size_t end,
               std::vector<std::pair<size_t, size_t>>& out) const;
    // True if the whole of `s` is one match (used by tests).
    bool full_match(std::string_view s) const;

private:
    std::string pattern_;
    void* code_ = nullptr;  // pcre2_code_8*
};

enum class PreKind { DEFAULT, GPT2, LLAMA3, QWEN2, SMOLLM, GPT4O };

struct PreTokenizer {
    PreKind kind = PreKind::GPT2;
    std::string canonical;       // the llama.cpp name written to GGUF ("gpt-2", "llama-bpe", ...)
    bool ignore_merges = false;  // whole word emitted if it is a token (llama3), as llama.cpp
    bool nfc = false;            // NFC-normalise text before splitting (Qwen2's normalizer)
    std::vector<std::unique_ptr<Regex>> regexes;

    // Byte ranges [begin, end) of the words of `text`, in order, covering all of it.
    std::vector<std::pair<size_t, size_t>> split(std::string_view text) const;
};

// Builds the pre-tokenizer llama.cpp uses for tokenizer.ggml.pre = `name`; throws kvec::Error
// listing the supported names for an unknown one.
std::unique_ptr<PreTokenizer> make_pretokenizer(const std::string& name);
std::string
supported_pretokenizers();  // "default, gpt-2 (gpt2), llama-bpe (...), qwen2, smollm, gpt-4o"

// The Hugging Face Split regexes the importer recognises, and the `pre` name each maps to.
struct KnownSplitRegex {
    const char* pattern;
    const char* pre;
};
const std::vector<KnownSplitRegex>& known_split_regexes();

// Regex sources (the Hugging Face originals, with the case-insensitive contraction group written
// out as llama.cpp does).
extern const char* const kGpt2Regex;
extern const char* const kLlama3Regex;
extern const char* const kQwen2Regex;
extern const char* const kGpt4oRegex;

}  // namespace kvec::tok
