// LongBench metrics, computed exactly as THUDM/LongBench's metrics.py and eval.py compute them
// (with the PyPI packages that code imports: pltrdy `rouge` 1.0.1 for ROUGE-L, fuzzywuzzy 0.18
// with python-Levenshtein for fuzz.ratio). Quirks of the Python code are reproduced on purpose:
// published LongBench tables are only comparable if they are.
//
// Text model. Python works on code points; these functions take UTF-8. Bytes that are not valid
// UTF-8 each count as one code point that is neither a letter, a digit, whitespace nor punctuation
// (like Python's surrogateescape). Character properties come from utf8proc (Unicode 15), which can
// differ from the Python build's Unicode version on characters added or changed since.
//   - str.split(): separators are exactly Python's whitespace set (U+0009-000D, U+001C-001F,
//     U+0020, U+0085, U+00A0, U+1680, U+2000-200A, U+2028, U+2029, U+202F, U+205F, U+3000).
//   - str.lower(): utf8proc's simple lowercase mapping, plus Python's two context/length
//     exceptions: U+0130 -> "i" U+0307, and capital sigma -> final sigma at the end of a word
//     (Final_Sigma rule; "cased" and "case-ignorable" approximated from general categories).
//   - re `\d` = general category Nd; re `\w` = categories L*, N* and "_" (Python: str.isalnum()
//     or "_"; equal for all but a handful of code points).
//   - string.punctuation: the 32 ASCII characters !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~ only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvec::eval {

// ---- Python-compatible text primitives (exposed for tests and the harness) -------------------
namespace py {

// Code points of UTF-8 text; an invalid byte b becomes U+DC00+b (surrogateescape).
std::u32string decode_utf8(std::string_view s);
// Inverse of decode_utf8 (surrogate-escaped bytes are written back as the raw byte).
std::string encode_utf8(std::u32string_view s);

bool is_space(char32_t c);          // str.isspace()
bool is_decimal_digit(char32_t c);  // re \d (Unicode category Nd)
bool is_word(char32_t c);           // re \w for str patterns

std::string lower(std::string_view s);                                     // str.lower()
std::vector<std::string> split(std::string_view s);                        // str.split()
std::vector<std::string> split(std::string_view s, std::string_view sep);  // str.split(sep)
std::string join_whitespace(std::string_view s);                           // " ".join(s.split())
std::string_view lstrip(std::string_view s, char c);                       // str.lstrip(c)
std::vector<std::string> find_digit_runs(std::string_view s);              // re.findall(r"\d+", s)

// round(x) on a float: round half to even (what fuzzywuzzy's intr() relies on).
int64_t round_half_even(double x);
// Python's round(x, ndigits) on a float: correctly rounded to `ndigits` decimals (ties to even on
// the exact binary value), as CPython's float.__round__ does.
double round_digits(double x, int ndigits);
// numpy's round(np.float64, ndigits) (np.around): rint(x * 10^n) / 10^n. eval.py's LongBench-E
// scorer rounds np.mean(...) with it; results can differ from round_digits in the last digit.
double numpy_round_digits(double x, int ndigits);

}  // namespace py

// ---- metrics.py -------------------------------------------------------------------------------

// lower -> remove string.punctuation -> replace each whole word a/an/the by " " -> collapse
// whitespace (Python order: white_space_fix(remove_articles(remove_punc(lower(s))))).
std::string normalize_answer(std::string_view s);

// Bag-of-tokens F1 with multiset intersection; 0 when nothing is shared (also for empty input).
double f1_score(const std::vector<std::string>& prediction,
                const std::vector<std::string>& ground_truth);
// f1_score over normalize_answer(x).split().
double qa_f1_score(std::string_view prediction, std::string_view ground_truth);

// pltrdy rouge's summary-level ROUGE-L (Rouge().get_scores([h], [r], avg=True)["rouge-l"]):
// sentences = pieces of text.split(".") that are not empty, whitespace-collapsed; words =
// sentence.split(" ") (an all-whitespace piece gives the one word ""); m, n = numbers of DISTINCT
// words of reference and hypothesis; LCS_u = number of distinct words in the union of the
// reconstructed LCS of every (reference sentence, hypothesis sentence) pair, the LCS being rebuilt
// with pltrdy's tie-breaking; r = LCS_u/m, p = LCS_u/n, f = 2*(p*r)/(p+r+1e-8).
struct RougeL {
    double f = 0, p = 0, r = 0;
};
// nullopt where the Python code raises: an empty hypothesis or reference (no sentence), or a
// sentence pair whose recursive LCS reconstruction would exceed Python's recursion limit (see
// kRougeMaxReconSteps).
std::optional<RougeL> rouge_l(std::string_view hypothesis, std::string_view reference);
// metrics.py rouge_score: rouge_l(...).f, or 0.0 where the Python code raises (bare except).
double rouge_score(std::string_view prediction, std::string_view ground_truth);

