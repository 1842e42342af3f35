#include "eval/metrics.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "util/error.h"

namespace kvec::eval {

namespace {

constexpr char32_t kEscapeBase = 0xDC00;  // invalid byte b -> U+DC00 + b (surrogateescape)

// Decodes one code point at s[pos]; sets `len` to the bytes it used (1 for an invalid byte).
char32_t decode_one(std::string_view s, size_t pos, size_t& len) {
    const auto b0 = static_cast<unsigned char>(s[pos]);
    len = 1;
    if (b0 < 0x80) return b0;
    int need = 0;
    char32_t cp = 0;
    char32_t min = 0;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 1, cp = b0 & 0x1F, min = 0x80;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 2, cp = b0 & 0x0F, min = 0x800;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 3, cp = b0 & 0x07, min = 0x10000;
    } else {
        return kEscapeBase + b0;
    }
    if (pos + static_cast<size_t>(need) >= s.size()) return kEscapeBase + b0;
    for (int k = 1; k <= need; ++k) {
        const auto b = static_cast<unsigned char>(s[pos + k]);
        if ((b & 0xC0) != 0x80) return kEscapeBase + b0;
        cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return kEscapeBase + b0;
    len = static_cast<size_t>(need) + 1;
    return cp;
}

void append_utf8(std::string& out, char32_t c) {
    if (c >= kEscapeBase + 0x80 && c <= kEscapeBase + 0xFF) {
        out.push_back(static_cast<char>(c - kEscapeBase));  // raw byte back
    } else if (c < 0x80) {
        out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (c >> 6)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (c >> 12)));
        out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (c >> 18)));
        out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
}

bool is_valid_scalar(char32_t c) { return c <= 0x10FFFF && !(c >= 0xD800 && c <= 0xDFFF); }

utf8proc_category_t category(char32_t c) {
    if (!is_valid_scalar(c)) return UTF8PROC_CATEGORY_CS;
    return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

// Unicode "Cased" (approximation: letters with a case mapping, titlecase letters).
bool is_cased(char32_t c) {
    if (!is_valid_scalar(c)) return false;
    const auto cat = category(c);
    if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT) {
        return true;
    }
    const auto ci = static_cast<utf8proc_int32_t>(c);
    return utf8proc_tolower(ci) != ci || utf8proc_toupper(ci) != ci;
}

// Unicode "Case_Ignorable": categories Mn, Me, Cf, Lm, Sk, plus Word_Break MidLetter,
// MidNumLet and Single_Quote.
bool is_case_ignorable(char32_t c) {
    switch (c) {
        case 0x0027:
        case 0x002E:
        case 0x003A:
        case 0x00B7:
        case 0x0387:
        case 0x055F:
        case 0x05F4:
        case 0x2018:
        case 0x2019:
        case 0x2024:
        case 0x2027:
        case 0xFE13:
        case 0xFE52:
        case 0xFE55:
        case 0xFF07:
        case 0xFF0E:
        case 0xFF1A:
            return true;
        default:
            break;
    }
    const auto cat = category(c);
    return cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_ME ||
           cat == UTF8PROC_CATEGORY_CF || cat == UTF8PROC_CATEGORY_LM ||
           cat == UTF8PROC_CATEGORY_SK;
}

// CPython's handle_capital_sigma: final sigma if a cased letter precedes (skipping
// case-ignorables) and no cased letter follows (skipping case-ignorables).
char32_t lower_sigma(const std::u32string& s, size_t i) {
    size_t j = i;
    char32_t c = 0;
    bool found = false;
    while (j > 0) {
        --j;
        c = s[j];
        if (!is_case_ignorable(c)) {
            found = true;
            break;
        }
    }
    bool final_sigma = found && is_cased(c);
    if (final_sigma && i + 1 < s.size()) {
        size_t k = i + 1;
        for (; k < s.size(); ++k) {
            if (!is_case_ignorable(s[k])) break;
        }
        final_sigma = k == s.size() || !is_cased(s[k]);
    }
    return final_sigma ? 0x3C2 : 0x3C3;
}

