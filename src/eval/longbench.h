// LongBench (THUDM/LongBench v1) data handling, reproducing pred.py and eval.py:
//   - samples in the official JSONL format (input, context, answers, length, dataset, language,
//     all_classes, _id);
//   - per-dataset configuration from the official dataset2prompt.json / dataset2maxlen.json
//     (copied unchanged to data/longbench/), metric from eval.py's dataset2metric;
//   - prompt building with Python str.format semantics, byte-exact;
//   - middle truncation by tokens to a model maximum M, as pred.py does it;
//   - generation settings (chat template or not, max_new_tokens, samsum's newline stop);
//   - eval.py-compatible scoring of prediction files ({"pred", "answers", "all_classes",
//   "length"}).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "eval/jsonl.h"
#include "eval/metrics.h"

namespace kvec {
class Tokenizer;
}

namespace kvec::eval {

// ---- samples ----------------------------------------------------------------------------------

struct LongBenchSample {
    std::string id;                        // "_id" ("" if missing)
    std::string dataset;                   // "dataset" ("" if missing)
    std::string language;                  // "language" ("" if missing)
    std::string input;                     // "input" ("" if missing: lcc has an empty input)
    std::string context;                   // "context" (required)
    std::vector<std::string> answers;      // "answers" (required, may be empty)
    std::vector<std::string> all_classes;  // "all_classes" (null or missing -> empty)
    bool has_all_classes = false;          // false where all_classes was null or missing
    int64_t length = -1;                   // "length" (-1 if missing)
    size_t line = 0;                       // line in the file it came from
};

// Reads an official LongBench JSONL file. kvec::Error "<path>:<line>: ..." for a malformed line
// or a field of the wrong type.
std::vector<LongBenchSample> read_longbench_jsonl(const std::string& path);
// One sample from a parsed JSON object; `where` ("<file>:<line>") prefixes error messages.
LongBenchSample parse_longbench_sample(const nlohmann::json& obj, std::string_view where);

// ---- configuration ----------------------------------------------------------------------------

// The 16 English datasets used by KV-cache compression papers (SnapKV, PyramidKV, Ada-KV,
// KVCache-Factory), in the usual table order.
const std::vector<std::string>& english_datasets();
// The 13 datasets of LongBench-E (pred.py --e).
const std::vector<std::string>& longbench_e_datasets();

struct DatasetSpec {
    std::string name;
    Metric metric = Metric::QaF1;
    int max_new_tokens = 0;       // dataset2maxlen.json
    std::string prompt_template;  // dataset2prompt.json, exact bytes
    bool chat_template = true;    // false for trec, triviaqa, samsum, lsht, lcc, repobench-p
    bool first_line_only =
        false;  // eval.py scores only the first line (trec, triviaqa, samsum, lsht)
    bool stop_at_newline = false;  // samsum: "\n" token is an extra end-of-generation token
    bool supported = true;         // false where the metric needs jieba (Chinese segmentation)
};

class LongBenchConfig {
  public:
    // Reads <dir>/dataset2prompt.json and <dir>/dataset2maxlen.json. Every dataset in the prompt
    // file must have a max length and a known metric (kvec::Error otherwise).
    static LongBenchConfig load(const std::string& dir);
    // The copy in the source tree: <KVEC_SOURCE_DIR>/data/longbench.
    static std::string default_dir();

    bool has(std::string_view dataset) const;
    // kvec::Error naming the known datasets for an unknown name.
    const DatasetSpec& dataset(std::string_view name) const;
    std::vector<std::string> names() const;  // sorted

