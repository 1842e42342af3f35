#include "eval/eval_items.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "engine/generator.h"
#include "eval/longbench.h"
#include "eval/metrics.h"
#include "eval/text_source.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace kvec::eval {

namespace {

std::vector<int32_t> tokenize(const Generator& generator, const std::string& prompt, bool chat) {
    GenerateOptions g;
    g.prompt = prompt;
    g.chat = chat;
    g.parse_special = true;
    return generator.tokenize_prompt(g);
}

// Prompt tokens before byte `context_end` of `prompt` (the text before the question): the
// longest common prefix of the prompt's tokens and those of its first context_end bytes, rendered
// through the chat template when `chat` (the template's text before the message included). A
// token that spans the boundary belongs to the question part. 0 when the message cannot be
// found verbatim in the rendered template.
int32_t context_token_count(const Tokenizer& tokenizer, const Generator& generator,
                            const std::vector<int32_t>& tokens, const std::string& prompt, size_t context_end,
                            bool chat) {
    KVEC_CHECK(context_end <= prompt.size());
    std::vector<int32_t> prefix;  // [n] tokens of the text before the question
    if (chat) {
        const std::string rendered = tokenizer.apply_chat_template({{"user", prompt}}, true);
        const size_t at = rendered.find(prompt);
        if (at == std::string::npos) return 0;
        prefix = tokenizer.encode(rendered.substr(0, at + context_end), /*add_special=*/true, /*parse_special=*/true);
        const int32_t bos = tokenizer.bos();
        if (bos >= 0 && prefix.size() >= 2 && prefix[0] == bos && prefix[1] == bos) prefix.erase(prefix.begin());
    } else {
        prefix = tokenize(generator, prompt.substr(0, context_end), false);
    }
    const auto mismatch = std::mismatch(prefix.begin(), prefix.end(), tokens.begin(), tokens.end());
    return static_cast<int32_t>(mismatch.first - prefix.begin());
}

void add_task(ItemSummary* summary, const std::string& task) {
    if (summary == nullptr) return;
    if (std::find(summary->tasks.begin(), summary->tasks.end(), task) == summary->tasks.end()) {
        summary->tasks.push_back(task);
    }
}

// The prompt must fit; a generation that reaches the end of the context stops there.
void check_fits(const EvalItem& item, int32_t n_ctx) {
    if (static_cast<int64_t>(item.prompt.size()) >= n_ctx) {
        fail("sample '{}' ({}) has {} prompt tokens but the context holds {} (use a larger -c{})",
             item.id, item.task, item.prompt.size(), n_ctx,
             item.longbench ? " or a smaller --max-length" : "");
    }
}

std::string join_task_names(const SuiteSpec& suite) {
    std::string out;
    for (const auto& t : suite.tasks) out += (out.empty() ? "" : ", ") + t.first;
    return out;
}

std::vector<EvalItem> synthetic_items(const ItemOptions& o, const Tokenizer& tokenizer,
                                      const Generator& generator, int32_t n_ctx,
                                      ItemSummary* summary) {
    const SuiteSpec& suite = find_suite(o.suite);
    const bool has_template = has_chat_template(tokenizer);
    if (o.chat == ChatMode::On && !has_template) {
        fail("--chat: the model has no chat template the tokenizer can render");
    }
    const bool chat = o.chat == ChatMode::On || (o.chat == ChatMode::Auto && has_template);
    const TextSource text = TextSource::heldout(o.text_dir.empty() ? default_text_dir() : o.text_dir,
                                                o.split);
    SynthConfig config;
    config.split = Split::Eval;
    config.format = chat ? PromptFormat::Chat : PromptFormat::Completion;
    config.verify_length = true;
    SynthGenerator gen(text, &tokenizer, config);
    if (summary != nullptr) {
        summary->source = "suite " + suite.name;
        summary->format = chat ? "chat" : "completion";
    }
    for (const std::string& t : o.tasks) {
        if (std::none_of(suite.tasks.begin(), suite.tasks.end(), [&](const auto& st) { return st.first == t; })) {
            fail("--tasks: '{}' is not a task of {} ({})", t, suite.name, join_task_names(suite));
        }
    }
    std::vector<EvalItem> items;
    for (const auto& [task, n_default] : suite.tasks) {
        if (!o.tasks.empty() && std::find(o.tasks.begin(), o.tasks.end(), task) == o.tasks.end()) continue;
        const int n = o.samples > 0 ? o.samples : n_default;
        for (int i = 0; i < n; ++i) {
            const SynthInstance inst = gen.generate(task, o.seed, i, suite.length);
            // One item per question: niah_askmany asks several about one context.
            std::vector<SynthAsk> asks = inst.asks;
            if (asks.empty()) asks.push_back({inst.input, inst.prompt, inst.answer_prefix, inst.target, inst.answers, inst.keys});
            for (size_t q = 0; q < asks.size(); ++q) {
                EvalItem item;
                item.id = inst.asks.empty() ? inst.id : fmt::format("{}/q{}", inst.id, q);
                item.task = inst.task;
                item.longbench = false;
                item.metric = inst.metric;
                item.prompt = tokenize(generator, asks[q].prompt, chat);
                item.n_context =
                    context_token_count(tokenizer, generator, item.prompt, asks[q].prompt, inst.context_end, chat);
                item.references = asks[q].answers;
                item.max_new_tokens = inst.max_new_tokens;
                if (o.max_new_tokens > 0) item.max_new_tokens = std::min(item.max_new_tokens, o.max_new_tokens);
                item.chat = chat;
                item.length = inst.length;
                check_fits(item, n_ctx);
                add_task(summary, item.task);
                items.push_back(std::move(item));
            }
        }
    }
    return items;
}

std::vector<EvalItem> longbench_items(const ItemOptions& o, const Tokenizer& tokenizer,
                                      const Generator& generator, int32_t n_ctx,
                                      ItemSummary* summary) {
    const LongBenchConfig config = LongBenchConfig::load(
        o.longbench_dir.empty() ? LongBenchConfig::default_dir() : o.longbench_dir);
    const bool has_template = has_chat_template(tokenizer);
    if (o.chat == ChatMode::On && !has_template) {
        fail("--chat: the model has no chat template the tokenizer can render");
    }
    if (summary != nullptr) {
        summary->source = "longbench";
        summary->format = o.chat == ChatMode::Off
                              ? "completion (--no-chat)"
                              : (has_template ? "chat template except trec, triviaqa, samsum, lsht, "
                                                "lcc, repobench-p"
                                              : "completion (the model has no chat template)");
    }
    std::vector<EvalItem> items;
    std::map<std::string, int> seen_ids;
    std::vector<std::pair<std::string, std::string>> seen_files;  // (canonical path, as given)
    for (const std::string& path : o.data_files) {
        if (!std::filesystem::is_regular_file(path)) fail("data file '{}' does not exist", path);
        // The same file twice would count its samples twice.
        std::error_code ec;
        const std::string canonical = std::filesystem::weakly_canonical(path, ec).string();
        for (const auto& [c, given] : seen_files) {
            if (!ec && c == canonical) fail("--data: '{}' and '{}' are the same file", given, path);
        }
        seen_files.emplace_back(canonical, path);
        const std::vector<LongBenchSample> samples = read_longbench_jsonl(path);
        const std::string from_name = dataset_from_filename(path);
        int taken = 0;
        for (const LongBenchSample& s : samples) {
            if (o.samples > 0 && taken >= o.samples) break;
            // eval.py names the dataset after the file; a file named otherwise uses the field.
            std::string dataset = config.has(from_name) ? from_name : s.dataset;
            if (!config.has(dataset)) {
                fail("{}:{}: unknown LongBench dataset '{}' (name the file <dataset>.jsonl or set "
                     "the \"dataset\" field)", path, s.line, dataset.empty() ? from_name : dataset);
            }
            const DatasetSpec& spec = config.dataset(dataset);
            if (!spec.supported) {
                fail("{}: Chinese LongBench tasks are not supported ('{}' needs jieba segmentation)",
                     path, dataset);
            }
            if (spec.metric == Metric::Classification && !s.has_all_classes) {
                fail("{}:{}: classification dataset '{}' needs 'all_classes' (the labels the prediction is "
                     "matched against); the sample has none", path, s.line, dataset);
            }
            const GenerationSettings gs = generation_settings(spec);
            EvalItem item;
            item.task = dataset;
            item.longbench = true;
            item.metric = std::string(metric_name(spec.metric));
            item.references = s.answers;
            item.all_classes = s.all_classes;
            item.length = s.length;
            item.max_new_tokens = gs.max_new_tokens;
            if (o.max_new_tokens > 0) item.max_new_tokens = std::min(item.max_new_tokens, o.max_new_tokens);
            item.min_new_tokens = gs.min_new_tokens;
            if (gs.stop_at_newline) {
                item.end_tokens = {tokenizer.eos(), newline_token(tokenizer)};
                item.end_tokens.erase(std::remove(item.end_tokens.begin(), item.end_tokens.end(), -1),
                                      item.end_tokens.end());
            }
            item.chat = gs.apply_chat_template && o.chat != ChatMode::Off && has_template;
            const int64_t M = o.max_length > 0 ? o.max_length
                                               : int64_t{n_ctx} - item.max_new_tokens - (item.chat ? 64 : 0);
            if (M < 2) {
                fail("context {} is too small for {} (max_new_tokens {}): use a larger -c or "
                     "--max-new-tokens / --max-length", n_ctx, dataset, item.max_new_tokens);
            }
            const std::string prompt = build_prompt(spec.prompt_template, s);
            const TruncatedPrompt t = truncate_middle(tokenizer, prompt, M);
            item.truncated = t.truncated;
            item.prompt = tokenize(generator, t.text, item.chat);
            // The question part: the template after {context}, which middle truncation keeps
            // unless it is longer than half the prompt.
            const size_t at = spec.prompt_template.find("{context}");
            if (at != std::string::npos) {
                const std::string tail = build_prompt(spec.prompt_template.substr(at + 9), s);
                if (t.text.size() >= tail.size() && t.text.compare(t.text.size() - tail.size(), tail.size(), tail) == 0) {
                    item.n_context = context_token_count(tokenizer, generator, item.prompt, t.text,
                                                         t.text.size() - tail.size(), item.chat);
                }
            }
            std::string base = s.id.empty() ? fmt::format("{}/{}", dataset, s.line) : s.id;
            const int dup = seen_ids[base]++;
            item.id = dup == 0 ? base : fmt::format("{}#{}", base, dup);
            if (summary != nullptr && t.truncated) ++summary->truncated;
            check_fits(item, n_ctx);
            add_task(summary, item.task);
            items.push_back(std::move(item));
            ++taken;
        }
    }
    if (items.empty()) fail("the data files hold no samples");
    return items;
}

}  // namespace