// Calls fn(begin_byte, end_byte) for each maximal run of code points for which in_run() holds.
template <typename Pred, typename Fn>
void for_each_run(std::string_view s, Pred in_run, Fn fn) {
    size_t pos = 0;
    size_t run_start = std::string_view::npos;
    while (pos < s.size()) {
        size_t len = 0;
        const char32_t c = decode_one(s, pos, len);
        if (in_run(c)) {
            if (run_start == std::string_view::npos) run_start = pos;
        } else if (run_start != std::string_view::npos) {
            fn(run_start, pos);
            run_start = std::string_view::npos;
        }
        pos += len;
    }
    if (run_start != std::string_view::npos) fn(run_start, s.size());
}

}  // namespace

namespace py {

std::u32string decode_utf8(std::string_view s) {
    std::u32string out;
    out.reserve(s.size());
    size_t pos = 0;
    while (pos < s.size()) {
        size_t len = 0;
        out.push_back(decode_one(s, pos, len));
        pos += len;
    }
    return out;
}

std::string encode_utf8(std::u32string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char32_t c : s) append_utf8(out, c);
    return out;
}

bool is_space(char32_t c) {
    if (c >= 0x09 && c <= 0x0D) return true;
    if (c >= 0x1C && c <= 0x20) return true;
    if (c >= 0x2000 && c <= 0x200A) return true;
    switch (c) {
        case 0x85:
        case 0xA0:
        case 0x1680:
        case 0x2028:
        case 0x2029:
        case 0x202F:
        case 0x205F:
        case 0x3000:
            return true;
        default:
            return false;
    }
}

bool is_decimal_digit(char32_t c) {
    if (c < 0x80) return c >= '0' && c <= '9';
    return category(c) == UTF8PROC_CATEGORY_ND;
}

bool is_word(char32_t c) {
    if (c < 0x80) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_';
    }
    switch (category(c)) {
        case UTF8PROC_CATEGORY_LU:
        case UTF8PROC_CATEGORY_LL:
        case UTF8PROC_CATEGORY_LT:
        case UTF8PROC_CATEGORY_LM:
        case UTF8PROC_CATEGORY_LO:
        case UTF8PROC_CATEGORY_ND:
        case UTF8PROC_CATEGORY_NL:
        case UTF8PROC_CATEGORY_NO:
            return true;
        default:
            return false;
    }
}

std::string lower(std::string_view s) {
    // Fast path: ASCII only.
    if (std::all_of(s.begin(), s.end(),
                    [](char ch) { return static_cast<unsigned char>(ch) < 0x80; })) {
        std::string out(s);
        for (char& ch : out) {
            if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
        }
        return out;
    }
    const std::u32string cps = decode_utf8(s);
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < cps.size(); ++i) {
        const char32_t c = cps[i];
        if (!is_valid_scalar(c)) {
            append_utf8(out, c);
        } else if (c == 0x130) {  // LATIN CAPITAL LETTER I WITH DOT ABOVE -> i + COMBINING DOT
            append_utf8(out, 0x69);
            append_utf8(out, 0x307);
        } else if (c == 0x3A3) {  // GREEK CAPITAL LETTER SIGMA
            append_utf8(out, lower_sigma(cps, i));
        } else {
            append_utf8(out,
                        static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
        }
    }
    return out;
}

std::vector<std::string> split(std::string_view s) {
    std::vector<std::string> out;
    for_each_run(
        s, [](char32_t c) { return !is_space(c); },
        [&](size_t b, size_t e) { out.emplace_back(s.substr(b, e - b)); });
    return out;
}

std::vector<std::string> split(std::string_view s, std::string_view sep) {
    if (sep.empty()) fail("split: empty separator");  // Python raises ValueError too
    std::vector<std::string> out;
    size_t pos = 0;
    while (true) {
        const size_t hit = s.find(sep, pos);
        if (hit == std::string_view::npos) {
            out.emplace_back(s.substr(pos));
            return out;
        }
        out.emplace_back(s.substr(pos, hit - pos));
        pos = hit + sep.size();
    }
}

std::string join_whitespace(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for_each_run(
        s, [](char32_t c) { return !is_space(c); },
        [&](size_t b, size_t e) {
            if (!out.empty()) out.push_back(' ');
            out.append(s.substr(b, e - b));
        });
    return out;
}

std::string_view lstrip(std::string_view s, char c) {
    size_t i = 0;
    while (i < s.size() && s[i] == c) ++i;
    return s.substr(i);
}

