// The synthetic long-context suite: RULER-style tasks (NVIDIA/RULER, scripts/data/synthetic)
// inserted into natural text, one implementation shared by evaluation (`kvec synth --split eval`,
// `kvec eval --suite synthetic-*`) and by the training data of the bundled model (`--split train`).
//
// Tasks (docs/synthetic-suite.md has an example of each):
//   niah_single      one "special magic number" needle for a key at a random depth; asked for it
//   niah_multikey    4 needles with different keys; one key asked (the others are distractors)
//   niah_multivalue  4 needles with the same key and different values; all values asked
//   niah_multiquery  4 needles with different keys; all 4 keys asked at once
//   niah_askmany     the context of niah_multiquery, with one question per key, asked one at a
//                    time ("compress once, ask many": one compressed context answers each)
//   vt               variable tracking: 3 chains of 5 assignments (VAR A = 12345. VAR B = VAR A.
//                    ...); asked for every variable holding the first chain's value
//   cwe              common word extraction: a numbered list of words; the 5 most common asked
//   fwe              frequent word extraction: coded words with Zipf(2) counts; the 3 most
//                    frequent asked
//   qa               8 short facts ("The ship Belford was built in the town of Orwick."); one
//                    question whose answer is in exactly one of them
//
// Determinism: an instance is a pure function of (task, seed, index, split, length) and of the
// haystack text and tokenizer; the random stream is seeded by a stable hash of all five, so the
// same arguments give the same bytes on every platform, and the two splits never share a stream.
// Held-out instances: keys, values and answers of the two splits come from disjoint vocabularies
// (synthetic_words.h), and the eval split's haystack is the held-out text of data/text/ only.
//
// Length: `length` is the context window the instance is made for, as in RULER: prompt tokens +
// max_new_tokens <= length, and the prompt fills it to within length_tolerance(length) tokens.
// With a tokenizer the prompt is tokenized and corrected until it fits (exact), or, when
// SynthConfig::verify_length is off, sized from cached piece counts (never over; within
// tolerance + 4). Without a tokenizer, tokens are approximated as ceil(bytes / 4) and
// length_unit says "approx_tokens".
#pragma once

#include <cstdint>
#include <iosfwd>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "eval/synthetic_words.h"
#include "eval/text_source.h"

namespace kvec {
class Tokenizer;
}

namespace kvec::eval {

enum class PromptFormat { Completion, Chat };
const char* format_name(PromptFormat format);   // "completion" / "chat"
PromptFormat parse_format(std::string_view s);  // throws kvec::Error

// Lengths 256 .. 131072 are accepted (a task may need more than 256; it says so).
constexpr int kMinSynthLength = 256;
constexpr int kMaxSynthLength = 131072;
constexpr uint64_t kDefaultSynthSeed = 1;

// How close below its target a prompt must land: max(8, length / 100) tokens.
int length_tolerance(int length);

struct TaskInfo {
    std::string name;
    std::string metric;      // "string_match_all" or "string_match_part"
    int max_new_tokens = 0;  // completion form; the chat form adds 32 (the answer restates the cue)
    std::string description;
};
const std::vector<TaskInfo>& synth_tasks();
const TaskInfo& find_task(std::string_view name);  // throws kvec::Error listing the known tasks

struct SuiteSpec {
    std::string name;                                // "synthetic-2k"
    int length = 0;                                  // 2048
    std::vector<std::pair<std::string, int>> tasks;  // (task, samples)
    int n_instances() const;
};
const std::vector<SuiteSpec>& synth_suites();        // synthetic-1k, -2k, -4k, -8k, -16k, -32k
const SuiteSpec& find_suite(std::string_view name);  // throws kvec::Error listing the suites

// One of several questions about the same context (niah_askmany), scored on its own.
struct SynthAsk {
    std::string input;                 // the question
    std::string prompt;                // the prompt with this question (as SynthInstance::prompt)
    std::string answer_prefix;
    std::string target;
    std::vector<std::string> answers;
    std::vector<std::string> keys;
};

struct SynthInstance {
    // LongBench fields (THUDM/LongBench data format).
    std::string id;                    // _id: "<task>/<split>/s<seed>/L<length>/<index>"
    std::string dataset;               // the task name
    std::string input;                 // the question (without the answer cue)
    std::string context;               // haystack text with needles, or the word list
    std::vector<std::string> answers;  // every reference (string_match_all needs all of them)
    int length = 0;                    // prompt length in length_unit