uint64_t default_seed(HeldoutSplit split) { return split == HeldoutSplit::Dev ? 2 : kDefaultSynthSeed; }

bool has_chat_template(const Tokenizer& tokenizer) { return LengthMeter(&tokenizer).has_chat_template(); }

std::vector<EvalItem> build_items(const ItemOptions& options, const Tokenizer& tokenizer,
                                  const Generator& generator, int32_t n_ctx, ItemSummary* summary) {
    if (options.suite.empty() == options.data_files.empty()) {
        fail("give exactly one of --suite or --data");
    }
    if (!options.tasks.empty() && options.suite.empty()) fail("--tasks goes with --suite");
    if (!options.suite.empty()) return synthetic_items(options, tokenizer, generator, n_ctx, summary);
    return longbench_items(options, tokenizer, generator, n_ctx, summary);
}

EvalItem question_item(const Tokenizer& tokenizer, const Generator& generator, std::string id,
                       const std::string& context, const std::string& question, bool chat,
                       int max_new_tokens, int32_t n_ctx) {
    if (context.empty()) fail("the context is empty");
    if (question.empty()) fail("question '{}' is empty", id);
    if (max_new_tokens < 1) fail("max_new_tokens must be >= 1, got {}", max_new_tokens);
    if (chat && !has_chat_template(tokenizer)) fail("chat: the model has no chat template the tokenizer can render");
    EvalItem item;
    item.id = std::move(id);
    item.task = "question";
    item.metric = "string_match_all";
    const std::string prompt = context + question;
    item.prompt = tokenize(generator, prompt, chat);
    item.n_context = context_token_count(tokenizer, generator, item.prompt, prompt, context.size(), chat);
    if (item.n_context <= 0 || item.n_context >= static_cast<int32_t>(item.prompt.size())) {
        fail("question '{}': the context's end cannot be found in the prompt's tokens", item.id);
    }
    item.max_new_tokens = max_new_tokens;
    item.chat = chat;
    check_fits(item, n_ctx);
    return item;
}

double score_item(const EvalItem& item, std::string_view prediction) {
    if (item.longbench) return sample_score(item.task, prediction, item.references, item.all_classes);
    return score_synthetic(item.metric, prediction, item.references);
}

double task_score(const std::vector<const EvalItem*>& items, const std::vector<std::string>& predictions) {
    if (items.empty()) fail("no predictions to score");
    KVEC_CHECK(items.size() == predictions.size());
    if (items.front()->longbench) {
        std::vector<ScoredPrediction> scored;  // [n]
        for (size_t i = 0; i < items.size(); ++i) {
            scored.push_back({predictions[i], items[i]->references, items[i]->length});
        }
        return dataset_score(items.front()->task, scored, items.back()->all_classes);
    }
    double sum = 0;
    for (size_t i = 0; i < items.size(); ++i) sum += score_item(*items[i], predictions[i]);
    return py::round_digits(100.0 * sum / static_cast<double>(items.size()), 2);
}

}  // namespace kvec::eval
