// LongBench data handling: configuration, prompt building (byte-exact against the official
// templates), sample parsing, middle truncation arithmetic, generation settings, scoring of
// prediction files, and the fixture in data/longbench/fixture/.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>

#include "eval/longbench.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "error_of.h"

namespace kvec::eval {
namespace {

namespace fs = std::filesystem;

using testing_support::error_of;

const LongBenchConfig& config() {
    static const LongBenchConfig c = LongBenchConfig::load(LongBenchConfig::default_dir());
    return c;
}

LongBenchSample sample(std::string context, std::string input) {
    LongBenchSample s;
    s.context = std::move(context);
    s.input = std::move(input);
    return s;
}

// ---- configuration ------------------------------------------------------------------------------

TEST(LongBenchConfig, EnglishDatasetsMatchTheProtocolTable) {
    // docs/longbench.md: dataset -> metric -> max_new_tokens, and which skip the chat template.
    struct Row {
        const char* name;
        Metric metric;
        int max_new;
        bool chat;
    };
    const Row rows[] = {
        {"narrativeqa", Metric::QaF1, 128, true},
        {"qasper", Metric::QaF1, 128, true},
        {"multifieldqa_en", Metric::QaF1, 64, true},
        {"hotpotqa", Metric::QaF1, 32, true},
        {"2wikimqa", Metric::QaF1, 32, true},
        {"musique", Metric::QaF1, 32, true},
        {"gov_report", Metric::Rouge, 512, true},
        {"qmsum", Metric::Rouge, 512, true},
        {"multi_news", Metric::Rouge, 512, true},
        {"trec", Metric::Classification, 64, false},
        {"triviaqa", Metric::QaF1, 32, false},
        {"samsum", Metric::Rouge, 128, false},
        {"passage_count", Metric::Count, 32, true},
        {"passage_retrieval_en", Metric::Retrieval, 32, true},
        {"lcc", Metric::CodeSim, 64, false},
        {"repobench-p", Metric::CodeSim, 64, false},
    };
    ASSERT_EQ(english_datasets().size(), 16u);
    for (const auto& row : rows) {
        SCOPED_TRACE(row.name);
        const DatasetSpec& spec = config().dataset(row.name);
        EXPECT_EQ(spec.metric, row.metric);
        EXPECT_EQ(spec.max_new_tokens, row.max_new);
        EXPECT_EQ(spec.chat_template, row.chat);
        EXPECT_TRUE(spec.supported);
        EXPECT_NE(std::find(english_datasets().begin(), english_datasets().end(), row.name),
                  english_datasets().end());
    }
    EXPECT_EQ(config().names().size(), 21u);
    EXPECT_FALSE(config().dataset("vcsum").supported);
    EXPECT_TRUE(config().dataset("lsht").supported);  // classification needs no segmentation
    EXPECT_NE(error_of([] { config().dataset("nope"); }).find("unknown LongBench dataset 'nope'"),
              std::string::npos);
    EXPECT_EQ(longbench_e_datasets().size(), 13u);
}

TEST(LongBenchConfig, BadConfigDirectory) {
    EXPECT_NE(error_of([] { LongBenchConfig::load("/nonexistent-kvec-dir"); }).find("cannot open"),
              std::string::npos);
}

TEST(LongBenchConfig, GenerationSettings) {
    const GenerationSettings samsum = generation_settings(config().dataset("samsum"));
    EXPECT_EQ(samsum.max_new_tokens, 128);
    EXPECT_FALSE(samsum.apply_chat_template);
    EXPECT_TRUE(samsum.stop_at_newline);
    EXPECT_EQ(samsum.min_new_tokens, 1);  // min_length = context_length + 1
    EXPECT_TRUE(samsum.greedy);
    const GenerationSettings gov = generation_settings(config().dataset("gov_report"));
    EXPECT_EQ(gov.max_new_tokens, 512);
    EXPECT_TRUE(gov.apply_chat_template);
    EXPECT_FALSE(gov.stop_at_newline);
    EXPECT_EQ(gov.min_new_tokens, 0);
    EXPECT_TRUE(config().dataset("trec").first_line_only);
    EXPECT_FALSE(config().dataset("qasper").first_line_only);
}

// ---- prompts ------------------------------------------------------------------------------------

TEST(LongBenchPrompt, MultifieldqaEnIsByteExact) {
    // dataset2prompt.json "multifieldqa_en" with {context} = "CTX", {input} = "Q?".
    const std::string expected =
        "Read the following text and answer briefly.\n\nCTX\n\nNow, answer the following question "
        "based on the above text, only give me the answer and do not output any other words.\n\n"
        "Question: Q?\nAnswer:";
    EXPECT_EQ(
        build_prompt(config().dataset("multifieldqa_en").prompt_template, sample("CTX", "Q?")),
        expected);
}

TEST(LongBenchPrompt, NarrativeqaKeepsUpstreamTypo) {
    const std::string p =
        build_prompt(config().dataset("narrativeqa").prompt_template, sample("S", "Who?"));
    EXPECT_EQ(p.rfind("You are given a story, which can be either a novel or a movie script, and a "
                      "question. Answer the question asconcisely as you can",
                      0),
              0u);
    EXPECT_NE(p.find("\n\nStory: S\n\nNow, answer the question based on the story asconcisely"),
              std::string::npos);
    EXPECT_EQ(p.substr(p.size() - 25), "\n\nQuestion: Who?\n\nAnswer:");
}

TEST(LongBenchPrompt, CodeWithBracesIsNotRescanned) {
    // lcc: "Please complete the code given below. \n{context}Next line of code:\n". The context's
    // braces are data: str.format substitutes once and never re-reads them.
    const std::string code = "int f() {\n    return {x}; // }}{{\n}\n";
    EXPECT_EQ(build_prompt(config().dataset("lcc").prompt_template, sample(code, "")),
              "Please complete the code given below. \n" + code + "Next line of code:\n");
    // repobench-p: "...below. \n{context}{input}Next line of code:\n"
    EXPECT_EQ(build_prompt(config().dataset("repobench-p").prompt_template, sample("A\n", "B\n")),
              "Please complete the code given below. \nA\nB\nNext line of code:\n");
}

TEST(LongBenchPrompt, TrailingSpacesKept) {
    const std::string count =
        build_prompt(config().dataset("passage_count").prompt_template, sample("P1\n\nP2", ""));
    EXPECT_EQ(count.substr(count.size() - 21), "The final answer is: ");
    const std::string trec =
        build_prompt(config().dataset("trec").prompt_template, sample("Q1\nType: A", "Q2"));
    EXPECT_EQ(trec,
              "Please determine the type of the question below. Here are some examples of "
              "questions.\n\nQ1\nType: A\nQ2");
}

TEST(LongBenchPrompt, PythonFormatSemantics) {
    const std::map<std::string, std::string, std::less<>> f = {{"a", "{b}"}, {"b", "B"}};
    EXPECT_EQ(python_format("x{a}y", f), "x{b}y");
    EXPECT_EQ(python_format("{{a}} {{ }}", f), "{a} { }");
    EXPECT_EQ(python_format("", f), "");
    EXPECT_NE(error_of([&] { python_format("{missing}", f); }).find("no field 'missing'"),
              std::string::npos);
    EXPECT_NE(error_of([&] { python_format("a}b", f); }).find("single '}'"), std::string::npos);
    EXPECT_NE(error_of([&] { python_format("a{b", f); }).find("expected '}'"), std::string::npos);
    EXPECT_THROW(python_format("{0}", f), Error);
    EXPECT_THROW(python_format("{}", f), Error);
    EXPECT_THROW(python_format("{a!r}", f), Error);
    EXPECT_THROW(python_format("{a:>5}", f), Error);
    EXPECT_THROW(python_format("{a.x}", f), Error);
    LongBenchSample s = sample("c", "i");
    s.length = 123;
    s.id = "id7";
    EXPECT_EQ(build_prompt("{length}/{_id}/{context}{input}", s), "123/id7/ci");
}

// ---- samples ------------------------------------------------------------------------------------

TEST(LongBenchSamples, ParsesOfficialFields) {
    const auto obj = nlohmann::json::parse(
        R"({"input": "Q", "context": "C", "answers": ["A1", "A2"], "length": 42,
            "dataset": "trec", "language": "en", "all_classes": ["A1", "B"], "_id": "x1"})");
    const LongBenchSample s = parse_longbench_sample(obj, "f:1");
    EXPECT_EQ(s.input, "Q");
    EXPECT_EQ(s.context, "C");
    EXPECT_EQ(s.answers, (std::vector<std::string>{"A1", "A2"}));
    EXPECT_EQ(s.length, 42);
    EXPECT_EQ(s.dataset, "trec");
    EXPECT_EQ(s.language, "en");
    EXPECT_TRUE(s.has_all_classes);
    EXPECT_EQ(s.all_classes, (std::vector<std::string>{"A1", "B"}));
    EXPECT_EQ(s.id, "x1");
}

TEST(LongBenchSamples, OptionalFieldsAndErrors) {
    const auto minimal =
        nlohmann::json::parse(R"({"context": "C", "answers": [13], "all_classes": null})");
    const LongBenchSample s = parse_longbench_sample(minimal, "f:1");
    EXPECT_EQ(s.input, "");
    EXPECT_EQ(s.length, -1);
    EXPECT_FALSE(s.has_all_classes);
    EXPECT_EQ(s.answers, std::vector<std::string>{"13"});  // str(13)

    EXPECT_NE(error_of([] {
                  parse_longbench_sample(nlohmann::json::parse(R"({"answers": []})"), "d.jsonl:4");
              }).find("d.jsonl:4: missing required string field 'context'"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  parse_longbench_sample(
                      nlohmann::json::parse(R"({"context": "c", "answers": "A"})"), "d.jsonl:5");
              }).find("d.jsonl:5: field 'answers' must be a list"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  parse_longbench_sample(nlohmann::json::parse(R"({"context": "c"})"), "d.jsonl:6");
              }).find("d.jsonl:6: missing required field 'answers'"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  parse_longbench_sample(
                      nlohmann::json::parse(R"({"context": "c", "answers": [], "length": "9"})"),
                      "d.jsonl:7");
              }).find("d.jsonl:7: field 'length' must be an integer"),
              std::string::npos);
}

