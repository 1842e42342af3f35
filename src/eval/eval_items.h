// What `kvec eval` runs: evaluation items (a tokenized prompt, how to generate, how to score)
// built from LongBench JSONL files (pred.py's prompts, truncation and settings) or from a
// synthetic suite (src/eval/synthetic.h), and the scoring of their predictions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "eval/synthetic.h"

namespace kvec {
class Tokenizer;
class Generator;
}  // namespace kvec

namespace kvec::eval {

enum class ChatMode { Auto, On, Off };

struct EvalItem {
    std::string id;        // unique within a run
    std::string task;      // LongBench dataset or synthetic task
    bool longbench = false;
    std::string metric;    // LongBench: metric function name; synthetic: string_match_all/part
    std::vector<int32_t> prompt;        // [n_prompt] tokens, BOS and chat template included
    // Tokens of the prompt before the question (instruction and context): what the
    // query-agnostic protocol compresses before the question is seen. 0: not known.
    int32_t n_context = 0;
    std::vector<std::string> references;
    std::vector<std::string> all_classes;
    int max_new_tokens = 0;
    int min_new_tokens = 0;             // end tokens are suppressed before this many tokens
    std::vector<int32_t> end_tokens;    // non-empty: only these end generation (samsum: eos, "\n")
    bool chat = false;                  // the chat template was applied
    bool truncated = false;             // LongBench middle truncation cut the prompt
    int64_t length = -1;                // LongBench "length" (words)
};

// The seed a held-out split (text_source.h) uses unless one is given: 1 for all and test, 2 for
// dev. Defaults are chosen on dev and results reported on test: different addresses, seeds.
uint64_t default_seed(HeldoutSplit split);

struct ItemOptions {
    std::string suite;                    // "synthetic-2k" (exclusive with data_files)
    std::vector<std::string> data_files;  // LongBench JSONL files
    int samples = 0;                      // > 0: the first N per task (suite) or per file
    std::vector<std::string> tasks;       // suite: only these tasks (empty: every task)
    uint64_t seed = kDefaultSynthSeed;    // synthetic instances
    HeldoutSplit split = HeldoutSplit::All;  // synthetic haystack text
    ChatMode chat = ChatMode::Auto;
    int64_t max_length = 0;               // LongBench M; 0: context - max_new_tokens - 64 per task
    int max_new_tokens = 0;               // > 0: cap every task's max_new_tokens (not official)
    std::string longbench_dir;            // dataset2prompt/maxlen folder ("" = the checkout's copy)
    std::string text_dir;                 // held-out text ("" = default)
};

struct ItemSummary {
    std::string source;                 // "suite synthetic-2k" or "longbench"
    std::string format;                 // "completion" / "chat" / "per task (LongBench)"
    int64_t truncated = 0;              // LongBench prompts cut in the middle
    std::vector<std::string> tasks;     // in order of first appearance
};

// True when the model's vocabulary carries a chat template the tokenizer can render.
bool has_chat_template(const Tokenizer& tokenizer);

// Builds the items. `generator` tokenizes prompts (BOS, chat template) exactly as `kvec run`;
// n_ctx is the session's context (used for the default LongBench maximum and to check that a
// prompt plus its generation fits). kvec::Error for unreadable or malformed data, unknown or
// unsupported (Chinese) datasets, a chat template asked for but missing, prompts that do not fit.
std::vector<EvalItem> build_items(const ItemOptions& options, const Tokenizer& tokenizer,
                                  const Generator& generator, int32_t n_ctx,
                                  ItemSummary* summary = nullptr);

// One question about a context, as kvpress's pipeline takes them: the prompt is the context
// followed by the question (one user turn when `chat`), n_context the context's tokens (what the
// query-agnostic protocol compresses), no references (the caller may add them; score_item gives 0
// without). Questions about the same context give items with the same first n_context tokens,
// which run_sweep compresses once.
// kvec::Error for an empty context or question, max_new_tokens < 1, a missing chat template, or a
// prompt that does not fit n_ctx.
EvalItem question_item(const Tokenizer& tokenizer, const Generator& generator, std::string id,
                       const std::string& context, const std::string& question, bool chat,
                       int max_new_tokens, int32_t n_ctx);

// Score of one prediction in [0, 1]: LongBench eval.py's per-sample score (first-line cut, max
// over references) or RULER's string match.
double score_item(const EvalItem& item, std::string_view prediction);

// Task score over items of one task and their predictions: LongBench eval.py scorer()
// (round(100 * mean, 2), the last item's all_classes); synthetic: round(100 * mean of
// score_item, 2). kvec::Error for an empty list.
double task_score(const std::vector<const EvalItem*>& items,
                  const std::vector<std::string>& predictions);

}  // namespace kvec::eval
