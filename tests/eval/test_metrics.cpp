// LongBench metrics: worked examples. Every expected value below is derived by hand from the
// official definitions (THUDM/LongBench metrics.py and eval.py, pltrdy rouge 1.0.1, fuzzywuzzy
// 0.18 + python-Levenshtein); the derivation is in the comment next to it. Where a value is a
// float formula, the test writes the formula the Python code evaluates, in the same order.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "eval/metrics.h"
#include "util/error.h"

namespace kvec::eval {
namespace {

using Strings = std::vector<std::string>;

// ---- Python text primitives ---------------------------------------------------------------------

TEST(PyText, SplitUsesPythonWhitespace) {
    // str.split(): \t, NBSP (U+00A0), ideographic space (U+3000) and U+001F separate; the
    // zero-width space U+200B is not whitespace in Python (category Cf), so "a\u200bb" stays one.
    EXPECT_EQ(py::split("  a\tb\u00a0c\u3000 d\x1f"
                        "e "),
              (Strings{"a", "b", "c", "d", "e"}));
    EXPECT_EQ(py::split("a\u200bb"), (Strings{"a\u200bb"}));
    EXPECT_EQ(py::split(""), Strings{});
    EXPECT_EQ(py::split(" \n "), Strings{});
    // str.split(".") keeps empty pieces.
    EXPECT_EQ(py::split("a..b.", "."), (Strings{"a", "", "b", ""}));
    EXPECT_EQ(py::join_whitespace("  x\u2003 y \n"), "x y");
}

TEST(PyText, LowerIsUnicodeAware) {
    EXPECT_EQ(py::lower("ÀÉÎ Ça ÄÖÜ"), "àéî ça äöü");
    // U+0130 lowercases to "i" + U+0307 (SpecialCasing), two code points.
    EXPECT_EQ(py::lower("\u0130"), "i\u0307");
    // Final sigma: a capital sigma preceded by a cased letter and not followed by one -> ς.
    EXPECT_EQ(py::lower("ΟΔΟΣ"), "οδο\u03c2");
    EXPECT_EQ(py::lower("ΑΣ."), "α\u03c2.");  // "." is case-ignorable, then end of string
    EXPECT_EQ(py::lower("ΣΑ"), "\u03c3α");    // nothing cased before it -> σ
    EXPECT_EQ(py::lower("ΑΣΑ"), "α\u03c3α");  // cased letter after it -> σ
    // Invalid UTF-8 passes through untouched.
    EXPECT_EQ(py::lower("A\xff"
                        "B"),
              "a\xff"
              "b");
}

TEST(PyText, DigitRunsAreUnicodeDecimal) {
    // re \d+ matches category Nd: ARABIC-INDIC DIGIT FOUR (U+0664) joins "3" and "5".
    EXPECT_EQ(py::find_digit_runs("a12b3\u06645 x"), (Strings{"12", "3\u06645"}));
    // Superscript two (U+00B2) is category No, not \d.
    EXPECT_EQ(py::find_digit_runs("x\u00b2"), Strings{});
}

TEST(PyText, RoundHalfEven) {
    // Python 3 round(): ties go to the even integer.
    EXPECT_EQ(py::round_half_even(0.5), 0);
    EXPECT_EQ(py::round_half_even(1.5), 2);
    EXPECT_EQ(py::round_half_even(2.5), 2);
    EXPECT_EQ(py::round_half_even(87.5), 88);
    EXPECT_EQ(py::round_half_even(-0.5), 0);
    EXPECT_EQ(py::round_half_even(2.5000001), 3);
    EXPECT_EQ(py::round_half_even(66.66666666666666), 67);
}

TEST(PyText, RoundDigitsPythonVersusNumpy) {
    // round(0.125, 2): 0.125 is exact in binary, a true tie -> even -> 0.12; 0.375 -> 0.38.
    EXPECT_EQ(py::round_digits(0.125, 2), 0.12);
    EXPECT_EQ(py::round_digits(0.375, 2), 0.38);
    // 2.675 is 2.67499999999999982236431605997495353221893310546875 in binary -> 2.67.
    EXPECT_EQ(py::round_digits(2.675, 2), 2.67);
    // 37.545 is 37.5450000000000017053025658242404460906982421875: Python rounds the exact value
    // up to 37.55, numpy computes 37.545 * 100 = 3754.5 (rounded product), rint -> 3754 -> 37.54.
    EXPECT_EQ(py::round_digits(37.545, 2), 37.55);
    EXPECT_EQ(py::numpy_round_digits(37.545, 2), 37.54);
    // 23.215 is 23.2149999999999998578...: Python -> 23.21; numpy: 2321.5 -> rint 2322 -> 23.22.
    EXPECT_EQ(py::round_digits(23.215, 2), 23.21);
    EXPECT_EQ(py::numpy_round_digits(23.215, 2), 23.22);
    EXPECT_EQ(py::round_digits(100.0 / 3.0, 2), 33.33);
}

TEST(PyText, NumpyPairwiseSum) {
    // n < 8: a plain left-to-right sum.
    EXPECT_EQ(numpy_sum({1.0, 2.0, 3.0}), 6.0);
    EXPECT_EQ(numpy_sum({}), 0.0);
    // n = 9: 8 accumulators r[k] = a[k], then ((r0+r1)+(r2+r3)) + ((r4+r5)+(r6+r7)), then + a[8].
    // a = [1e16, 1 x 8]. Near 1e16 doubles are 2 apart and 1e16 has an even mantissa:
    //   r0+r1 = 1e16+1 -> tie -> 1e16;  r2+r3 = 2;  1e16 + 2 exact;  (r4+r5)+(r6+r7) = 4;
    //   1e16+2+4 = 1e16+6;  + a[8] = 1e16+7 -> tie between 1e16+6 (odd mantissa) and 1e16+8 ->
    //   1e16+8.
    // A sequential sum would lose every 1 and give 1e16.
    std::vector<double> a(9, 1.0);
    a[0] = 1e16;
    EXPECT_EQ(numpy_sum(a), 1e16 + 8.0);
    double seq = 0;
    for (double v : a) seq += v;
    EXPECT_EQ(seq, 1e16);
}

// ---- normalize_answer / qa_f1_score -------------------------------------------------------------

TEST(NormalizeAnswer, PunctuationArticlesWhitespaceCase) {
    // lower -> "the cat's  hat!" -> no punctuation "the cats  hat" -> articles " " -> "cats hat"
    EXPECT_EQ(normalize_answer("The Cat's  hat!"), "cats hat");
    // "an apple, a banana and the end." -> "an apple a banana and the end" -> articles removed
    EXPECT_EQ(normalize_answer("An apple, A banana and THE end."), "apple banana and end");
    // Articles only as whole words: "theater" stays; "an-a" loses its "-" first and becomes "ana".
    EXPECT_EQ(normalize_answer("theater an-a"), "theater ana");
    // Punctuation removal happens before article removal: "the." -> "the" -> removed.
    EXPECT_EQ(normalize_answer("x the. y"), "x y");
    // "_" is in string.punctuation: "the_end" -> "theend".
    EXPECT_EQ(normalize_answer("the_end"), "theend");
    EXPECT_EQ(normalize_answer("Über the Ärger"), "über ärger");
    // Curly quotes are not ASCII punctuation: they stay, and they are not \w, so "the" between
    // them is a whole word: "“the” answer" -> "“ ” answer".
    EXPECT_EQ(normalize_answer("\u201cThe\u201d answer"), "\u201c \u201d answer");
    // é is \w: "théa" is one word, no article inside.
    EXPECT_EQ(normalize_answer("théa"), "théa");
    // A combining accent (Mn) is not \w: "the" + U+0301 has a word boundary after "e".
    EXPECT_EQ(normalize_answer("the\u0301 x"), "\u0301 x");
    // Unicode whitespace collapses.
    EXPECT_EQ(normalize_answer("x\u00a0y\u2003z"), "x y z");
    EXPECT_EQ(normalize_answer(""), "");
    EXPECT_EQ(normalize_answer("a an the"), "");
}

TEST(QaF1, Basics) {
    EXPECT_EQ(qa_f1_score("Paris", "paris."), 1.0);
    // Multiset intersection: pred {red:2, blue:1}, gt {red:1, blue:2} -> common 1 + 1 = 2;
    // P = 2/3, R = 2/3, F1 = 2PR/(P+R).
    const double p = 1.0 * 2 / 3, r = 1.0 * 2 / 3;
    EXPECT_EQ(qa_f1_score("red red blue", "red blue blue"), (2 * p * r) / (p + r));
    // Partial: "new york city" vs "york": common 1, P = 1/3, R = 1 -> 2*(1/3)/(4/3) = 0.5.
    const double p2 = 1.0 * 1 / 3, r2 = 1.0;
    EXPECT_EQ(qa_f1_score("New York City", "york"), (2 * p2 * r2) / (p2 + r2));
    // Repeated prediction tokens count once per reference occurrence: "york york york" vs
    // "new york": common min(3, 1) = 1, P = 1/3, R = 1/2 -> F1 = 0.4.
    const double p3 = 1.0 / 3, r3 = 1.0 / 2;
    EXPECT_EQ(qa_f1_score("york york york", "new york"), (2 * p3 * r3) / (p3 + r3));
    EXPECT_NEAR(qa_f1_score("york york york", "new york"), 0.4, 1e-15);
}

TEST(QaF1, EmptyAndArticleOnly) {
    EXPECT_EQ(qa_f1_score("", "Paris"), 0.0);
    EXPECT_EQ(qa_f1_score("Paris", ""), 0.0);
    EXPECT_EQ(qa_f1_score("", ""), 0.0);  // num_same == 0 -> 0, even for two empties
    EXPECT_EQ(qa_f1_score("The the THE", "the"), 0.0);
    EXPECT_EQ(qa_f1_score("!!!", "?"), 0.0);
}

// ---- rouge_score
// ----------------------------------------------------------------------------------

double rouge_f(double p, double r) { return 2.0 * ((p * r) / (p + r + 1e-8)); }

TEST(RougeL, SingleSentence) {
    // ref words: the cat is on the mat (distinct: the, cat, is, on, mat -> m = 5)
    // hyp words: the cat sat on the mat (distinct: the, cat, sat, on, mat -> n = 5)
    // LCS = "the cat on the mat" -> as a set {the, cat, on, mat} -> 4. r = 4/5, p = 4/5.
    const auto s = rouge_l("the cat sat on the mat", "the cat is on the mat");
    ASSERT_TRUE(s);
    EXPECT_EQ(s->r, 4.0 / 5);
    EXPECT_EQ(s->p, 4.0 / 5);
    EXPECT_EQ(s->f, rouge_f(4.0 / 5, 4.0 / 5));
    EXPECT_EQ(rouge_score("the cat sat on the mat", "the cat is on the mat"), s->f);
}

TEST(RougeL, SummaryLevelUnion) {
    // pltrdy's docstring example: r = w1 w2 w3 w4 w5; C = {c1 = w1 w2 w6 w7 w8,
    // c2 = w1 w3 w8 w9 w5}. LCS(r, c1) = w1 w2, LCS(r, c2) = w1 w3 w5, union {w1, w2, w3, w5} = 4.
    // m = 5 distinct reference words; n = 8 distinct hypothesis words (w1 w2 w6 w7 w8 w3 w9 w5).
    const auto s = rouge_l("w1 w2 w6 w7 w8. w1 w3 w8 w9 w5", "w1 w2 w3 w4 w5");
    ASSERT_TRUE(s);
    EXPECT_EQ(s->r, 4.0 / 5);
    EXPECT_EQ(s->p, 4.0 / 8);
    EXPECT_EQ(s->f, rouge_f(4.0 / 8, 4.0 / 5));
}

TEST(RougeL, UnionIsOverDistinctWordsAcrossReferenceSentences) {
    // ref sentences "a b", "a b"; hyp "a b". Each pair's LCS is {a, b}; the union stays {a, b}:
    // LCS_u = 2, m = 2 (distinct), n = 2 -> r = p = 1.
    const auto s = rouge_l("a b", "a b. a b");
    ASSERT_TRUE(s);
    EXPECT_EQ(s->r, 1.0);
    EXPECT_EQ(s->p, 1.0);
    EXPECT_EQ(s->f, rouge_f(1.0, 1.0));
}

TEST(RougeL, ReconstructionTieBreaking) {
    // ref sentences r1 = [a, b], r2 = [b]; hyp c1 = [b, a].
    // _recon(r1, c1) from (2, 2): b != a; table[1][2] = 1 is not > table[2][1] = 1 -> go left
    // (j-1) to (2, 1): b == b -> LCS {b} (the other choice would have been {a}).
    // _recon(r2, c1) from (1, 2): b != a; table[0][2] = 0 not > table[1][1] = 1 -> left; b == b ->
    // {b}. Union {b}: LCS_u = 1; m = |{a, b}| = 2, n = |{b, a}| = 2 -> r = p = 1/2 (not 1, which
    // the other tie-break would give).
    const auto s = rouge_l("b a", "a b. b");
    ASSERT_TRUE(s);
    EXPECT_EQ(s->r, 0.5);
    EXPECT_EQ(s->p, 0.5);
    EXPECT_EQ(s->f, rouge_f(0.5, 0.5));
}

TEST(RougeL, RepeatedWordsAndDecimalPoints) {
    // hyp "a a a", ref "a": sets -> m = n = 1, LCS {a} -> r = p = 1.
    EXPECT_EQ(rouge_score("a a a", "a"), rouge_f(1.0, 1.0));
    // Sentences split on every ".": "pi is 3.14" -> ["pi is 3", "14"]; n = |{pi, is, 3, 14}| = 4,
    // m = |{pi, is, 3}| = 3; LCS_u = |{pi, is, 3}| = 3 -> r = 1, p = 3/4.
    EXPECT_EQ(rouge_score("pi is 3.14", "pi is 3"), rouge_f(3.0 / 4, 1.0));
}

TEST(RougeL, EmptyHypothesisIsZero) {
    // "" and "..." split into no non-empty piece -> "Hypothesis is empty" ValueError -> 0.0.
    EXPECT_FALSE(rouge_l("", "a b"));
    EXPECT_EQ(rouge_score("", "a b"), 0.0);
    EXPECT_EQ(rouge_score("...", "a b"), 0.0);
    EXPECT_EQ(rouge_score("a b", ""), 0.0);  // empty reference raises too
}

TEST(RougeL, WhitespaceOnlySentenceIsTheEmptyWord) {
    // hyp " ": one piece " " (non-empty) -> sentence "" -> words [""] -> n = 1.
    // ref "a. ": pieces "a", " " -> sentences "a", "" -> words {a, ""} -> m = 2.
    // LCS([a], [""]) = {}; LCS([""], [""]) = {""} -> LCS_u = 1: r = 1/2, p = 1/1.
    const auto s = rouge_l(" ", "a. ");
    ASSERT_TRUE(s);
    EXPECT_EQ(s->r, 0.5);
    EXPECT_EQ(s->p, 1.0);
    EXPECT_EQ(s->f, rouge_f(1.0, 0.5));
}

std::string words(const std::string& first, const std::string& stem, int n) {
    std::string s = first;
    for (int i = 1; i <= n; ++i) s += " " + stem + std::to_string(i);
    return s;
}

TEST(RougeL, PythonRecursionLimit) {
    // ref "a x1..x400", hyp "a y1..y400" (one sentence each). Back-trace from (401, 401): 400
    // steps left (ties, table values 1 = 1), 400 steps up (table[i-1][1] = 1 > table[i][0] = 0),
    // 1 diagonal on "a" = 801 steps <= 990: fine. LCS_u = 1, m = n = 401 -> r = p = 1/401.
    EXPECT_EQ(rouge_score(words("a", "y", 400), words("a", "x", 400)),
              rouge_f(1.0 / 401, 1.0 / 401));
    // With 995 filler words the back-trace takes 995 + 995 + 1 = 1991 steps: Python raises
    // RecursionError inside rouge and LongBench's bare except returns 0.0.
    EXPECT_FALSE(rouge_l(words("a", "y", 995), words("a", "x", 995)));
    EXPECT_EQ(rouge_score(words("a", "y", 995), words("a", "x", 995)), 0.0);
    // The exact boundary: ref "x", hyp "y1..yL" (all different): every step is a tie -> left, so
    // the back-trace takes L steps. L = 990 still runs (f = 0, nothing in common), L = 991 raises.
    // (Checked against CPython 3.11 with the same 9 frames below the first _recon call.)
    const auto at_limit = rouge_l(words("y0", "y", 989), "x");
    ASSERT_TRUE(at_limit);
    EXPECT_EQ(at_limit->f, 0.0);
    EXPECT_FALSE(rouge_l(words("y0", "y", 990), "x"));
}

// ---- classification_score
// -------------------------------------------------------------------------

TEST(Classification, Basics) {
    const Strings classes = {"Animal", "Color", "Food"};
    EXPECT_EQ(classification_score("Color", "Color", classes), 1.0);
    // Two classes named -> matches [Color, Food], the truth among them -> 1/2.
    EXPECT_EQ(classification_score("Color or Food", "Color", classes), 0.5);
    EXPECT_EQ(classification_score("Food", "Color", classes), 0.0);
    EXPECT_EQ(classification_score("nothing", "Color", classes), 0.0);
    EXPECT_EQ(classification_score("color", "Color", classes), 0.0);  // case-sensitive `in`
}

TEST(Classification, MutationWhileIteratingQuirk) {
    // classes [ab, b, abc], prediction "abc", truth "abc": matches = [ab, b, abc] (all substrings).
    // Loop index 0: "ab" is in "abc" and != "abc" -> removed -> [b, abc]; index 1: "abc" (the
    // iterator skipped "b") -> kept. Final [b, abc] -> 1/2. (Filtering correctly gives [abc] -> 1.)
    EXPECT_EQ(classification_score("abc", "abc", {"ab", "b", "abc"}), 0.5);
    // classes [b, ab, b], prediction "ab", truth "ab": matches [b, ab, b]. Index 0 "b" -> remove
    // the first "b" -> [ab, b]; index 1 "b" -> remove the first "b" -> [ab]; end -> 1/1.
    EXPECT_EQ(classification_score("ab", "ab", {"b", "ab", "b"}), 1.0);
    // A match that is a substring of the truth but not removed because it was skipped still
    // counts in the denominator: classes [x, ab, b, abc], prediction "x abc", truth "abc":
    // matches [x, ab, b, abc]; index 0 "x" kept; index 1 "ab" removed -> [x, b, abc];
    // index 2 "abc" kept -> [x, b, abc] -> 1/3.
    EXPECT_EQ(classification_score("x abc", "abc", {"x", "ab", "b", "abc"}), 1.0 / 3);
}

// ---- retrieval / count
// ----------------------------------------------------------------------------

TEST(Retrieval, SeveralNumbers) {
    EXPECT_EQ(retrieval_score("Paragraph 7", "Paragraph 7"), 1.0);
    // numbers [7, 17] -> 1/2
    EXPECT_EQ(retrieval_score("Paragraph 7 and Paragraph 17", "Paragraph 7"), 0.5);
    EXPECT_EQ(retrieval_score("paragraph 7", "Paragraph 7"), 1.0);  // only the digits matter
    EXPECT_EQ(retrieval_score("I do not know", "Paragraph 7"), 0.0);
    EXPECT_EQ(retrieval_score("Paragraph 07", "Paragraph 7"), 0.0);  // "07" != "7"
    // numbers [1, 2, 12] -> 1/3 equal to "12"
    EXPECT_EQ(retrieval_score("1, 2 or 12", "Paragraph 12"), 1.0 / 3);
    // The id is the first "Paragraph <digits>" of the reference.
    EXPECT_EQ(retrieval_score("12", "see Paragraph 12, not Paragraph 3"), 1.0);
    EXPECT_EQ(retrieval_score("4", "Paragraph x, Paragraph 4"), 1.0);
    EXPECT_THROW(retrieval_score("4", "no paragraph id"), Error);
    // retrieval_zh_score uses "段落(\d+)".
    EXPECT_EQ(compute_metric(Metric::RetrievalZh, "段落3", "段落3", {}), 1.0);
}

TEST(Count, Shares) {
    // numbers [12, 13, 12] -> 2/3
    EXPECT_EQ(count_score("There are 12 paragraphs, not 13 or 12.", "12"), 2.0 / 3);
    EXPECT_EQ(count_score("", "12"), 0.0);
    EXPECT_EQ(count_score("012", "12"), 0.0);
    EXPECT_EQ(count_score("12.5", "12"), 0.5);             // [12, 5]
    EXPECT_EQ(count_score("12 \u0661\u0662", "12"), 0.5);  // Arabic-Indic "١٢" is a \d+ run too
}

// ---- code_sim_score / fuzz.ratio
// ------------------------------------------------------------------

TEST(FuzzRatio, Decorators) {
    EXPECT_EQ(fuzz_ratio("", ""), 100);  // check_for_equivalence comes first
    EXPECT_EQ(fuzz_ratio("", "x"), 0);   // check_empty_string
    EXPECT_EQ(fuzz_ratio("abc", "abc"), 100);
}

TEST(FuzzRatio, BankersRounding) {
    // ratio = (lensum - d) / lensum with d = lensum - 2 * LCS, i.e. 2 * LCS / lensum.
    // "a" + 199 b vs "a" + 199 c: LCS 1, lensum 400 -> 0.005; 100 * 0.005 = 0.5 -> round -> 0.
    EXPECT_EQ(fuzz_ratio("a" + std::string(199, 'b'), "a" + std::string(199, 'c')), 0);
    // LCS 1, lensum 80 -> 0.025 -> 2.5 -> 2.
    EXPECT_EQ(fuzz_ratio("a" + std::string(39, 'b'), "a" + std::string(39, 'c')), 2);
    // LCS 1, lensum 16 -> 0.125 -> 12.5 -> 12.
    EXPECT_EQ(fuzz_ratio("a" + std::string(7, 'b'), "a" + std::string(7, 'c')), 12);
    // LCS 7, lensum 16 -> 0.875 -> 87.5 -> 88.
    EXPECT_EQ(fuzz_ratio("abcdefgh", "abcdefgX"), 88);
    // LCS 5, lensum 16 -> 0.625 -> 62.5 -> 62.
    EXPECT_EQ(fuzz_ratio("abcdeXYZ", "abcdeUVW"), 62);
    // LCS 1, lensum 3 -> 66.67 -> 67.
    EXPECT_EQ(fuzz_ratio("ab", "a"), 67);
}

TEST(FuzzRatio, IndelDistanceOverCodePoints) {
    // A substitution costs 2: "abc" vs "axc" LCS 2, lensum 6 -> 4/6 -> 66.67 -> 67.
    EXPECT_EQ(fuzz_ratio("abc", "axc"), 67);
    // Code points, not bytes: "héllo" vs "hello" has 5 + 5 code points, LCS 4 -> 8/10 -> 80
    // (over UTF-8 bytes it would be 8/11 -> 73).
    EXPECT_EQ(fuzz_ratio("héllo", "hello"), 80);
}

TEST(CodeSim, FirstLineSelection) {
    // lstrip("\n"), then the first line without ` # //: "x = foo(1)".
    const std::string pred = "\n\n```python\n# comment\nx = foo(1)\n";
    EXPECT_EQ(code_sim_line(pred), "x = foo(1)");
    // vs "x = foo(2)": LCS 9, lensum 20 -> 0.9 -> 90 -> 0.9.
    EXPECT_EQ(code_sim_score(pred, "x = foo(2)"), 90 / 100.0);
    // A line with "//" anywhere (a URL) is skipped; the empty line after it is the first clean
    // one, so the comparison is against "" -> 0.
    EXPECT_EQ(code_sim_line("// c\nurl = 'http://x'\n"), "");
    EXPECT_EQ(code_sim_score("# c\n\ny = 2", "y = 2"), 0.0);
    // Only newlines are stripped: "  x = 1" vs "x = 1": LCS 5, lensum 12 -> 83.33 -> 83.
    EXPECT_EQ(code_sim_score("  x = 1", "x = 1"), 83 / 100.0);
    // No clean line at all -> "" ; "" vs "" is 100.
    EXPECT_EQ(code_sim_score("# only", ""), 1.0);
}

// ---- eval.py scorer
// --------------------------------------------------------------------------------

TEST(Scorer, DatasetMetricsTable) {
    EXPECT_EQ(metric_for_dataset("narrativeqa"), Metric::QaF1);
    EXPECT_EQ(metric_for_dataset("triviaqa"), Metric::QaF1);
    EXPECT_EQ(metric_for_dataset("samsum"), Metric::Rouge);
    EXPECT_EQ(metric_for_dataset("trec"), Metric::Classification);
    EXPECT_EQ(metric_for_dataset("passage_count"), Metric::Count);
    EXPECT_EQ(metric_for_dataset("passage_retrieval_en"), Metric::Retrieval);
    EXPECT_EQ(metric_for_dataset("repobench-p"), Metric::CodeSim);
    EXPECT_EQ(metric_for_dataset("vcsum"), Metric::RougeZh);
    EXPECT_FALSE(metric_for_dataset("nope"));
    EXPECT_THROW(require_metric_for_dataset("nope"), Error);
}

TEST(Scorer, MaxOverReferences) {
    // "paris" vs "london" -> 0; vs "paris france" -> P 1, R 1/2 -> 2/3. max -> 2/3.
    const double p = 1.0, r = 0.5;
    EXPECT_EQ(sample_score("narrativeqa", "Paris", {"London", "Paris, France"}, {}),
              (2 * p * r) / (p + r));
    // Tie: both references score 1.
    EXPECT_EQ(sample_score("hotpotqa", "cat", {"a cat", "cat"}, {}), 1.0);
    EXPECT_EQ(sample_score("hotpotqa", "cat", {}, {}), 0.0);  // no reference -> 0
}

TEST(Scorer, FirstLineCut) {
    // triviaqa: "\n\nParis\nLondon" -> lstrip("\n") -> first line "Paris" -> vs "London" 0.
    EXPECT_EQ(sample_score("triviaqa", "\n\nParis\nLondon", {"London"}, {}), 0.0);
    // narrativeqa is not cut: tokens [paris, london] vs [london] -> P 1/2, R 1 -> 2/3.
    const double p = 0.5, r = 1.0;
    EXPECT_EQ(sample_score("narrativeqa", "Paris\nLondon", {"London"}, {}), (2 * p * r) / (p + r));
    EXPECT_EQ(first_line("\n\nab\ncd"), "ab");
    EXPECT_EQ(first_line(""), "");
    // trec: "Color\nFood" -> "Color" -> one match -> 1.
    EXPECT_EQ(sample_score("trec", "Color\nFood", {"Color"}, {"Color", "Food"}), 1.0);
    // samsum: only the first line is compared: "x y\nz" -> "x y" vs "x y" -> r = p = 1.
    EXPECT_EQ(sample_score("samsum", "x y\nz", {"x y"}, {}), rouge_f(1.0, 1.0));
}

TEST(Scorer, ChineseSegmentedMetricsAreRejected) {
    try {
        sample_score("multifieldqa_zh", "x", {"x"}, {});
        FAIL() << "expected kvec::Error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("Chinese LongBench tasks are not supported"),
                  std::string::npos);
    }
    EXPECT_THROW(compute_metric(Metric::RougeZh, "x", "x", {}), Error);
    EXPECT_TRUE(metric_needs_jieba(Metric::QaF1Zh));
    EXPECT_FALSE(metric_needs_jieba(Metric::RetrievalZh));
}

TEST(Scorer, DatasetScoreRoundsLikePython) {
    // scores 1, 0, 0 -> 100 * 1 / 3 = 33.333... -> 33.33
    std::vector<ScoredPrediction> preds = {{"Paris", {"Paris"}}, {"x", {"Paris"}}, {"", {"Paris"}}};
    EXPECT_EQ(dataset_score("hotpotqa", preds, {}), 33.33);
    // 800 samples, one correct: 100 * 1 / 800 = 0.125 exactly -> tie -> round half even -> 0.12.
    std::vector<ScoredPrediction> many(800, ScoredPrediction{"no", {"yes"}});
    many[5].prediction = "yes";
    EXPECT_EQ(dataset_score("hotpotqa", many, {}), 0.12);
    EXPECT_THROW(dataset_score("hotpotqa", {}, {}), Error);
}

TEST(Scorer, LongBenchEBuckets) {
    // Bucket by length: < 4000, < 8000, else. 3999 -> 0-4k, 4000 and 7999 -> 4-8k, 8000 -> 8k+.
    std::vector<ScoredPrediction> preds = {
        {"yes", {"yes"}, 3999},  // 1
        {"no", {"yes"}, 100},    // 0
        {"yes", {"yes"}, 4000},  // 1
        {"yes", {"yes"}, 7999},  // 1
        {"no", {"yes"}, 7000},   // 0
    };
    const auto s = dataset_score_e("hotpotqa", preds, {});
    EXPECT_EQ(s.len_0_4k, 50.0);             // mean 1/2 -> 50
    EXPECT_EQ(s.len_4_8k, 66.67);            // mean 2/3 -> 66.666... -> rint(6666.67) / 100
    EXPECT_TRUE(std::isnan(s.len_8k_plus));  // np.mean([]) is nan
    preds.push_back({"yes", {"yes"}, 8000});
    EXPECT_EQ(dataset_score_e("hotpotqa", preds, {}).len_8k_plus, 100.0);
    preds.push_back({"yes", {"yes"}, -1});
    EXPECT_THROW(dataset_score_e("hotpotqa", preds, {}), Error);
}

}  // namespace
}  // namespace kvec::eval
