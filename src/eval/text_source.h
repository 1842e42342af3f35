// Natural text for the haystacks of the synthetic suite: documents split into sentences.
//
// Two kinds of source:
//   - the held-out text bundled in data/text/ (TextSource::heldout): State of the Union addresses
//     of the years >= 2001, listed in data/text/heldout.json. The eval split uses only this.
//   - training text (TextSource::from_files): any other plain-text or JSON files; the train split
//     uses only this, and from_files refuses a file that repeats held-out sentences.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvec::eval {

// Splits text into sentences. Whitespace runs (line breaks included) become one space. A sentence
// ends at '.', '!' or '?' (plus closing quotes/brackets) followed by a space and an upper-case
// letter, a digit, a quote or an opening bracket, except after common abbreviations ("Mr.",
// "Dr.", "St.", ...), single capital initials ("W.") and dotted forms ("U.S."). Sentences longer
// than max_chars are cut at "; ", else ", ", else a space, so no piece exceeds max_chars (unless
// it is one word). Returns pieces in order, trimmed, none empty.
std::vector<std::string> split_sentences(std::string_view text, size_t max_chars = 600);

// data/text/ of this checkout: $KVEC_TEXT_DIR if set, else <source dir>/data/text.
std::string default_text_dir();

// Halves of the held-out text, for a development/test protocol: dev = the addresses of even
// years (for choosing defaults), test = those of odd years (for reporting); all = every address.
enum class HeldoutSplit { All, Dev, Test };
const char* heldout_split_name(HeldoutSplit split);        // "all" / "dev" / "test"
HeldoutSplit parse_heldout_split(std::string_view text);  // kvec::Error for anything else
// The held-out files of a split (paths under dir, as heldout.json lists them), and their text
// joined by blank lines (`kvec eval --fidelity heldout:dev`).
std::vector<std::string> heldout_files(const std::string& dir, HeldoutSplit split);
std::string heldout_text(const std::string& dir, HeldoutSplit split);

class TextSource {
  public:
    TextSource() = default;

    // The held-out text: reads <dir>/heldout.json and every file it lists under "files" (only
    // those of the split's years). Throws kvec::Error naming the missing or malformed file.
    static TextSource heldout(const std::string& dir = default_text_dir(),
                              HeldoutSplit split = HeldoutSplit::All);

    // Training text. Each path is a UTF-8 text file, or (name ending in ".json") a JSON object with
    // a "text" string or an array of such objects or of strings. When `exclude` is given, a file
    // sharing 10 or more long sentences (>= 80 characters) with it is refused (kvec::Error).
    static TextSource from_files(const std::vector<std::string>& paths,
                                 const TextSource* exclude = nullptr);

    // From texts in memory (tests, tools); `name` describes the source in messages.
    static TextSource from_texts(const std::vector<std::string>& texts, std::string name);

    size_t n_sentences() const { return spans_.size(); }
    std::string_view sentence(size_t i) const {  // i < n_sentences()
        return std::string_view(storage_).substr(spans_[i].offset, spans_[i].size);
    }
    size_t n_chars() const { return storage_.size(); }
    size_t n_documents() const { return n_documents_; }
    bool is_heldout() const { return heldout_; }
    const std::string& name() const { return name_; }

    // Number of long sentences (>= 80 characters) of `text` that this source contains.
    size_t count_shared_sentences(std::string_view text) const;

  private:
    struct Span {
        size_t offset = 0;  // into storage_
        size_t size = 0;
    };
    void add_document(std::string_view text);
    void build_fingerprints();

    std::string storage_;                // all sentences, concatenated without separators
    std::vector<Span> spans_;            // [n_sentences]
    std::vector<uint64_t> long_hashes_;  // sorted hashes of the sentences of >= 80 characters
    size_t n_documents_ = 0;
    bool heldout_ = false;
    std::string name_;
};

}  // namespace kvec::eval