class TempDir : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::path(::testing::TempDir()) /
               ("kvec_longbench_" +
                std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string write(const std::string& name, const std::string& text) {
        const std::string path = (dir_ / name).string();
        std::ofstream(path, std::ios::binary) << text;
        return path;
    }
    fs::path dir_;
};

using LongBenchFiles = TempDir;

TEST_F(LongBenchFiles, MalformedLineNamesFileAndLine) {
    const std::string path = write("hotpotqa.jsonl",
                                   "{\"context\": \"c\", \"answers\": [\"a\"]}\n"
                                   "{\"context\": \"c\", \"answers\": [\"a\"]\n");
    const std::string msg = error_of([&] { read_longbench_jsonl(path); });
    EXPECT_NE(msg.find(path + ":2: invalid JSON"), std::string::npos) << msg;
    const std::string path2 = write("x.jsonl", "{\"context\": 5, \"answers\": []}\n");
    EXPECT_NE(error_of([&] { read_longbench_jsonl(path2); }).find(path2 + ":1: field 'context'"),
              std::string::npos);
}

TEST_F(LongBenchFiles, ScoresPredictionFilesLikeEvalPy) {
    // hotpotqa: scores 1 ("Paris" vs "paris"), 0 -> round(100 * 1 / 2, 2) = 50.
    write("hotpotqa.jsonl",
          "{\"pred\": \"Paris\", \"answers\": [\"paris\"], \"all_classes\": null, \"length\": 10}\n"
          "{\"pred\": \"Rome\", \"answers\": [\"paris\"], \"all_classes\": null, \"length\": "
          "5000}\n");
    // trec: eval.py uses the all_classes of the LAST line for every sample. First line's list
    // would make "Color" score 1; the last line's list [Color, Col] gives the first sample matches
    // [Color, Col]; "Col" is in "Color" and != -> removed -> [Color] -> 1. Second: "Food" is not
    // in [Color, Col] -> 0. Total (1 + 0) / 2 -> 50.
    write("trec.jsonl",
          "{\"pred\": \"Color\\nFood\", \"answers\": [\"Color\"], \"all_classes\": [\"Food\"], "
          "\"length\": 1}\n"
          "{\"pred\": \"Food\", \"answers\": [\"Food\"], \"all_classes\": [\"Color\", \"Col\"], "
          "\"length\": 1}\n");
    write("result.json", "{}");  // not *.jsonl: ignored, as in eval.py
    const auto scores = score_predictions_dir(dir_.string());
    ASSERT_EQ(scores.size(), 2u);
    EXPECT_EQ(scores.at("hotpotqa"), 50.0);
    EXPECT_EQ(scores.at("trec"), 50.0);

    const auto recs = read_predictions_jsonl((dir_ / "hotpotqa.jsonl").string());
    const auto e = score_predictions_e("hotpotqa", recs);
    EXPECT_EQ(e.len_0_4k, 100.0);
    EXPECT_EQ(e.len_4_8k, 0.0);
    EXPECT_TRUE(std::isnan(e.len_8k_plus));
    EXPECT_EQ(dataset_from_filename("/a/b/qasper.run1.jsonl"), "qasper");

    // A classification file whose last line has all_classes null cannot be scored (Python:
    // TypeError).
    const std::string bad =
        write("lsht.jsonl", "{\"pred\": \"x\", \"answers\": [\"x\"], \"all_classes\": null}\n");
    EXPECT_THROW(score_predictions("lsht", read_predictions_jsonl(bad)), Error);
    const std::string nopred = write("qasper.jsonl", "{\"answers\": [\"x\"]}\n");
    EXPECT_NE(error_of([&] {
                  read_predictions_jsonl(nopred);
              }).find(nopred + ":1: missing required string field 'pred'"),
              std::string::npos);
}