    // Task metadata.
    std::string task;
    Split split = Split::Eval;
    uint64_t seed = 0;
    int64_t index = 0;
    int target_length = 0;    // the requested length (context window)
    std::string length_unit;  // "tokens" or "approx_tokens" (ceil(bytes / 4))
    std::string suite;        // "" unless generated as part of a suite
    PromptFormat format = PromptFormat::Completion;
    std::string prompt;         // completion: full model input, ends with answer_prefix;
                                // chat: the user message
    std::string answer_prefix;  // the answer cue ("The special magic number for x is:")
    std::string target;         // the ideal model output: completion " 482913"; chat
                                // "The special magic number for x is: 482913"
    int max_new_tokens = 0;
    std::string metric;               // "string_match_all" / "string_match_part"
    std::vector<std::string> keys;    // what is asked about: niah keys, vt value, qa entity
    std::vector<double> depths;       // [n answer-bearing needles] start offset / context size
    std::vector<int> depth_percents;  // [n answer-bearing needles] the drawn depth (0..100)
    int n_needles = 0;                // needles inserted, distractors included
    // Bytes of `prompt` (and of every ask's prompt) before the question: the instruction and the
    // context. The query-agnostic protocol compresses this part before the question is seen.
    size_t context_end = 0;
    // niah_askmany: every question about this context (the first is the instance's own);
    // empty for the other tasks.
    std::vector<SynthAsk> asks;
};

nlohmann::ordered_json to_json(const SynthInstance& inst);
std::string to_jsonl_line(const SynthInstance& inst);  // one line, '\n'-terminated; invalid
                                                       // UTF-8 replaced by U+FFFD

// Measures prompt lengths: tokens with a tokenizer, otherwise ceil(bytes / 4).
// The raw_* functions work in the meter's raw unit (tokens, or bytes without a tokenizer:
// scale() == 4), which adds up exactly for text pieces; count() = ceil(raw / scale).
class LengthMeter {
  public:
    explicit LengthMeter(const Tokenizer* tokenizer = nullptr);
    bool exact() const { return tokenizer_ != nullptr; }
    const char* unit() const { return exact() ? "tokens" : "approx_tokens"; }
    int scale() const { return exact() ? 1 : 4; }
    bool has_chat_template() const { return has_chat_template_; }

    // A whole model input: BOS counted when the vocabulary adds one.
    int count(std::string_view text) const { return to_units(raw_count(text)); }
    // A chat prompt: the rendered template when the vocabulary has one, else the user message.
    int count_chat(const std::string& user_message) const {
        return to_units(raw_chat(user_message));
    }

    int64_t raw_count(std::string_view text) const;
    int64_t raw_chat(const std::string& user_message) const;
    // A sentence in the middle of a text, preceded by a space: no BOS.
    int64_t raw_piece(std::string_view sentence) const;
    int to_units(int64_t raw) const { return static_cast<int>((raw + scale() - 1) / scale()); }

