// Tests of the synthetic long-context suite generator (src/eval/synthetic.h, text_source.h).
//
// Expected values are derived independently of the generator: answers are recomputed from the
// generated context (variable chains re-evaluated, word lists re-counted), lengths re-measured with
// the tokenizer, scores worked out by hand from RULER's definitions.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "eval/synthetic.h"
#include "eval/synthetic_words.h"
#include "eval/text_source.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "error_of.h"

namespace kvec::eval {
namespace {

const std::vector<std::string> kTasks = {
    "niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery", "niah_askmany",
    "vt", "cwe", "fwe", "qa"};

// The held-out text of data/text/, loaded once.
const TextSource& heldout() {
    static const TextSource src = TextSource::heldout();
    return src;
}

// Training-like text that is not the held-out text: varied sentences built from small lists.
const TextSource& train_text() {
    static const TextSource src = [] {
        const std::vector<std::string> who = {"The council",   "A farmer",      "The old sailor",
                                              "Our neighbour", "The committee", "A young clerk",
                                              "The captain",   "My grandmother"};
        const std::vector<std::string> did = {"walked along",       "wrote a letter about",
                                              "spoke at length of", "quietly remembered",
                                              "argued over",        "painted a picture of"};
        const std::vector<std::string> what = {
            "the harbour in the morning",       "the price of grain that year",
            "a storm that came from the north", "the long road to the capital",
            "the school beside the church",     "the letters that never arrived"};
        std::vector<std::string> docs;
        std::string doc;
        int n = 0;
        for (int rep = 0; rep < 4; ++rep) {
            for (const auto& w : who) {
                for (const auto& d : did) {
                    for (const auto& x : what) {
                        doc += w + " " + d + " " + x +
                               (n % 3 == 0 ? ", and nobody said a word" : "") + ". ";
                        if (++n % 40 == 0) {
                            docs.push_back(doc);
                            doc.clear();
                        }
                    }
                }
            }
        }
        docs.push_back(doc);
        return TextSource::from_texts(docs, "test training text");
    }();
    return src;
}

const Tokenizer& gpt2() {
    static const std::unique_ptr<Tokenizer> tok = [] {
        auto file = gguf::File::open(std::string(KVEC_SOURCE_DIR) +
                                     "/data/tokenizer-vectors/ggml-vocab-gpt-2.gguf");
        return std::make_unique<Tokenizer>(Tokenizer::from_gguf(*file));
    }();
    return *tok;
}

size_t count_occurrences(const std::string& hay, const std::string& needle) {
    size_t n = 0;
    for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
    return n;
}

// Words of a text: maximal runs of letters, digits and '-'.
std::set<std::string> words_of(std::string_view text) {
    std::set<std::string> out;
    std::string w;
    for (char c : text) {
        if (std::isalnum(static_cast<unsigned char>(c)) || c == '-') {
            w.push_back(c);
        } else if (!w.empty()) {
            out.insert(w);
            w.clear();
        }
    }
    if (!w.empty()) out.insert(w);
    return out;
}

using testing_support::error_of;

// ---------------------------------------------------------------------------------------------
// Sentences and text sources.

TEST(SynthSentences, WorkedExamples) {
    const auto s = split_sentences(
        "Mr. Smith went to Washington.  He said hello!\nIs it true? \"Yes,\" she said. George W. "
        "Bush spoke to the U.S. Congress. It was 2001. Then it ended");
    const std::vector<std::string> expected = {"Mr. Smith went to Washington.",
                                               "He said hello!",
                                               "Is it true?",
                                               "\"Yes,\" she said.",
                                               "George W. Bush spoke to the U.S. Congress.",
                                               "It was 2001.",
                                               "Then it ended"};
    EXPECT_EQ(s, expected);
}

TEST(SynthSentences, CutsOverlongSentences) {
    std::string text;
    for (int i = 0; i < 60; ++i) text += "clause number " + std::to_string(i) + "; ";
    text += "end.";
    const auto s = split_sentences(text, 100);
    ASSERT_GT(s.size(), 5u);
    std::string joined;
    for (const auto& piece : s) {
        EXPECT_LE(piece.size(), 100u);
        joined += (joined.empty() ? "" : " ") + piece;
    }
    EXPECT_EQ(joined + " ", text.substr(0, text.size() - 4) + "end. ");  // nothing lost
}

TEST(SynthTextSource, HeldoutIsBundledAndModest) {
    const TextSource& h = heldout();
    EXPECT_TRUE(h.is_heldout());
    EXPECT_EQ(h.n_documents(), 21u);  // 2001..2021
    EXPECT_GT(h.n_sentences(), 5000u);
    EXPECT_LT(h.n_chars(), 2u * 1024 * 1024);
    std::ifstream spec(std::string(KVEC_SOURCE_DIR) + "/data/text/heldout.json");
    const auto j = nlohmann::json::parse(spec);
    EXPECT_EQ(j["min_year"], 2001);
    EXPECT_EQ(j["heldout"].size(), 21u);
}

TEST(SynthTextSource, RefusesHeldoutTextForTraining) {
    const auto dir = std::filesystem::temp_directory_path() / "kvec_synth_test";
    std::filesystem::create_directories(dir);
    const auto leaked = (dir / "leak.txt").string();
    {
        std::ifstream in(std::string(KVEC_SOURCE_DIR) + "/data/text/sotu/2013_barack_obama_d.txt");
        std::ofstream out(leaked);
        out << "A preface of my own. " << in.rdbuf();
    }
    const std::string msg = error_of([&] { TextSource::from_files({leaked}, &heldout()); });
    EXPECT_NE(msg.find("held-out"), std::string::npos) << msg;
    EXPECT_NE(msg.find("leak.txt"), std::string::npos) << msg;

    const auto clean = (dir / "clean.json").string();
    {
        std::ofstream out(clean);
        out << R"([{"text": "One small text. It has two sentences."}, "Another document here."])";
    }
    const TextSource ok = TextSource::from_files({clean}, &heldout());
    EXPECT_EQ(ok.n_documents(), 2u);
    EXPECT_EQ(ok.n_sentences(), 3u);
    EXPECT_FALSE(ok.is_heldout());

    EXPECT_NE(error_of([&] {
                  TextSource::from_files({(dir / "missing.txt").string()});
              }).find("cannot open"),
              std::string::npos);
    const auto bad = (dir / "bad.json").string();
    std::ofstream(bad) << "{\"title\": 3}";
    EXPECT_NE(error_of([&] { TextSource::from_files({bad}); }).find("\"text\""), std::string::npos);
    std::filesystem::remove_all(dir);
}

// ---------------------------------------------------------------------------------------------
// Vocabulary split.

TEST(SynthVocab, SplitsAreDisjointAndNonTrivial) {
    const SplitVocab& tr = split_vocab(Split::Train);
    const SplitVocab& ev = split_vocab(Split::Eval);
    auto check = [](const std::vector<std::string>& a, const std::vector<std::string>& b,
                    size_t min_size) {
        EXPECT_GE(a.size(), min_size);
        EXPECT_GE(b.size(), min_size);
        std::set<std::string> sa(a.begin(), a.end());
        for (const auto& x : b) EXPECT_EQ(sa.count(x), 0u) << x;
    };
    check(tr.adjectives, ev.adjectives, 30);
    check(tr.nouns, ev.nouns, 30);
    check(tr.list_words, ev.list_words, 60);
    check(tr.names, ev.names, 200);
    check(tr.first_names, ev.first_names, 15);
    check(tr.coded_words, ev.coded_words, 1000);
    // About a third is eval.
    const double frac = static_cast<double>(ev.coded_words.size()) /
                        static_cast<double>(ev.coded_words.size() + tr.coded_words.size());
    EXPECT_NEAR(frac, 1.0 / 3.0, 0.05);
}

// ---------------------------------------------------------------------------------------------
// Determinism.

TEST(Synthetic, SameArgumentsSameBytes) {
    for (const auto& task : kTasks) {
        SynthGenerator a(heldout(), nullptr, {});
        SynthGenerator b(heldout(), nullptr, {});
        const std::string x = to_jsonl_line(a.generate(task, 7, 3, 1024));
        EXPECT_EQ(x, to_jsonl_line(b.generate(task, 7, 3, 1024))) << task;
        EXPECT_EQ(x, to_jsonl_line(a.generate(task, 7, 3, 1024))) << task;  // cache reuse
        EXPECT_NE(x, to_jsonl_line(a.generate(task, 8, 3, 1024))) << task;
        EXPECT_NE(x, to_jsonl_line(a.generate(task, 7, 4, 1024))) << task;
    }
}

// ---------------------------------------------------------------------------------------------
// Held-out instances.

TEST(Synthetic, EvalKeysAndAnswersNeverAppearInTraining) {
    SynthGenerator train(train_text(), nullptr, {Split::Train});
    SynthGenerator eval(heldout(), nullptr, {Split::Eval});
    std::set<std::string> haystack_words;
    for (size_t i = 0; i < train_text().n_sentences(); ++i) {
        auto w = words_of(train_text().sentence(i));
        haystack_words.insert(w.begin(), w.end());
    }
    // Everything a training instance adds to its haystack: words of its prompt not in the text.
    std::set<std::string> train_items;
    for (const auto& task : kTasks) {
        for (int i = 0; i < 60; ++i) {
            const SynthInstance t = train.generate(task, 100 + i, i, 512);
            for (const auto& w : words_of(t.prompt + " " + t.target)) {
                if (haystack_words.count(w) == 0) train_items.insert(w);
            }
        }
    }
    ASSERT_GT(train_items.size(), 2000u);
    size_t checked = 0;
    for (const auto& task : kTasks) {
        for (int i = 0; i < 10; ++i) {
            const SynthInstance e = eval.generate(task, 100 + i, i, 1024);
            std::vector<std::string> items = e.answers;
            items.insert(items.end(), e.keys.begin(), e.keys.end());
            for (const auto& item : items) {
                for (const auto& w : words_of(item)) {
                    EXPECT_EQ(train_items.count(w), 0u)
                        << task << ": eval item '" << w << "' occurs in training instances";
                    ++checked;
                }
            }
        }
    }
    EXPECT_GT(checked, 300u);
}

TEST(Synthetic, SplitsRequireTheRightHaystack) {
    EXPECT_NE(
        error_of([] { SynthGenerator g(train_text(), nullptr, {Split::Eval}); }).find("held-out"),
        std::string::npos);
    EXPECT_NE(
        error_of([] { SynthGenerator g(heldout(), nullptr, {Split::Train}); }).find("--haystack"),
        std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Answers are present, and are the right answers.

// Re-evaluates the VAR statements of a context in order: variable -> value.
std::map<std::string, std::string> run_assignments(const std::string& ctx) {
    std::map<std::string, std::string> vars;
    static const std::regex stmt(R"(VAR ([A-Z]{5}) = (VAR ([A-Z]{5})|(\d+))\.)");
    for (auto it = std::sregex_iterator(ctx.begin(), ctx.end(), stmt); it != std::sregex_iterator();
         ++it) {
        const auto& m = *it;
        vars[m[1]] = m[4].matched ? m[4].str() : vars.at(m[3]);
    }
    return vars;
}

std::map<std::string, int> count_list_words(const std::string& ctx, bool numbered) {
    std::map<std::string, int> counts;
    std::istringstream in(ctx);
    std::string tok;
    while (in >> tok) {
        if (numbered && tok.back() == '.') continue;  // "12."
        ++counts[tok];
    }
    return counts;
}

// The words with the k highest counts, checked to be strictly above the rest.
std::set<std::string> top_words(const std::map<std::string, int>& counts, size_t k) {
    std::vector<std::pair<int, std::string>> v;
    for (const auto& [w, c] : counts) v.emplace_back(c, w);
    std::sort(v.rbegin(), v.rend());
    EXPECT_GT(v.size(), k);
    if (v.size() > k) {
        EXPECT_GT(v[k - 1].first, v[k].first) << "ambiguous top " << k;
    }
    std::set<std::string> out;
    for (size_t i = 0; i < k && i < v.size(); ++i) out.insert(v[i].second);
    return out;
}

TEST(Synthetic, AnswersArePresentAndCorrect) {
    for (Split split : {Split::Eval, Split::Train}) {
        SynthGenerator g(split == Split::Eval ? heldout() : train_text(), nullptr, {split});
        for (int i = 0; i < 6; ++i) {
            for (const auto& task : kTasks) {
                const SynthInstance inst = g.generate(task, 11, i, i % 2 == 0 ? 1024 : 2048);
                SCOPED_TRACE(task + " #" + std::to_string(i));
                ASSERT_FALSE(inst.answers.empty());
                for (const auto& a : inst.answers) {
                    EXPECT_NE(inst.context.find(a), std::string::npos) << a;
                }
                // The prompt holds the context and the question, and ends with the cue.
                EXPECT_NE(inst.prompt.find(inst.context), std::string::npos);
                EXPECT_NE(inst.prompt.find(inst.input), std::string::npos);
                EXPECT_TRUE(inst.prompt.ends_with(inst.answer_prefix));
                // The ideal output scores 1.
                EXPECT_EQ(score_synthetic(inst.metric, inst.target, inst.answers), 1.0);
                if (task.starts_with("niah")) {
                    size_t expected_needles = task == "niah_single" ? 1 : 4;
                    EXPECT_EQ(inst.n_needles, static_cast<int>(expected_needles));
                    EXPECT_EQ(
                        count_occurrences(inst.context, "One of the special magic numbers for "),
                        expected_needles);
                    for (const auto& key : inst.keys) {
                        for (const auto& a : inst.answers) {
                            if (inst.keys.size() == 1) {
                                EXPECT_NE(inst.context.find("for " + key + " is: " + a + "."),
                                          std::string::npos);
                            }
                        }
                    }
                    EXPECT_EQ(inst.keys.size(), task == "niah_multiquery" ? 4u : 1u);
                    EXPECT_EQ(inst.answers.size(),
                              task == "niah_multivalue" || task == "niah_multiquery" ? 4u : 1u);
                } else if (task == "vt") {
                    ASSERT_EQ(inst.keys.size(), 1u);
                    std::set<std::string> holders;
                    for (const auto& [var, val] : run_assignments(inst.context)) {
                        if (val == inst.keys[0]) holders.insert(var);
                    }
                    EXPECT_EQ(holders,
                              std::set<std::string>(inst.answers.begin(), inst.answers.end()));
                    EXPECT_EQ(inst.answers.size(), 5u);
                    EXPECT_EQ(run_assignments(inst.context).size(), 15u);  // 3 chains x 5
                } else if (task == "cwe") {
                    EXPECT_EQ(top_words(count_list_words(inst.context, true), 5),
                              std::set<std::string>(inst.answers.begin(), inst.answers.end()));
                } else if (task == "fwe") {
                    EXPECT_EQ(top_words(count_list_words(inst.context, false), 3),
                              std::set<std::string>(inst.answers.begin(), inst.answers.end()));
                } else if (task == "qa") {
                    ASSERT_EQ(inst.keys.size(), 1u);
                    ASSERT_EQ(inst.answers.size(), 1u);
                    // Exactly one fact names the entity, and it holds the answer.
                    EXPECT_EQ(count_occurrences(inst.context, " " + inst.keys[0] + " "), 1u);
                    const size_t at = inst.context.find(" " + inst.keys[0] + " ");
                    const size_t end = inst.context.find('.', at);
                    EXPECT_NE(inst.context.substr(at, end - at).find(inst.answers[0]),
                              std::string::npos);
                    EXPECT_EQ(inst.n_needles, 8);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Depths.

TEST(Synthetic, NeedleDepthsCoverTheContext) {
    SynthGenerator g(heldout(), nullptr, {});
    std::vector<int> bins(5, 0);
    const int n = 200;
    double lo = 1.0, hi = 0.0;
    for (int i = 0; i < n; ++i) {
        const SynthInstance inst = g.generate("niah_single", 5, i, 1024);
        ASSERT_EQ(inst.depths.size(), 1u);
        ASSERT_EQ(inst.depth_percents.size(), 1u);
        const double d = inst.depths[0];
        ASSERT_GE(d, 0.0);
        ASSERT_LE(d, 1.0);
        // The needle sits where its drawn depth says, to within a sentence or so.
        EXPECT_NEAR(d, inst.depth_percents[0] / 100.0, 0.06);
        // ...and the recorded offset is really where the needle is.
        const size_t off =
            static_cast<size_t>(std::llround(d * static_cast<double>(inst.context.size())));
        EXPECT_EQ(inst.context.compare(off, 8, "One of t"), 0);
        bins[std::min(4, static_cast<int>(d * 5))]++;
        lo = std::min(lo, d);
        hi = std::max(hi, d);
    }
    for (int b : bins) EXPECT_GE(b, n / 10) << "depth quintile under-filled";  // uniform: n/5
    EXPECT_LT(lo, 0.03);
    EXPECT_GT(hi, 0.95);
    // Multi-needle tasks record one depth per answer-bearing needle, all distinct.
    const SynthInstance mv = g.generate("niah_multivalue", 5, 0, 2048);
    EXPECT_EQ(mv.depths.size(), 4u);
    EXPECT_EQ(std::set<int>(mv.depth_percents.begin(), mv.depth_percents.end()).size(), 4u);
    const SynthInstance vt = g.generate("vt", 5, 0, 2048);
    EXPECT_EQ(vt.depths.size(), 5u);
    EXPECT_TRUE(std::is_sorted(vt.depths.begin(), vt.depths.end()));  // a chain reads in order
}

// ---------------------------------------------------------------------------------------------
// Length targeting.

TEST(Synthetic, LengthWithoutTokenizerIsApproximatedByBytes) {
    SynthGenerator g(heldout(), nullptr, {});
    for (const auto& task : kTasks) {
        for (int length : {512, 4096}) {
            const SynthInstance inst = g.generate(task, 1, 0, length);
            const int approx = static_cast<int>((inst.prompt.size() + 3) / 4);
            EXPECT_EQ(inst.length_unit, "approx_tokens");
            EXPECT_EQ(inst.length, approx) << task;
            EXPECT_LE(approx, length - inst.max_new_tokens) << task;
            EXPECT_GE(approx, length - inst.max_new_tokens - length_tolerance(length)) << task;
        }
    }
}

TEST(Synthetic, LengthWithTokenizerHitsTheTarget) {
    const Tokenizer& tok = gpt2();
    for (PromptFormat format : {PromptFormat::Completion, PromptFormat::Chat}) {
        SynthGenerator g(heldout(), &tok, {Split::Eval, format});
        for (const auto& task : kTasks) {
            for (int length : {512, 2048}) {
                const SynthInstance inst = g.generate(task, 3, 1, length);
                const int n = static_cast<int>(tok.encode(inst.prompt, true).size());
                SCOPED_TRACE(task + " L=" + std::to_string(length) + " " + format_name(format));
                EXPECT_EQ(inst.length_unit, "tokens");
                EXPECT_EQ(inst.length, n);
                EXPECT_LE(n, length - inst.max_new_tokens);
                EXPECT_GE(n, length - inst.max_new_tokens - length_tolerance(length));
                // The ideal answer fits in the generation budget.
                EXPECT_LE(static_cast<int>(tok.encode(inst.target, false).size()),
                          inst.max_new_tokens);
            }
        }
    }
    // A long one, on training text too.
    SynthGenerator t(train_text(), &tok, {Split::Train});
    const SynthInstance inst = t.generate("niah_multikey", 3, 1, 8192);
    const int n = static_cast<int>(tok.encode(inst.prompt, true).size());
    EXPECT_LE(n, 8192 - inst.max_new_tokens);
    EXPECT_GE(n, 8192 - inst.max_new_tokens - length_tolerance(8192));
}

TEST(Synthetic, ChatLengthCountsTheRenderedTemplate) {
    // The GPT-2 vocabulary plus ChatML control tokens and template.
    VocabData d = gpt2().data();
    for (const char* special : {"<|im_start|>", "<|im_end|>"}) {
        d.tokens.push_back(special);
        d.types.push_back(TokenType::CONTROL);
        if (!d.scores.empty()) d.scores.push_back(0.0f);
    }
    d.chat_template =
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
        "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|im_start|>assistant\\n' }}{% endif %}";
    const Tokenizer chatml(d);
    SynthGenerator g(heldout(), &chatml, {Split::Eval, PromptFormat::Chat});
    for (const auto& task : {std::string("niah_single"), std::string("cwe")}) {
        const SynthInstance inst = g.generate(task, 2, 0, 1024);
        const std::string rendered = chatml.apply_chat_template({{"user", inst.prompt}}, true);
        ASSERT_NE(rendered.find("<|im_start|>user\n"), std::string::npos);
        const int n = static_cast<int>(chatml.encode(rendered, false, true).size()) +
                      (d.add_bos && d.bos_id >= 0 ? 1 : 0);
        SCOPED_TRACE(task);
        EXPECT_EQ(inst.length, n);
        EXPECT_GT(n, static_cast<int>(chatml.encode(inst.prompt, false).size()));  // + template
        EXPECT_LE(n, 1024 - inst.max_new_tokens);
        EXPECT_GE(n, 1024 - inst.max_new_tokens - length_tolerance(1024));
    }
}

TEST(Synthetic, FastLengthsStayWithinTheTarget) {
    // Without re-tokenizing, lengths are sums of cached piece counts with a 4-token margin: the
    // prompt must still fit, land within tolerance + 4, and report its length to within 3 tokens.
    for (const char* vocab : {"gpt-2", "llama-spm"}) {
        auto file = gguf::File::open(std::string(KVEC_SOURCE_DIR) +
                                     "/data/tokenizer-vectors/ggml-vocab-" + vocab + ".gguf");
        const Tokenizer tok = Tokenizer::from_gguf(*file);
        SynthGenerator g(train_text(), &tok, {Split::Train, PromptFormat::Completion, false});
        for (const auto& task : kTasks) {
            for (int i = 0; i < 4; ++i) {
                const int length = i % 2 == 0 ? 512 : 2048;
                const SynthInstance inst = g.generate(task, 9, i, length);
                const int n = static_cast<int>(tok.encode(inst.prompt, true).size());
                SCOPED_TRACE(std::string(vocab) + " " + task + " L=" + std::to_string(length));
                EXPECT_LE(n, length - inst.max_new_tokens);
                EXPECT_GE(n, length - inst.max_new_tokens - length_tolerance(length) - 4);
                EXPECT_NEAR(inst.length, n, 3);
            }
        }
    }
}

TEST(Synthetic, ChatFormAndJsonFields) {
    SynthGenerator g(heldout(), nullptr, {Split::Eval, PromptFormat::Chat});
    const SynthInstance inst = g.generate("niah_single", 1, 0, 1024);
    EXPECT_FALSE(inst.prompt.ends_with(inst.answer_prefix));  // the question ends the user turn
    EXPECT_TRUE(inst.prompt.ends_with(inst.input));
    EXPECT_TRUE(inst.target.starts_with(inst.answer_prefix));
    const auto j = nlohmann::json::parse(to_jsonl_line(inst));
    for (const char* key : {"input",  "context",        "answers",       "length", "dataset",
                            "_id",    "language",       "all_classes",   "task",   "split",
                            "seed",   "index",          "target_length", "prompt", "answer_prefix",
                            "target", "max_new_tokens", "metric",        "depths", "messages"}) {
        EXPECT_TRUE(j.contains(key)) << key;
    }
    EXPECT_EQ(j["dataset"], "niah_single");
    EXPECT_EQ(j["split"], "eval");
    EXPECT_EQ(j["messages"][0]["role"], "user");
    EXPECT_EQ(j["messages"][0]["content"], inst.prompt);
    EXPECT_EQ(j["answers"][0], inst.answers[0]);
    const std::string line = to_jsonl_line(inst);
    EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1);
}

TEST(Synthetic, Suites) {
    const SuiteSpec& s = find_suite("synthetic-2k");
    EXPECT_EQ(s.length, 2048);
    EXPECT_EQ(s.tasks.size(), kTasks.size());
    EXPECT_GE(s.n_instances(), 8 * 8);
    EXPECT_LE(s.n_instances(), 8 * 12);
    for (const char* name :
         {"synthetic-1k", "synthetic-4k", "synthetic-8k", "synthetic-16k", "synthetic-32k"}) {
        EXPECT_NO_THROW(find_suite(name));
    }
    SynthGenerator g(heldout(), nullptr, {});
    const auto all = g.generate_suite("synthetic-1k");
    EXPECT_EQ(static_cast<int>(all.size()), find_suite("synthetic-1k").n_instances());
    std::set<std::string> ids;
    for (const auto& inst : all) {
        EXPECT_EQ(inst.suite, "synthetic-1k");
        EXPECT_EQ(inst.target_length, 1024);
        ids.insert(inst.id);
    }
    EXPECT_EQ(ids.size(), all.size());
}

TEST(Synthetic, WriteJsonlRequest) {
    SynthRequest r;
    r.task = "niah_single";
    r.n = 3;
    r.length = 1024;
    r.tokenizer_path =
        std::string(KVEC_SOURCE_DIR) + "/data/tokenizer-vectors/ggml-vocab-gpt-2.gguf";
    std::ostringstream out;
    const SynthSummary s = write_synth_jsonl(r, out);
    EXPECT_EQ(s.n_instances, 3u);
    EXPECT_EQ(s.length_unit, "tokens");
    std::istringstream in(out.str());
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
        const auto j = nlohmann::json::parse(line);
        EXPECT_EQ(j["index"], n);
        EXPECT_EQ(j["length_unit"], "tokens");
        ++n;
    }
    EXPECT_EQ(n, 3);
    // Request errors.
    SynthRequest both = r;
    both.suite = "synthetic-2k";
    std::ostringstream sink;
    EXPECT_NE(error_of([&] { write_synth_jsonl(both, sink); }).find("not both"), std::string::npos);
    SynthRequest train = r;
    train.split = Split::Train;
    EXPECT_NE(error_of([&] { write_synth_jsonl(train, sink); }).find("--haystack"),
              std::string::npos);
    SynthRequest eval_hay = r;
    eval_hay.haystack_files = {"x.txt"};
    EXPECT_NE(error_of([&] { write_synth_jsonl(eval_hay, sink); }).find("--split train"),
              std::string::npos);
    SynthRequest no_n = r;
    no_n.n = 0;
    EXPECT_NE(error_of([&] { write_synth_jsonl(no_n, sink); }).find("--n"), std::string::npos);
    EXPECT_TRUE(sink.str().empty());
}

// ---------------------------------------------------------------------------------------------
// Scoring: RULER's definitions worked by hand.

TEST(SynthScoring, StringMatchAll) {
    // 2 of 3 references contained -> 2/3.
    EXPECT_DOUBLE_EQ(
        string_match_all("The numbers are 123456 and 654321.", {"123456", "654321", "111111"}),
        2.0 / 3.0);
    // Case-insensitive both ways.
    EXPECT_DOUBLE_EQ(string_match_all("qxkrt, MPLZA", {"QXKRT", "mplza"}), 1.0);
    EXPECT_DOUBLE_EQ(string_match_all("nothing here", {"apple"}), 0.0);
    // Substring, not word match (as RULER): "12345" is inside "123456".
    EXPECT_DOUBLE_EQ(string_match_all("123456", {"12345"}), 1.0);
    EXPECT_DOUBLE_EQ(string_match_all("anything", {}), 0.0);
}

TEST(SynthScoring, StringMatchPart) {
    EXPECT_DOUBLE_EQ(string_match_part("It was Orwick.", {"Belford", "orwick"}), 1.0);
    EXPECT_DOUBLE_EQ(string_match_part("It was Orwick.", {"Belford", "Kalmere"}), 0.0);
    EXPECT_DOUBLE_EQ(string_match_part("", {"x"}), 0.0);
}

TEST(SynthScoring, PostprocessAndDispatch) {
    EXPECT_EQ(ruler_postprocess("  \tabc\x01"
                                "def\x1f \n"),
              "abc\ndef");
    // A control character between the parts of a reference breaks the match, as in RULER.
    EXPECT_DOUBLE_EQ(string_match_all("ab\x02"
                                      "cd",
                                      {"abcd"}),
                     0.0);
    EXPECT_DOUBLE_EQ(score_synthetic("string_match_all", "a b", {"a", "c"}), 0.5);
    EXPECT_DOUBLE_EQ(score_synthetic("string_match_part", "a b", {"a", "c"}), 1.0);
    EXPECT_NE(
        error_of([] { score_synthetic("rouge", "a", {"a"}); }).find("unknown synthetic metric"),
        std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Bad input.

TEST(Synthetic, BadInputsGiveClearErrors) {
    SynthGenerator g(heldout(), nullptr, {});
    std::string msg = error_of([&] { g.generate("niah", 1, 0, 2048); });
    EXPECT_NE(msg.find("unknown synthetic task 'niah'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("niah_single"), std::string::npos) << msg;  // lists the known tasks
    msg = error_of([&] { g.generate("qa", 1, 0, 100); });
    EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
    msg = error_of([&] { g.generate("qa", 1, 0, 1 << 20); });
    EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
    SynthGenerator chat(heldout(), &gpt2(), {Split::Eval, PromptFormat::Chat});
    msg = error_of([&] { chat.generate("vt", 1, 0, 256); });
    EXPECT_NE(msg.find("too small for task 'vt'"), std::string::npos) << msg;
    msg = error_of([&] { g.generate("niah_single", 1, -1, 1024); });
    EXPECT_NE(msg.find("negative"), std::string::npos) << msg;
    msg = error_of([&] { g.generate_suite("synthetic-3k"); });
    EXPECT_NE(msg.find("unknown synthetic suite"), std::string::npos) << msg;
    EXPECT_NE(error_of([] { parse_split("test"); }).find("unknown split"), std::string::npos);
    EXPECT_NE(error_of([] { parse_format("xml"); }).find("unknown prompt format"),
              std::string::npos);
    // A haystack far too short for the length.
    const TextSource tiny = TextSource::from_texts({"Only a few words here. And here."}, "tiny");
    SynthGenerator t(tiny, nullptr, {Split::Train});
    msg = error_of([&] { t.generate("niah_single", 1, 0, 4096); });
    EXPECT_NE(msg.find("too short"), std::string::npos) << msg;
    EXPECT_NE(error_of([] { TextSource::from_texts({"   "}, "blank"); }).find("no sentences"),
              std::string::npos);
}

}  // namespace
}  // namespace kvec::eval