// ---- truncation ---------------------------------------------------------------------------------

// GPT-2 byte-to-unicode table: printable Latin-1 bytes map to themselves, the others to 256 + n.
std::vector<std::string> byte_level_tokens() {
    std::vector<int> cp(256, -1);
    for (int b = '!'; b <= '~'; ++b) cp[b] = b;
    for (int b = 0xA1; b <= 0xAC; ++b) cp[b] = b;
    for (int b = 0xAE; b <= 0xFF; ++b) cp[b] = b;
    int n = 0;
    for (int b = 0; b < 256; ++b) {
        if (cp[b] < 0) cp[b] = 256 + n++;
    }
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) {
        std::string s;
        const int c = cp[b];
        if (c < 0x80) {
            s.push_back(static_cast<char>(c));
        } else {
            s.push_back(static_cast<char>(0xC0 | (c >> 6)));
            s.push_back(static_cast<char>(0x80 | (c & 0x3F)));
        }
        tokens.push_back(s);
    }
    return tokens;
}

// Byte-level BPE without merges: one token per byte, id = 1 + byte; id 0 is BOS.
Tokenizer byte_tokenizer() {
    VocabData v;
    v.model = "gpt2";
    v.tokens.push_back("<|begin|>");
    v.types.push_back(TokenType::CONTROL);
    for (auto& t : byte_level_tokens()) {
        v.tokens.push_back(t);
        v.types.push_back(TokenType::NORMAL);
    }
    v.bos_id = 0;
    v.add_bos = true;
    return Tokenizer(std::move(v));
}