  private:
    const Tokenizer* tokenizer_ = nullptr;
    bool has_chat_template_ = false;
    bool spm_space_prefix_ = false;
};

struct SynthConfig {
    Split split = Split::Eval;
    PromptFormat format = PromptFormat::Completion;
    // With a tokenizer: tokenize the assembled prompt and correct until it fits (exact). Off: sum
    // cached per-sentence / per-word token counts and keep 4 tokens of margin (about 5x faster;
    // the count is then exact to a token or two for byte-level BPE, 1-3 for SentencePiece, and
    // `length` reports the sum).
    bool verify_length = true;
};

class SynthGenerator {
  public:
    // haystack: for Split::Eval it must be TextSource::heldout(); for Split::Train it must not be.
    // tokenizer may be null (approximate lengths). Both must outlive the generator.
    SynthGenerator(const TextSource& haystack, const Tokenizer* tokenizer, SynthConfig config);

    // Throws kvec::Error for an unknown task, a length outside [kMinSynthLength, kMaxSynthLength]
    // or too small for the task, or a haystack too short for the length.
    SynthInstance generate(std::string_view task, uint64_t seed, int64_t index, int length);

    // Every instance of a suite, task by task, indices 0..n-1 per task.
    std::vector<SynthInstance> generate_suite(std::string_view suite,
                                              uint64_t seed = kDefaultSynthSeed);

    const SynthConfig& config() const { return config_; }
    const LengthMeter& meter() const { return meter_; }

  private:
    int64_t sentence_cost(size_t i);               // cached raw_piece of haystack sentence i
    int64_t piece_cost(const std::string& piece);  // cached raw_piece of a list word
    int64_t number_cost(int64_t n);                // sum of raw_piece("i.") for i = 1..n, cached

    const TextSource& haystack_;
    LengthMeter meter_;
    SynthConfig config_;
    std::vector<int32_t> sentence_cost_;  // [n_sentences] raw length, -1 = not yet measured
    std::unordered_map<std::string, int64_t> piece_cost_;  // list words
    std::vector<int64_t> number_cost_;                     // [max n + 1] number_cost(n) prefix sums
};

// One `kvec synth` run: either a suite or (task, n, length).
struct SynthRequest {
    std::string suite;  // "synthetic-2k", or "" with task
    std::string task;   // a task name, or "" with suite
    int n = 0;          // instances (task mode), indices 0..n-1
    int length = 0;     // task mode
    Split split = Split::Eval;
    uint64_t seed = kDefaultSynthSeed;
    PromptFormat format = PromptFormat::Completion;
    std::string tokenizer_path;               // GGUF file with tokenizer.ggml.* ("" = approximate)
    std::vector<std::string> haystack_files;  // train split only (required there)
    std::string text_dir;                     // held-out text folder ("" = default_text_dir())
    // SynthConfig::verify_length; unset: on for the eval split, off (fast) for the train split.
    std::optional<bool> verify_length;
};

struct SynthSummary {
    size_t n_instances = 0;
    std::string length_unit;  // "tokens" / "approx_tokens"
};

// Validates the request (kvec::Error naming the problem), loads tokenizer and haystack, and writes
// one JSONL line per instance to `out` as it is generated.
SynthSummary write_synth_jsonl(const SynthRequest& request, std::ostream& out);

// Scoring, as RULER's eval/synthetic/constants.py defines it for one prediction p and its
// references r_1..r_n (RULER averages over predictions and reports 100 x mean):
//   string_match_all(p, r)  = (1/n) * sum_i [lower(r_i) is a substring of lower(p)]
//   string_match_part(p, r) = max_i [lower(r_i) is a substring of lower(p)]
// p is first post-processed as RULER does (ruler_postprocess). Lower-casing is ASCII only.
// Empty reference lists score 0.
std::string ruler_postprocess(std::string_view prediction);  // strip; control chars -> '\n'; strip
double string_match_all(std::string_view prediction, const std::vector<std::string>& references);
double string_match_part(std::string_view prediction, const std::vector<std::string>& references);
// Dispatches on a metric name (SynthInstance::metric); throws kvec::Error for an unknown one.
double score_synthetic(std::string_view metric, std::string_view prediction,
                       const std::vector<std::string>& references);

}  // namespace kvec::eval
