#include "eval/longbench.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

#ifndef KVEC_SOURCE_DIR
#define KVEC_SOURCE_DIR "."
#endif

namespace kvec::eval {

// ---- samples ----------------------------------------------------------------------------------

LongBenchSample parse_longbench_sample(const nlohmann::json& obj, std::string_view where) {
    if (!obj.is_object()) fail("{}: expected a JSON object, found {}", where, obj.type_name());
    LongBenchSample s;
    s.context = json_required_string(obj, "context", where);
    s.input = json_optional_string(obj, "input", where).value_or("");
    s.id = json_optional_string(obj, "_id", where).value_or("");
    s.dataset = json_optional_string(obj, "dataset", where).value_or("");
    s.language = json_optional_string(obj, "language", where).value_or("");
    auto answers = json_optional_string_list(obj, "answers", where);
    if (!answers) fail("{}: missing required field 'answers' (a list of strings)", where);
    s.answers = std::move(*answers);
    if (auto classes = json_optional_string_list(obj, "all_classes", where)) {
        s.all_classes = std::move(*classes);
        s.has_all_classes = true;
    }
    s.length = json_optional_int(obj, "length", where).value_or(-1);
    return s;
}

std::vector<LongBenchSample> read_longbench_jsonl(const std::string& path) {
    std::vector<LongBenchSample> samples;
    JsonlReader reader(path);
    nlohmann::json value;
    while (reader.next(value)) {
        samples.push_back(parse_longbench_sample(value, reader.where()));
        samples.back().line = reader.line();
    }
    return samples;
}

// ---- configuration ----------------------------------------------------------------------------

const std::vector<std::string>& english_datasets() {
    static const std::vector<std::string> names = {"narrativeqa",
                                                   "qasper",
                                                   "multifieldqa_en",
                                                   "hotpotqa",
                                                   "2wikimqa",
                                                   "musique",
                                                   "gov_report",
                                                   "qmsum",
                                                   "multi_news",
                                                   "trec",
                                                   "triviaqa",
                                                   "samsum",
                                                   "passage_count",
                                                   "passage_retrieval_en",
                                                   "lcc",
                                                   "repobench-p"};
    return names;
}

const std::vector<std::string>& longbench_e_datasets() {
    static const std::vector<std::string> names = {"qasper",
                                                   "multifieldqa_en",
                                                   "hotpotqa",
                                                   "2wikimqa",
                                                   "gov_report",
                                                   "multi_news",
                                                   "trec",
                                                   "triviaqa",
                                                   "samsum",
                                                   "passage_count",
                                                   "passage_retrieval_en",
                                                   "lcc",
                                                   "repobench-p"};
    return names;
}

bool uses_chat_template(std::string_view dataset) {
    return !(dataset == "trec" || dataset == "triviaqa" || dataset == "samsum" ||
             dataset == "lsht" || dataset == "lcc" || dataset == "repobench-p");
}

namespace {

nlohmann::json read_json_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot open '{}' for reading", path);
    std::stringstream buf;
    buf << in.rdbuf();
    try {
        return nlohmann::json::parse(buf.str());
    } catch (const nlohmann::json::exception& e) {
        fail("{}: invalid JSON: {}", path, e.what());
    }
}

}  // namespace

LongBenchConfig LongBenchConfig::load(const std::string& dir) {
    const std::string prompt_path = dir + "/dataset2prompt.json";
    const std::string maxlen_path = dir + "/dataset2maxlen.json";
    const nlohmann::json prompts = read_json_file(prompt_path);
    const nlohmann::json maxlens = read_json_file(maxlen_path);
    if (!prompts.is_object()) fail("{}: expected a JSON object", prompt_path);
    if (!maxlens.is_object()) fail("{}: expected a JSON object", maxlen_path);

    LongBenchConfig config;
    for (const auto& [name, tmpl] : prompts.items()) {
        if (!tmpl.is_string()) fail("{}: the prompt of '{}' is not a string", prompt_path, name);
        auto ml = maxlens.find(name);
        if (ml == maxlens.end()) fail("{}: no max length for dataset '{}'", maxlen_path, name);
        if (!ml->is_number_integer() || ml->get<int64_t>() <= 0 || ml->get<int64_t>() > 1000000) {
            fail("{}: the max length of '{}' must be a positive integer, found {}", maxlen_path,
                 name, ml->dump());
        }
        const auto metric = metric_for_dataset(name);
        if (!metric) fail("{}: dataset '{}' has no metric in eval.py", prompt_path, name);
        DatasetSpec spec;
        spec.name = name;
        spec.metric = *metric;
        spec.max_new_tokens = static_cast<int>(ml->get<int64_t>());
        spec.prompt_template = tmpl.get<std::string>();
        spec.chat_template = uses_chat_template(name);
        spec.first_line_only = cuts_to_first_line(name);
        spec.stop_at_newline = name == "samsum";
        spec.supported = !metric_needs_jieba(*metric);
        config.specs_.emplace(name, std::move(spec));
    }
    return config;
}

