#include "eval/text_source.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "eval/synthetic_words.h"
#include "util/error.h"

namespace kvec::eval {

namespace {

constexpr size_t kLongSentence = 80;  // characters; sentences this long fingerprint a text
constexpr size_t kSharedLimit = 10;   // this many shared long sentences = the same text

bool is_space(char c) {
    return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}
bool is_upper(char c) { return c >= 'A' && c <= 'Z'; }
bool is_lower(char c) { return c >= 'a' && c <= 'z'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_closer(char c) { return c == '"' || c == '\'' || c == ')' || c == ']'; }

// Words after which a '.' does not end a sentence.
bool is_abbreviation(std::string_view word) {
    static const std::array<std::string_view, 30> kAbbrev = {
        "Mr",  "Mrs", "Ms",  "Dr",   "St",   "Jr",   "Sr",  "Gen",  "Gov", "Sen",
        "Rep", "Lt",  "Col", "Capt", "Mt",   "Prof", "Rev", "Hon",  "No",  "Nos",
        "vs",  "Sgt", "Adm", "Maj",  "Cmdr", "Ft",   "Co",  "Corp", "Inc", "Messrs",
    };
    return std::find(kAbbrev.begin(), kAbbrev.end(), word) != kAbbrev.end();
}

std::string collapse_whitespace(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    bool pending_space = false;
    for (char c : text) {
        if (is_space(c)) {
            pending_space = !out.empty();
            continue;
        }
        if (pending_space) out.push_back(' ');
        pending_space = false;
        out.push_back(c);
    }
    return out;
}

// Cuts an over-long sentence into pieces of at most max_chars (a single longer word stays whole).
void cut_long(std::string_view s, size_t max_chars, std::vector<std::string>& out) {
    while (s.size() > max_chars) {
        std::string_view head = s.substr(0, max_chars);
        size_t cut = std::string_view::npos;
        for (std::string_view sep : {"; ", ", ", " "}) {
            size_t p = head.rfind(sep);
            if (p != std::string_view::npos && p > max_chars / 4) {
                cut = p + sep.size() - 1;  // keep ';' or ',' with the first piece
                break;
            }
        }
        if (cut == std::string_view::npos) {
            size_t p = s.find(' ', max_chars);  // one very long word: cut after it
            if (p == std::string_view::npos) break;
            cut = p;
        }
        std::string_view piece = s.substr(0, cut);
        while (!piece.empty() && piece.back() == ' ') piece.remove_suffix(1);
        if (!piece.empty()) out.emplace_back(piece);
        s.remove_prefix(cut);
        while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    }
    if (!s.empty()) out.emplace_back(s);
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot open text file '{}'", path);
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) fail("cannot read text file '{}'", path);
    return ss.str();
}

bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The documents of one file: the whole text, or the "text" strings of a JSON file.
std::vector<std::string> documents_of(const std::string& path) {
    std::string raw = read_file(path);
    if (!ends_with(path, ".json")) return {std::move(raw)};
    nlohmann::json j = nlohmann::json::parse(raw, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) fail("'{}': not valid JSON", path);
    std::vector<std::string> docs;
    auto take = [&](const nlohmann::json& item) {
        if (item.is_string()) {
            docs.push_back(item.get<std::string>());
        } else if (item.is_object() && item.contains("text") && item["text"].is_string()) {
            docs.push_back(item["text"].get<std::string>());
        } else {
            fail(
                "'{}': expected an object with a \"text\" string, or an array of such objects "
                "or of strings",
                path);
        }
    };
    if (j.is_array()) {
        for (const auto& item : j) take(item);
    } else {
        take(j);
    }
    return docs;
}

}  // namespace

std::vector<std::string> split_sentences(std::string_view text, size_t max_chars) {
    if (max_chars < 16) fail("split_sentences: max_chars {} is too small (minimum 16)", max_chars);
    const std::string t = collapse_whitespace(text);
    std::vector<std::string> out;
    size_t start = 0;
    const size_t n = t.size();
    for (size_t i = 0; i < n; ++i) {
        const char c = t[i];
        if (c != '.' && c != '!' && c != '?') continue;
        size_t j = i + 1;
        while (j < n && is_closer(t[j])) ++j;
        if (j + 1 >= n || t[j] != ' ') continue;
        const char next = t[j + 1];
        if (!(is_upper(next) || is_digit(next) || next == '"' || next == '\'' || next == '(' ||
              next == '[')) {
            continue;
        }
        if (c == '.') {
            size_t w = i;  // the word before the '.': letters and inner dots
            while (w > start && (is_upper(t[w - 1]) || is_lower(t[w - 1]) || t[w - 1] == '.')) --w;
            std::string_view word(t.data() + w, i - w);
            if (is_abbreviation(word)) continue;
            if (word.size() == 1 && is_upper(word[0])) continue;     // initial: "W."
            if (word.find('.') != std::string_view::npos) continue;  // "U.S."
        }
        cut_long(std::string_view(t).substr(start, j - start), max_chars, out);
        start = j + 1;
        i = j;
    }
    if (start < n) cut_long(std::string_view(t).substr(start), max_chars, out);
    return out;
}

std::string default_text_dir() {
    if (const char* env = std::getenv("KVEC_TEXT_DIR"); env != nullptr && *env != '\0') return env;
    return std::string(KVEC_SOURCE_DIR) + "/data/text";
}

void TextSource::add_document(std::string_view text) {
    for (const std::string& s : split_sentences(text)) {
        spans_.push_back({storage_.size(), s.size()});
        storage_ += s;
    }
    ++n_documents_;
}

void TextSource::build_fingerprints() {
    long_hashes_.clear();
    for (size_t i = 0; i < spans_.size(); ++i) {
        std::string_view s = sentence(i);
        if (s.size() >= kLongSentence) long_hashes_.push_back(stable_hash(s));
    }
    std::sort(long_hashes_.begin(), long_hashes_.end());
}

size_t TextSource::count_shared_sentences(std::string_view text) const {
    size_t shared = 0;
    for (const std::string& s : split_sentences(text)) {
        if (s.size() < kLongSentence) continue;
        if (std::binary_search(long_hashes_.begin(), long_hashes_.end(), stable_hash(s))) ++shared;
    }
    return shared;
}

const char* heldout_split_name(HeldoutSplit split) {
    switch (split) {
        case HeldoutSplit::Dev: return "dev";
        case HeldoutSplit::Test: return "test";
        default: return "all";
    }
}

HeldoutSplit parse_heldout_split(std::string_view text) {
    if (text == "all") return HeldoutSplit::All;
    if (text == "dev") return HeldoutSplit::Dev;
    if (text == "test") return HeldoutSplit::Test;
    fail("unknown held-out split '{}' (expected all, dev or test)", text);
}

std::vector<std::string> heldout_files(const std::string& dir, HeldoutSplit split) {
    const std::string spec_path = dir + "/heldout.json";
    if (!std::filesystem::exists(spec_path)) {
        fail(
            "held-out text list '{}' not found (set KVEC_TEXT_DIR to the data/text folder of a "
            "kvec checkout)",
            spec_path);
    }
    nlohmann::json spec = nlohmann::json::parse(read_file(spec_path), nullptr, false);
    if (spec.is_discarded() || !spec.is_object() || !spec.contains("files") ||
        !spec["files"].is_array() || spec["files"].empty()) {
        fail("'{}': expected an object with a non-empty \"files\" array", spec_path);
    }
    std::vector<std::string> out;
    for (const auto& entry : spec["files"]) {
        if (!entry.is_object() || !entry.contains("file") || !entry["file"].is_string()) {
            fail("'{}': every entry of \"files\" needs a \"file\" string", spec_path);
        }
        if (split != HeldoutSplit::All) {
            if (!entry.contains("year") || !entry["year"].is_number_integer()) {
                fail("'{}': the {} split needs a \"year\" in every entry of \"files\"", spec_path,
                     heldout_split_name(split));
            }
            const bool even = entry["year"].get<int64_t>() % 2 == 0;
            if (even != (split == HeldoutSplit::Dev)) continue;
        }
        out.push_back(dir + "/" + entry["file"].get<std::string>());
    }
    if (out.empty()) fail("'{}': no file of the {} split", spec_path, heldout_split_name(split));
    return out;
}

std::string heldout_text(const std::string& dir, HeldoutSplit split) {
    std::string text;
    for (const std::string& path : heldout_files(dir, split)) {
        if (!text.empty()) text += "\n\n";
        text += read_file(path);
    }
    return text;
}

TextSource TextSource::heldout(const std::string& dir, HeldoutSplit split) {
    TextSource src;
    for (const std::string& path : heldout_files(dir, split)) src.add_document(read_file(path));
    src.heldout_ = true;
    src.name_ = "held-out text " + dir + (split == HeldoutSplit::All ? "" : fmt::format(" ({})", heldout_split_name(split)));
    src.build_fingerprints();
    return src;
}

TextSource TextSource::from_files(const std::vector<std::string>& paths,
                                  const TextSource* exclude) {
    if (paths.empty()) fail("no haystack text files given");
    TextSource src;
    for (const std::string& path : paths) {
        for (const std::string& doc : documents_of(path)) {
            if (exclude != nullptr) {
                const size_t shared = exclude->count_shared_sentences(doc);
                if (shared >= kSharedLimit) {
                    fail(
                        "haystack file '{}' contains held-out evaluation text ({} long sentences "
                        "of {}); training haystacks must exclude the addresses listed in "
                        "data/text/heldout.json",
                        path, shared, exclude->name());
                }
            }
            src.add_document(doc);
        }
    }
    if (src.n_sentences() == 0) fail("haystack files contain no text");
    src.name_ =
        paths.size() == 1 ? paths[0] : fmt::format("{} and {} more", paths[0], paths.size() - 1);
    src.build_fingerprints();
    return src;
}

TextSource TextSource::from_texts(const std::vector<std::string>& texts, std::string name) {
    TextSource src;
    for (const std::string& t : texts) src.add_document(t);
    if (src.n_sentences() == 0) fail("haystack text '{}' contains no sentences", name);
    src.name_ = std::move(name);
    src.build_fingerprints();
    return src;
}

}  // namespace kvec::eval