// pltrdy's _recon_lcs recurses once per step of the LCS back-trace. Run from LongBench's eval.py,
// 9 Python frames (module, scorer, rouge_score, get_scores, _get_avg_scores, lambda,
// rouge_l_summary_level, _union_lcs, _recon_lcs) sit below the first _recon call, so with the
// default recursion limit of 1000 a back-trace of more than 990 steps raises RecursionError,
// which rouge_score turns into 0.0. Only sentences (text between periods) of roughly 500+ words
// get there.
inline constexpr size_t kRougeMaxReconSteps = 990;

// metrics.py classification_score, including its list-mutation-while-iterating quirk: after
// collecting the classes that occur in the prediction (substring test), the code removes, while
// iterating over the same list, every match that is a substring of the ground truth but not equal
// to it; each removal makes the loop skip the element after it. Score = 1/len(matches) if the
// ground truth is among the matches, else 0.
double classification_score(std::string_view prediction, std::string_view ground_truth,
                            const std::vector<std::string>& all_classes);

// metrics.py retrieval_score: id = first "Paragraph (\d+)" in the ground truth (kvec::Error if
// none: Python raises IndexError there); score = share of \d+ runs of the prediction equal to id.
double retrieval_score(std::string_view prediction, std::string_view ground_truth);

// metrics.py count_score: share of \d+ runs of the prediction equal (as strings) to ground_truth.
double count_score(std::string_view prediction, std::string_view ground_truth);

// fuzzywuzzy fuzz.ratio with python-Levenshtein: 100 if s1 == s2 (also both empty), 0 if one is
// empty, else round_half_even(100 * (len1 + len2 - indel_distance) / (len1 + len2)) over code
// points.
int fuzz_ratio(std::string_view s1, std::string_view s2);

// metrics.py code_sim_score: first line of prediction.lstrip("\n").split("\n") that contains none
// of "`", "#", "//" ("" if none), then fuzz_ratio(line, ground_truth) / 100.
double code_sim_score(std::string_view prediction, std::string_view ground_truth);
// The line code_sim_score compares.
std::string code_sim_line(std::string_view prediction);

// ---- eval.py ----------------------------------------------------------------------------------

enum class Metric {
    QaF1,            // qa_f1_score
    QaF1Zh,          // qa_f1_zh_score (jieba: unsupported)
    Rouge,           // rouge_score
    RougeZh,         // rouge_zh_score (jieba: unsupported)
    Classification,  // classification_score
    Retrieval,       // retrieval_score
    RetrievalZh,     // retrieval_zh_score
    Count,           // count_score
    CodeSim,         // code_sim_score
};

std::string_view metric_name(Metric metric);  // the Python function name, e.g. "qa_f1_score"
// eval.py's dataset2metric (the 21 LongBench v1 datasets); nullopt for an unknown name.
std::optional<Metric> metric_for_dataset(std::string_view dataset);
// Metric of a dataset; kvec::Error naming the known datasets for an unknown one.
Metric require_metric_for_dataset(std::string_view dataset);
// True for the metrics that need jieba segmentation (qa_f1_zh, rouge_zh).
bool metric_needs_jieba(Metric metric);

// One metric call; throws kvec::Error for the Chinese metrics that need jieba
// ("Chinese LongBench tasks are not supported: ...").
double compute_metric(Metric metric, std::string_view prediction, std::string_view ground_truth,
                      const std::vector<std::string>& all_classes);

// eval.py cuts predictions of trec, triviaqa, samsum and lsht to their first line.
bool cuts_to_first_line(std::string_view dataset);
// prediction.lstrip("\n").split("\n")[0]
std::string first_line(std::string_view prediction);

// eval.py per-sample score: optional first-line cut, then max over the references, starting
// from 0 (no reference -> 0).
double sample_score(std::string_view dataset, std::string_view prediction,
                    const std::vector<std::string>& answers,
                    const std::vector<std::string>& all_classes);

struct ScoredPrediction {
    std::string prediction;
    std::vector<std::string> answers;
    int64_t length = -1;  // LongBench "length" (words); needed by the LongBench-E buckets only
};

// eval.py scorer(): round(100 * sum(sample scores) / n, 2), summed in order as Python does.
// kvec::Error for an empty list (Python divides by zero there).
double dataset_score(std::string_view dataset, const std::vector<ScoredPrediction>& predictions,
                     const std::vector<std::string>& all_classes);

// eval.py scorer_e(): LongBench-E buckets by "length": < 4000, < 8000, the rest; each bucket is
// round(100 * np.mean(scores), 2) with numpy's pairwise summation and numpy's rounding. An empty
// bucket is NaN (np.mean of an empty list). kvec::Error if a sample has no length.
struct LengthBucketScores {
    double len_0_4k = 0;     // "0-4k"
    double len_4_8k = 0;     // "4-8k"
    double len_8k_plus = 0;  // "8k+"
};
LengthBucketScores dataset_score_e(std::string_view dataset,
                                   const std::vector<ScoredPrediction>& predictions,
                                   const std::vector<std::string>& all_classes);

// numpy's float64 sum (np.add.reduce): pairwise summation, 8-way unrolled blocks of <= 128.
double numpy_sum(const std::vector<double>& values);

}  // namespace kvec::eval