std::vector<std::string> find_digit_runs(std::string_view s) {
    std::vector<std::string> out;
    for_each_run(s, is_decimal_digit,
                 [&](size_t b, size_t e) { out.emplace_back(s.substr(b, e - b)); });
    return out;
}

int64_t round_half_even(double x) {
    if (!std::isfinite(x)) fail("round: cannot convert {} to an integer", x);
    // std::nearbyint honours the current rounding mode, which is round-to-nearest-even unless a
    // caller changed it; do the tie handling by hand so the result never depends on it.
    const double fl = std::floor(x);
    const double diff = x - fl;  // exact for |x| < 2^52
    double r;
    if (diff < 0.5) {
        r = fl;
    } else if (diff > 0.5) {
        r = fl + 1.0;
    } else {
        r = (std::fmod(fl, 2.0) == 0.0) ? fl : fl + 1.0;
    }
    return static_cast<int64_t>(r);
}

double round_digits(double x, int ndigits) {
    if (!std::isfinite(x)) return x;
    // glibc's printf rounds the exact binary value correctly (ties to even), as CPython's
    // float.__round__ does through _Py_dg_dtoa mode 3; strtod reads the decimal back correctly.
    char buf[512];
    const int n = std::snprintf(buf, sizeof buf, "%.*f", ndigits, x);
    if (n < 0 || n >= static_cast<int>(sizeof buf)) return x;  // |x| too large to have decimals
    return std::strtod(buf, nullptr);
}

double numpy_round_digits(double x, int ndigits) {
    double f = 1.0;
    for (int i = 0; i < ndigits; ++i) f *= 10.0;
    double y = x * f;
    // rint in round-to-nearest-even, independent of the current rounding mode.
    if (std::isfinite(y) && std::fabs(y) < 4.5e15) y = static_cast<double>(round_half_even(y));
    return y / f;
}

}  // namespace py

// ---- metrics.py -------------------------------------------------------------------------------

namespace {

bool is_ascii_punctuation(char c) {
    // string.punctuation: !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
}

}  // namespace

std::string normalize_answer(std::string_view s) {
    // 1. lower
    const std::string lowered = py::lower(s);
    // 2. remove_punc: ASCII bytes never occur inside a multi-byte UTF-8 sequence, so a byte filter
    //    removes exactly the punctuation code points.
    std::string no_punc;
    no_punc.reserve(lowered.size());
    for (char c : lowered) {
        if (!is_ascii_punctuation(c)) no_punc.push_back(c);
    }
    // 3. remove_articles: re.sub(r"\b(a|an|the)\b", " ", text). A match needs a word boundary on
    //    both sides, so it is exactly a maximal run of \w characters equal to a, an or the.
    std::string no_articles;
    no_articles.reserve(no_punc.size());
    size_t copied = 0;
    {
        size_t pos = 0;
        size_t run_start = std::string::npos;
        auto close_run = [&](size_t end) {
            const std::string_view word(no_punc.data() + run_start, end - run_start);
            if (word == "a" || word == "an" || word == "the") {
                no_articles.append(no_punc, copied, run_start - copied);
                no_articles.push_back(' ');
                copied = end;
            }
            run_start = std::string::npos;
        };
        while (pos < no_punc.size()) {
            size_t len = 0;
            const char32_t c = decode_one(no_punc, pos, len);
            if (py::is_word(c)) {
                if (run_start == std::string::npos) run_start = pos;
            } else if (run_start != std::string::npos) {
                close_run(pos);
            }
            pos += len;
        }
        if (run_start != std::string::npos) close_run(no_punc.size());
        no_articles.append(no_punc, copied, std::string::npos);
    }
    // 4. white_space_fix
    return py::join_whitespace(no_articles);
}

double f1_score(const std::vector<std::string>& prediction,
                const std::vector<std::string>& ground_truth) {
    // Counter(prediction) & Counter(ground_truth): per token min of the two counts.
    std::unordered_map<std::string_view, int64_t> gt_count;
    for (const auto& t : ground_truth) ++gt_count[t];
    int64_t num_same = 0;
    std::unordered_map<std::string_view, int64_t> pred_used;
    for (const auto& t : prediction) {
        auto it = gt_count.find(t);
        if (it == gt_count.end()) continue;
        int64_t& used = pred_used[t];
        if (used < it->second) {
            ++used;
            ++num_same;
        }
    }
    if (num_same == 0) return 0.0;
    const double precision =
        1.0 * static_cast<double>(num_same) / static_cast<double>(prediction.size());
    const double recall =
        1.0 * static_cast<double>(num_same) / static_cast<double>(ground_truth.size());
    return (2 * precision * recall) / (precision + recall);
}