TEST(LongBenchTruncation, MiddleTruncationArithmetic) {
    const Tokenizer tok = byte_tokenizer();
    // "abcdefghij" -> [BOS, a, b, ..., j]: 11 tokens (BOS counts, as in pred.py's tokenizer call).
    const auto fits = truncate_middle(tok, "abcdefghij", 11);
    EXPECT_FALSE(fits.truncated);
    EXPECT_EQ(fits.text, "abcdefghij");
    EXPECT_EQ(fits.n_tokens, 11u);
    // M = 10: half = 5 -> head [BOS, a, b, c, d] -> "abcd" (BOS skipped as special);
    // tail [f, g, h, i, j] -> "fghij"; "e" is dropped.
    const auto t10 = truncate_middle(tok, "abcdefghij", 10);
    EXPECT_TRUE(t10.truncated);
    EXPECT_EQ(t10.text, "abcdfghij");
    // M = 5: half = int(5 / 2) = 2 -> [BOS, a] + [i, j] -> "a" + "ij".
    EXPECT_EQ(truncate_middle(tok, "abcdefghij", 5).text, "aij");
    EXPECT_EQ(truncate_middle(tok, "abcdefghij", 4).text, "aij");
    EXPECT_THROW(truncate_middle(tok, "abcdefghij", 1), Error);
    // The newline token samsum stops on: encode("\n")[-1] = byte 0x0A -> id 11.
    EXPECT_EQ(newline_token(tok), 1 + '\n');
}