  private:
    std::map<std::string, DatasetSpec, std::less<>> specs_;
};

// pred.py: the chat template is applied except for these few-shot and code tasks.
bool uses_chat_template(std::string_view dataset);

// ---- prompts ----------------------------------------------------------------------------------

// Python str.format(**fields) for templates whose replacement fields are plain names:
// "{{" -> "{", "}}" -> "}", "{name}" -> fields[name]; substituted text is not re-scanned.
// kvec::Error for an unknown name (KeyError), a lone "{" or "}" (ValueError), and for
// positional, indexed, attribute, conversion or format-spec fields (unsupported).
std::string python_format(std::string_view format,
                          const std::map<std::string, std::string, std::less<>>& fields);

// prompt_format.format(**json_obj) as pred.py does: fields context, input, _id, dataset,
// language and length (decimal) of the sample.
std::string build_prompt(std::string_view prompt_template, const LongBenchSample& sample);

// ---- truncation ---------------------------------------------------------------------------------

struct TruncatedPrompt {
    std::string text;  // the prompt to use (unchanged if it fitted)
    bool truncated = false;
    size_t n_tokens = 0;  // tokens of the original prompt (with BOS if the vocabulary adds one)
};

// pred.py middle truncation: ids = tokenizer(prompt) (special tokens added as the vocabulary asks,
// special-token text parsed, like a Hugging Face tokenizer call); if len(ids) > max_length:
// half = max_length / 2 (floor), text = decode(ids[:half], skip_special) +
// decode(ids[-half:], skip_special). kvec::Error if max_length < 2 (pred.py's ids[-0:] would keep
// everything). How exactly the re-concatenated halves match Hugging Face's depends on
// Tokenizer::decode (SentencePiece: the second half loses its leading space, as in HF).
// clean_up_tokenization_spaces: apply hf_clean_up_tokenization to each decoded half, as a Hugging
// Face tokenizer whose tokenizer_config.json sets it does (Llama 3 / 3.1: true; Llama 2, Mistral:
// false).
TruncatedPrompt truncate_middle(const Tokenizer& tokenizer, const std::string& prompt,
                                int64_t max_length, bool clean_up_tokenization_spaces = false);

// transformers' clean_up_tokenization(), applied by decode() when clean_up_tokenization_spaces is
// set: the replacements " ." -> ".", " ?" -> "?", " !" -> "!", " ," -> ",", " ' " -> "'",
// " n't" -> "n't", " 'm" -> "'m", " 's" -> "'s", " 've" -> "'ve", " 're" -> "'re", in this order,
// each over the whole string. pred.py decodes predictions with it too, so predictions of a model
// whose tokenizer sets it (Llama 3) carry it; the harness applies it where the reference would.
std::string hf_clean_up_tokenization(std::string_view text);

// ---- generation -------------------------------------------------------------------------------

struct GenerationSettings {
    int max_new_tokens = 0;  // dataset2maxlen.json
    bool apply_chat_template = true;
    bool greedy = true;  // num_beams=1, do_sample=False
    // samsum: generate(min_length = context_length + 1, eos_token_id = [eos, id of "\n"]): at least
    // one new token (end tokens are suppressed at the first step) and the token of "\n"
    // (tokenizer.encode("\n", add_special_tokens=False)[-1]) also ends generation. Note that
    // Hugging Face stops on that exact token id only, not on other tokens containing "\n", and
    // that this list replaces the model's default end tokens: only eos and "\n" stop.
    int min_new_tokens = 0;
    bool stop_at_newline = false;
};

GenerationSettings generation_settings(const DatasetSpec& spec);

// The id samsum adds as an end token: last id of tokenizer.encode("\n", no special tokens).
int32_t newline_token(const Tokenizer& tokenizer);

// ---- scoring prediction files (eval.py) ---------------------------------------------------------

struct PredictionRecord {
    std::string pred;
    std::vector<std::string> answers;
    std::vector<std::string> all_classes;
    bool has_all_classes = false;
    int64_t length = -1;
    size_t line = 0;
};

// Reads a predictions JSONL file as pred.py writes it: {"pred", "answers", "all_classes",
// "length"} per line (other fields ignored; pred and answers required).
std::vector<PredictionRecord> read_predictions_jsonl(const std::string& path);

// eval.py: the dataset of a file is its base name up to the first "." ("qasper.jsonl" -> "qasper").
std::string dataset_from_filename(const std::string& path);

// eval.py scorer() over one predictions file. As in eval.py, the all_classes of the LAST line is
// used for every sample (a dataset's samples all carry the same list).
double score_predictions(std::string_view dataset, const std::vector<PredictionRecord>& records);
// eval.py scorer_e() (LongBench-E length buckets) over one predictions file.
LengthBucketScores score_predictions_e(std::string_view dataset,
                                       const std::vector<PredictionRecord>& records);

// eval.py's main loop: every "*.jsonl" file of `dir`, dataset = dataset_from_filename. Returns
// dataset -> score (sorted by name; eval.py's order is that of os.listdir).
std::map<std::string, double> score_predictions_dir(const std::string& dir);

}  // namespace kvec::eval