double qa_f1_score(std::string_view prediction, std::string_view ground_truth) {
    return f1_score(py::split(normalize_answer(prediction)),
                    py::split(normalize_answer(ground_truth)));
}

namespace {

// Rouge._get_avg_scores' sentence split: [" ".join(x.split()) for x in text.split(".") if len(x)]
std::vector<std::string> rouge_sentences(std::string_view text) {
    std::vector<std::string> out;
    for (const auto& piece : py::split(text, ".")) {
        if (!piece.empty()) out.push_back(py::join_whitespace(piece));
    }
    return out;
}

// Interns words so that sentences become integer sequences.
class WordIds {
  public:
    int32_t id(const std::string& w) {
        auto [it, inserted] = ids_.try_emplace(w, static_cast<int32_t>(ids_.size()));
        return it->second;
    }

  private:
    std::unordered_map<std::string, int32_t> ids_;
};

// sentence.split(" ") as word ids.
std::vector<int32_t> sentence_words(const std::string& sentence, WordIds& ids) {
    std::vector<int32_t> out;
    for (const auto& w : py::split(sentence, " ")) out.push_back(ids.id(w));
    return out;
}

// pltrdy _recon_lcs(x, y) as a set: adds the words of the reconstructed LCS of x (reference
// sentence) and y (hypothesis sentence) to `words`. Returns false where the recursive Python
// reconstruction would exceed the recursion limit.
bool add_recon_lcs(const std::vector<int32_t>& x, const std::vector<int32_t>& y,
                   std::unordered_set<int32_t>& words) {
    const size_t n = x.size(), m = y.size();
    // The back-trace needs at least min(n, m) steps to reach a border of the table.
    if (std::min(n, m) > kRougeMaxReconSteps) return false;
    // table: [n + 1, m + 1] LCS lengths (<= min(n, m) <= kRougeMaxReconSteps fits in 16 bits)
    std::vector<uint16_t> table((n + 1) * (m + 1), 0);
    auto at = [&](size_t i, size_t j) -> uint16_t& { return table[i * (m + 1) + j]; };
    for (size_t i = 1; i <= n; ++i) {
        for (size_t j = 1; j <= m; ++j) {
            if (x[i - 1] == y[j - 1]) {
                at(i, j) = static_cast<uint16_t>(at(i - 1, j - 1) + 1);
            } else {
                at(i, j) = std::max(at(i - 1, j), at(i, j - 1));
            }
        }
    }
    // Back-trace with pltrdy's tie-breaking: match -> diagonal; up only if strictly larger.
    size_t i = n, j = m, steps = 0;
    std::vector<int32_t> lcs;  // [lcs length], in reverse order
    while (i > 0 && j > 0) {
        if (++steps > kRougeMaxReconSteps) return false;
        if (x[i - 1] == y[j - 1]) {
            lcs.push_back(x[i - 1]);
            --i, --j;
        } else if (at(i - 1, j) > at(i, j - 1)) {
            --i;
        } else {
            --j;
        }
    }
    words.insert(lcs.begin(), lcs.end());
    return true;
}

}  // namespace