TEST(LongBenchTruncation, HuggingFaceCleanUpPerHalf) {
    // transformers' clean_up_tokenization, rule by rule: " ." " ?" " !" " ," " ' " " n't" " 'm"
    // " 's" " 've" " 're".
    EXPECT_EQ(hf_clean_up_tokenization("a . b ? c ! d , e ' f do n't I 'm it 's we 've you 're"),
              "a. b? c! d, e'f don't I'm it's we've you're");
    // The " !" rule also hits code: "x != y" -> "x!= y" (the Llama 3 decode artefact reported
    // upstream), which changes code_sim scores of such models.
    EXPECT_EQ(hf_clean_up_tokenization("x != y"), "x!= y");
    // "x , y , z" = 9 bytes -> [BOS, x, ' ', ',', ' ', y, ' ', ',', ' ', z] (10 tokens).
    // M = 8 -> half 4: head [BOS, x, ' ', ','] -> "x ,"; tail [' ', ',', ' ', z] -> " , z".
    // Without clean-up: "x , , z". With it each half is cleaned on its own: "x," + ", z".
    const Tokenizer tok = byte_tokenizer();
    EXPECT_EQ(truncate_middle(tok, "x , y , z", 8).text, "x , , z");
    EXPECT_EQ(truncate_middle(tok, "x , y , z", 8, /*clean_up_tokenization_spaces=*/true).text,
              "x,, z");
    // A prompt that fits is returned as it is, never cleaned.
    EXPECT_EQ(truncate_middle(tok, "x , y , z", 10, true).text, "x , y , z");
}

TEST(LongBenchTruncation, SentencePieceHalvesLoseTheirLeadingSpace) {
    // SentencePiece vocabulary: "a b c d" -> "▁a▁b▁c▁d" -> [BOS, ▁a, ▁b, ▁c, ▁d] (5 tokens).
    // M = 4 -> half 2: decode([BOS, ▁a]) = "a"; decode([▁c, ▁d]) = "c d" (Hugging Face strips the
    // leading space of a decoded sequence) -> "ac d", the words glued as in pred.py.
    VocabData v;
    v.model = "llama";
    v.tokens = {"<unk>",
                "<s>",
                "</s>",
                "\xE2\x96\x81"
                "a",
                "\xE2\x96\x81"
                "b",
                "\xE2\x96\x81"
                "c",
                "\xE2\x96\x81"
                "d"};
    v.types = {TokenType::UNKNOWN, TokenType::CONTROL, TokenType::CONTROL, TokenType::NORMAL,
               TokenType::NORMAL,  TokenType::NORMAL,  TokenType::NORMAL};
    v.scores = {0, 0, 0, -1, -2, -3, -4};
    v.unk_id = 0;
    v.bos_id = 1;
    v.eos_id = 2;
    v.add_bos = true;
    const Tokenizer tok(std::move(v));
    ASSERT_EQ(tok.encode("a b c d", true), (std::vector<int32_t>{1, 3, 4, 5, 6}));
    const auto t = truncate_middle(tok, "a b c d", 4);
    EXPECT_TRUE(t.truncated);
    EXPECT_EQ(t.text, "ac d");
}

// ---- fixture ------------------------------------------------------------------------------------

TEST(LongBenchFixture, CoversEveryEnglishDatasetAndScoresItsOwnAnswers) {
    const fs::path dir = fs::path(KVEC_SOURCE_DIR) / "data" / "longbench" / "fixture";
    std::set<std::string> seen;
    for (const auto& name : english_datasets()) {
        SCOPED_TRACE(name);
        const fs::path file = dir / (name + ".jsonl");
        ASSERT_TRUE(fs::exists(file)) << file;
        const auto samples = read_longbench_jsonl(file.string());
        ASSERT_FALSE(samples.empty());
        const DatasetSpec& spec = config().dataset(name);
        for (const auto& s : samples) {
            EXPECT_EQ(s.dataset, name);
            EXPECT_EQ(s.language, "en");
            EXPECT_FALSE(s.id.empty());
            EXPECT_FALSE(s.answers.empty());
            EXPECT_GT(s.length, 0);
            EXPECT_EQ(s.has_all_classes, name == "trec");
            // Every template field resolves, and the context lands in the prompt unchanged.
            const std::string prompt = build_prompt(spec.prompt_template, s);
            EXPECT_NE(prompt.find(s.context), std::string::npos);
            // A prediction equal to the first reference must score full marks (ROUGE-L f is
            // 2 * (1 * 1) / (2 + 1e-8) there, code_sim 1, classification 1 if unambiguous).
            const double score = sample_score(name, s.answers[0], s.answers, s.all_classes);
            EXPECT_GT(score, 0.999) << s.answers[0];
        }
        seen.insert(name);
    }
    EXPECT_EQ(seen.size(), 16u);
}

}  // namespace
}  // namespace kvec::eval