std::string LongBenchConfig::default_dir() {
    return std::string(KVEC_SOURCE_DIR) + "/data/longbench";
}

bool LongBenchConfig::has(std::string_view dataset) const {
    return specs_.find(dataset) != specs_.end();
}

const DatasetSpec& LongBenchConfig::dataset(std::string_view name) const {
    auto it = specs_.find(name);
    if (it == specs_.end()) {
        std::string known;
        for (const auto& [n, spec] : specs_) known += (known.empty() ? "" : ", ") + n;
        fail("unknown LongBench dataset '{}' (known: {})", name, known);
    }
    return it->second;
}

std::vector<std::string> LongBenchConfig::names() const {
    std::vector<std::string> out;
    for (const auto& [n, spec] : specs_) out.push_back(n);
    return out;
}

// ---- prompts ----------------------------------------------------------------------------------

std::string python_format(std::string_view format,
                          const std::map<std::string, std::string, std::less<>>& fields) {
    std::string out;
    out.reserve(format.size());
    size_t i = 0;
    while (i < format.size()) {
        const char c = format[i];
        if (c == '{') {
            if (i + 1 < format.size() && format[i + 1] == '{') {
                out.push_back('{');
                i += 2;
                continue;
            }
            const size_t close = format.find('}', i + 1);
            if (close == std::string_view::npos) {
                fail("prompt template: expected '}}' before end of string (at byte {})", i);
            }
            const std::string_view name = format.substr(i + 1, close - i - 1);
            if (name.empty() || name.find_first_of("{[.!:") != std::string_view::npos ||
                std::all_of(name.begin(), name.end(),
                            [](char d) { return d >= '0' && d <= '9'; })) {
                fail(
                    "prompt template: unsupported replacement field '{{{}}}' (only named fields "
                    "such as {{context}} and {{input}} are supported)",
                    name);
            }
            auto it = fields.find(name);
            if (it == fields.end())
                fail("prompt template: no field '{}' in the sample (KeyError)", name);
            out += it->second;
            i = close + 1;
        } else if (c == '}') {
            if (i + 1 < format.size() && format[i + 1] == '}') {
                out.push_back('}');
                i += 2;
                continue;
            }
            fail("prompt template: single '}}' encountered in format string (at byte {})", i);
        } else {
            const size_t next = format.find_first_of("{}", i);
            const size_t end = next == std::string_view::npos ? format.size() : next;
            out.append(format.substr(i, end - i));
            i = end;
        }
    }
    return out;
}

std::string build_prompt(std::string_view prompt_template, const LongBenchSample& sample) {
    std::map<std::string, std::string, std::less<>> fields = {
        {"context", sample.context}, {"input", sample.input},       {"_id", sample.id},
        {"dataset", sample.dataset}, {"language", sample.language},
    };
    if (sample.length >= 0) fields["length"] = std::to_string(sample.length);
    return python_format(prompt_template, fields);
}

// ---- truncation ---------------------------------------------------------------------------------