std::optional<RougeL> rouge_l(std::string_view hypothesis, std::string_view reference) {
    const std::vector<std::string> hyp = rouge_sentences(hypothesis);
    const std::vector<std::string> ref = rouge_sentences(reference);
    if (hyp.empty() || ref.empty()) return std::nullopt;  // ValueError in rouge_n / rouge_l

    WordIds ids;
    std::vector<std::vector<int32_t>> ref_words, hyp_words;  // [sentences][words]
    std::unordered_set<int32_t> ref_vocab, hyp_vocab;
    for (const auto& s : ref) {
        ref_words.push_back(sentence_words(s, ids));
        ref_vocab.insert(ref_words.back().begin(), ref_words.back().end());
    }
    for (const auto& s : hyp) {
        hyp_words.push_back(sentence_words(s, ids));
        hyp_vocab.insert(hyp_words.back().begin(), hyp_words.back().end());
    }
    const double m = static_cast<double>(ref_vocab.size());  // distinct reference words
    const double n = static_cast<double>(hyp_vocab.size());  // distinct hypothesis words

    std::unordered_set<int32_t> lcs_union;
    for (const auto& r : ref_words) {
        for (const auto& h : hyp_words) {
            if (!add_recon_lcs(r, h, lcs_union)) return std::nullopt;  // RecursionError
        }
    }
    const double llcs = static_cast<double>(lcs_union.size());
    RougeL out;
    out.r = llcs / m;
    out.p = llcs / n;
    out.f = 2.0 * ((out.p * out.r) / (out.p + out.r + 1e-8));
    return out;
}

double rouge_score(std::string_view prediction, std::string_view ground_truth) {
    const auto scores = rouge_l(prediction, ground_truth);
    return scores ? scores->f : 0.0;
}

double classification_score(std::string_view prediction, std::string_view ground_truth,
                            const std::vector<std::string>& all_classes) {
    std::vector<std::string> matches;
    for (const auto& c : all_classes) {
        if (prediction.find(c) != std::string_view::npos) matches.push_back(c);
    }
    // `for match_term in em_match_list: ... em_match_list.remove(match_term)`: Python's list
    // iterator walks an index over the list being shrunk; remove() drops the FIRST equal item.
    for (size_t i = 0; i < matches.size(); ++i) {
        const std::string term = matches[i];
        if (ground_truth.find(term) != std::string_view::npos && term != ground_truth) {
            matches.erase(std::find(matches.begin(), matches.end(), term));
        }
    }
    // `if em_match_list != 0` is always true, so the difflib fallback never runs.
    if (std::find(matches.begin(), matches.end(), ground_truth) != matches.end()) {
        return 1.0 / static_cast<double>(matches.size());
    }
    return 0.0;
}

namespace {

double share_equal(const std::vector<std::string>& numbers, std::string_view target) {
    if (numbers.empty()) return 0.0;
    size_t right = 0;
    for (const auto& n : numbers) right += (n == target);
    return static_cast<double>(right) / static_cast<double>(numbers.size());
}

// First match of re `<prefix>(\d+)` in text, as the digit string; nullopt if none.
std::optional<std::string> first_prefixed_number(std::string_view text, std::string_view prefix) {
    size_t pos = 0;
    while ((pos = text.find(prefix, pos)) != std::string_view::npos) {
        const std::string_view rest = text.substr(pos + prefix.size());
        size_t end = 0;  // bytes of the \d+ run at the start of `rest`
        while (end < rest.size()) {
            size_t len = 0;
            if (!py::is_decimal_digit(decode_one(rest, end, len))) break;
            end += len;
        }
        if (end > 0) return std::string(rest.substr(0, end));
        ++pos;
    }
    return std::nullopt;
}

double retrieval_with_prefix(std::string_view prediction, std::string_view ground_truth,
                             std::string_view prefix, std::string_view metric) {
    const auto id = first_prefixed_number(ground_truth, prefix);
    if (!id) {
        fail("{}: the reference answer '{}' contains no '{}<number>'", metric,
             ground_truth.substr(0, 200), prefix);
    }
    return share_equal(py::find_digit_runs(prediction), *id);
}

}  // namespace

double retrieval_score(std::string_view prediction, std::string_view ground_truth) {
    return retrieval_with_prefix(prediction, ground_truth, "Paragraph ", "retrieval_score");
}

double count_score(std::string_view prediction, std::string_view ground_truth) {
    return share_equal(py::find_digit_runs(prediction), ground_truth);
}

int fuzz_ratio(std::string_view s1, std::string_view s2) {
    if (s1 == s2) return 100;                // utils.check_for_equivalence
    if (s1.empty() || s2.empty()) return 0;  // utils.check_empty_string
    const std::u32string a = py::decode_utf8(s1);
    const std::u32string b = py::decode_utf8(s2);
    // Levenshtein.ratio = (lensum - d) / lensum with d the edit distance where a substitution
    // costs 2, i.e. d = lensum - 2 * LCS.
    std::vector<size_t> prev(b.size() + 1, 0), cur(b.size() + 1, 0);  // [len(b) + 1] LCS row
    for (size_t i = 1; i <= a.size(); ++i) {
        for (size_t j = 1; j <= b.size(); ++j) {
            cur[j] = a[i - 1] == b[j - 1] ? prev[j - 1] + 1 : std::max(prev[j], cur[j - 1]);
        }
        std::swap(prev, cur);
    }
    const size_t lcs = prev[b.size()];
    const size_t lensum = a.size() + b.size();
    const size_t dist = lensum - 2 * lcs;
    const double ratio = static_cast<double>(lensum - dist) / static_cast<double>(lensum);
    return static_cast<int>(py::round_half_even(100 * ratio));
}

std::string code_sim_line(std::string_view prediction) {
    for (const auto& line : py::split(py::lstrip(prediction, '\n'), "\n")) {
        if (line.find('`') == std::string::npos && line.find('#') == std::string::npos &&
            line.find("//") == std::string::npos) {
            return line;
        }
    }
    return "";
}

double code_sim_score(std::string_view prediction, std::string_view ground_truth) {
    return fuzz_ratio(code_sim_line(prediction), ground_truth) / 100.0;
}

// ---- eval.py ----------------------------------------------------------------------------------

namespace {

struct DatasetMetric {
    std::string_view dataset;
    Metric metric;
};

// eval.py dataset2metric.
constexpr std::array<DatasetMetric, 21> kDatasetMetrics = {{
    {"narrativeqa", Metric::QaF1},
    {"qasper", Metric::QaF1},
    {"multifieldqa_en", Metric::QaF1},
    {"multifieldqa_zh", Metric::QaF1Zh},
    {"hotpotqa", Metric::QaF1},
    {"2wikimqa", Metric::QaF1},
    {"musique", Metric::QaF1},
    {"dureader", Metric::RougeZh},
    {"gov_report", Metric::Rouge},
    {"qmsum", Metric::Rouge},
    {"multi_news", Metric::Rouge},
    {"vcsum", Metric::RougeZh},
    {"trec", Metric::Classification},
    {"triviaqa", Metric::QaF1},
    {"samsum", Metric::Rouge},
    {"lsht", Metric::Classification},
    {"passage_retrieval_en", Metric::Retrieval},
    {"passage_count", Metric::Count},
    {"passage_retrieval_zh", Metric::RetrievalZh},
    {"lcc", Metric::CodeSim},
    {"repobench-p", Metric::CodeSim},
}};

[[noreturn]] void fail_jieba(Metric metric) {
    fail(
        "Chinese LongBench tasks are not supported: {} segments text with jieba, which kvec does "
        "not ship (affects multifieldqa_zh, dureader, vcsum)",
        metric_name(metric));
}

}  // namespace

std::string_view metric_name(Metric metric) {
    switch (metric) {
        case Metric::QaF1:
            return "qa_f1_score";
        case Metric::QaF1Zh:
            return "qa_f1_zh_score";
        case Metric::Rouge:
            return "rouge_score";
        case Metric::RougeZh:
            return "rouge_zh_score";
        case Metric::Classification:
            return "classification_score";
        case Metric::Retrieval:
            return "retrieval_score";
        case Metric::RetrievalZh:
            return "retrieval_zh_score";
        case Metric::Count:
            return "count_score";
        case Metric::CodeSim:
            return "code_sim_score";
    }
    return "unknown";
}

std::optional<Metric> metric_for_dataset(std::string_view dataset) {
    for (const auto& dm : kDatasetMetrics) {
        if (dm.dataset == dataset) return dm.metric;
    }
    return std::nullopt;
}

Metric require_metric_for_dataset(std::string_view dataset) {
    if (auto m = metric_for_dataset(dataset)) return *m;
    std::string known;
    for (const auto& dm : kDatasetMetrics) {
        if (!known.empty()) known += ", ";
        known += dm.dataset;
    }
    fail("unknown LongBench dataset '{}' (known: {})", dataset, known);
}

bool metric_needs_jieba(Metric metric) {
    return metric == Metric::QaF1Zh || metric == Metric::RougeZh;
}