std::string hf_clean_up_tokenization(std::string_view text) {
    static constexpr std::pair<std::string_view, std::string_view> kRules[] = {
        {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
        {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
    };
    std::string s(text);
    for (const auto& [from, to] : kRules) {
        // str.replace: non-overlapping occurrences, left to right, no re-scan of replacements.
        std::string out;
        out.reserve(s.size());
        size_t pos = 0;
        while (true) {
            const size_t hit = s.find(from, pos);
            if (hit == std::string::npos) break;
            out.append(s, pos, hit - pos);
            out.append(to);
            pos = hit + from.size();
        }
        out.append(s, pos, std::string::npos);
        s = std::move(out);
    }
    return s;
}

TruncatedPrompt truncate_middle(const Tokenizer& tokenizer, const std::string& prompt,
                                int64_t max_length, bool clean_up_tokenization_spaces) {
    if (max_length < 2)
        fail("middle truncation needs a maximum length of at least 2, got {}", max_length);
    // ids: [n_tokens] the whole prompt, BOS included where the vocabulary adds one
    const std::vector<int32_t> ids =
        tokenizer.encode(prompt, /*add_special=*/true, /*parse_special=*/true);
    TruncatedPrompt out;
    out.n_tokens = ids.size();
    if (static_cast<int64_t>(ids.size()) <= max_length) {
        out.text = prompt;
        return out;
    }
    const size_t half = static_cast<size_t>(max_length / 2);
    const std::vector<int32_t> head(ids.begin(),
                                    ids.begin() + static_cast<std::ptrdiff_t>(half));  // [half]
    const std::vector<int32_t> tail(ids.end() - static_cast<std::ptrdiff_t>(half),
                                    ids.end());  // [half]
    std::string first = tokenizer.decode(head, /*skip_special=*/true);
    std::string second = tokenizer.decode(tail, /*skip_special=*/true);
    if (clean_up_tokenization_spaces) {
        first = hf_clean_up_tokenization(first);
        second = hf_clean_up_tokenization(second);
    }
    out.text = first + second;
    out.truncated = true;
    return out;
}

// ---- generation -------------------------------------------------------------------------------

GenerationSettings generation_settings(const DatasetSpec& spec) {
    GenerationSettings g;
    g.max_new_tokens = spec.max_new_tokens;
    g.apply_chat_template = spec.chat_template;
    g.greedy = true;
    g.stop_at_newline = spec.stop_at_newline;
    g.min_new_tokens = spec.stop_at_newline ? 1 : 0;
    return g;
}

int32_t newline_token(const Tokenizer& tokenizer) {
    const std::vector<int32_t> ids = tokenizer.encode("\n", /*add_special=*/false);
    if (ids.empty()) fail("the tokenizer encodes \"\\n\" to no token");
    return ids.back();
}

// ---- scoring prediction files -------------------------------------------------------------------

std::vector<PredictionRecord> read_predictions_jsonl(const std::string& path) {
    std::vector<PredictionRecord> records;
    JsonlReader reader(path);
    nlohmann::json value;
    while (reader.next(value)) {
        const std::string where = reader.where();
        if (!value.is_object())
            fail("{}: expected a JSON object, found {}", where, value.type_name());
        PredictionRecord r;
        r.pred = json_required_string(value, "pred", where);
        auto answers = json_optional_string_list(value, "answers", where);
        if (!answers) fail("{}: missing required field 'answers' (a list of strings)", where);
        r.answers = std::move(*answers);
        if (auto classes = json_optional_string_list(value, "all_classes", where)) {
            r.all_classes = std::move(*classes);
            r.has_all_classes = true;
        }
        r.length = json_optional_int(value, "length", where).value_or(-1);
        r.line = reader.line();
        records.push_back(std::move(r));
    }
    return records;
}

std::string dataset_from_filename(const std::string& path) {
    const std::string base = std::filesystem::path(path).filename().string();
    return base.substr(0, base.find('.'));
}

namespace {

std::vector<ScoredPrediction> to_scored(const std::vector<PredictionRecord>& records) {
    std::vector<ScoredPrediction> out;
    out.reserve(records.size());
    for (const auto& r : records) out.push_back({r.pred, r.answers, r.length});
    return out;
}

// eval.py keeps the all_classes of the last line read.
const std::vector<std::string>& last_all_classes(std::string_view dataset,
                                                 const std::vector<PredictionRecord>& records) {
    static const std::vector<std::string> kNone;
    if (records.empty()) return kNone;
    const auto& last = records.back();
    if (!last.has_all_classes && require_metric_for_dataset(dataset) == Metric::Classification) {
        fail("classification dataset '{}' needs 'all_classes' (null on line {})", dataset,
             last.line);
    }
    return last.all_classes;
}

}  // namespace

double score_predictions(std::string_view dataset, const std::vector<PredictionRecord>& records) {
    return dataset_score(dataset, to_scored(records), last_all_classes(dataset, records));
}

LengthBucketScores score_predictions_e(std::string_view dataset,
                                       const std::vector<PredictionRecord>& records) {
    return dataset_score_e(dataset, to_scored(records), last_all_classes(dataset, records));
}

std::map<std::string, double> score_predictions_dir(const std::string& dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) fail("'{}' is not a directory", dir);
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.size() >= 5 && name.compare(name.size() - 5, 5, "jsonl") == 0) {
            files.push_back(entry.path().string());
        }
    }
    if (ec) fail("cannot list '{}': {}", dir, ec.message());
    std::sort(files.begin(), files.end());
    std::map<std::string, double> scores;
    for (const auto& f : files) {
        const std::string dataset = dataset_from_filename(f);
        scores[dataset] = score_predictions(dataset, read_predictions_jsonl(f));
    }
    return scores;
}

}  // namespace kvec::eval