double compute_metric(Metric metric, std::string_view prediction, std::string_view ground_truth,
                      const std::vector<std::string>& all_classes) {
    switch (metric) {
        case Metric::QaF1:
            return qa_f1_score(prediction, ground_truth);
        case Metric::Rouge:
            return rouge_score(prediction, ground_truth);
        case Metric::Classification:
            return classification_score(prediction, ground_truth, all_classes);
        case Metric::Retrieval:
            return retrieval_score(prediction, ground_truth);
        case Metric::RetrievalZh:
            return retrieval_with_prefix(prediction, ground_truth,
                                         "\xE6\xAE\xB5\xE8\x90\xBD",  // 段落
                                         "retrieval_zh_score");
        case Metric::Count:
            return count_score(prediction, ground_truth);
        case Metric::CodeSim:
            return code_sim_score(prediction, ground_truth);
        case Metric::QaF1Zh:
        case Metric::RougeZh:
            fail_jieba(metric);
    }
    fail("internal error: unknown metric");
}

bool cuts_to_first_line(std::string_view dataset) {
    return dataset == "trec" || dataset == "triviaqa" || dataset == "samsum" || dataset == "lsht";
}

std::string first_line(std::string_view prediction) {
    const std::string_view s = py::lstrip(prediction, '\n');
    return std::string(s.substr(0, s.find('\n')));
}

double sample_score(std::string_view dataset, std::string_view prediction,
                    const std::vector<std::string>& answers,
                    const std::vector<std::string>& all_classes) {
    const Metric metric = require_metric_for_dataset(dataset);
    if (metric_needs_jieba(metric)) fail_jieba(metric);
    std::string cut;
    if (cuts_to_first_line(dataset)) {
        cut = first_line(prediction);
        prediction = cut;
    }
    double score = 0.0;
    for (const auto& gt : answers) {
        score = std::max(score, compute_metric(metric, prediction, gt, all_classes));
    }
    return score;
}

double dataset_score(std::string_view dataset, const std::vector<ScoredPrediction>& predictions,
                     const std::vector<std::string>& all_classes) {
    if (predictions.empty()) fail("cannot score dataset '{}': no predictions", dataset);
    double total = 0.0;
    for (const auto& p : predictions)
        total += sample_score(dataset, p.prediction, p.answers, all_classes);
    return py::round_digits(100 * total / static_cast<double>(predictions.size()), 2);
}

double numpy_sum(const std::vector<double>& values) {
    // numpy's @TYPE@_pairwise_sum (loops_utils.h.src); the reduction starts from the identity 0.
    struct Pairwise {
        static double sum(const double* a, size_t n) {
            if (n < 8) {
                double res = -0.0;
                for (size_t i = 0; i < n; ++i) res += a[i];
                return res;
            }
            if (n <= 128) {
                double r[8];
                for (size_t k = 0; k < 8; ++k) r[k] = a[k];
                size_t i = 8;
                for (; i < n - (n % 8); i += 8) {
                    for (size_t k = 0; k < 8; ++k) r[k] += a[i + k];
                }
                double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
                for (; i < n; ++i) res += a[i];
                return res;
            }
            size_t n2 = n / 2;
            n2 -= n2 % 8;
            return sum(a, n2) + sum(a + n2, n - n2);
        }
    };
    return 0.0 + Pairwise::sum(values.data(), values.size());
}

LengthBucketScores dataset_score_e(std::string_view dataset,
                                   const std::vector<ScoredPrediction>& predictions,
                                   const std::vector<std::string>& all_classes) {
    std::vector<double> b0, b1, b2;  // per-bucket sample scores, in input order
    for (size_t i = 0; i < predictions.size(); ++i) {
        const auto& p = predictions[i];
        if (p.length < 0) {
            fail(
                "LongBench-E scoring of '{}' needs the 'length' of every sample (sample {} has "
                "none)",
                dataset, i + 1);
        }
        const double s = sample_score(dataset, p.prediction, p.answers, all_classes);
        if (p.length < 4000) {
            b0.push_back(s);
        } else if (p.length < 8000) {
            b1.push_back(s);
        } else {
            b2.push_back(s);
        }
    }
    auto bucket = [](const std::vector<double>& v) {
        if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
        const double mean = numpy_sum(v) / static_cast<double>(v.size());
        return py::numpy_round_digits(100 * mean, 2);
    };
    return {bucket(b0), bucket(b1), bucket(b2)};
}

}  // namespace kvec::eval
