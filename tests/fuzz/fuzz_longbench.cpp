// LongBench JSONL items and the records kvec eval resumes from: one line of JSON is parsed as a
// LongBench sample (then its prompt built with its dataset's template and its answers scored
// against a prediction with the dataset's metric), as a pred.py prediction line, and as a
// predictions.jsonl record. Each either works or throws kvec::Error.
#include <string>

#include "eval/jsonl.h"
#include "eval/longbench.h"
#include "eval/metrics.h"
#include "eval/sweep.h"
#include "fuzz_common.h"
#include "util/error.h"

namespace {

const kvec::eval::LongBenchConfig& config() {
    static const kvec::eval::LongBenchConfig c =
        kvec::eval::LongBenchConfig::load(kvec::fuzz::source_path("data/longbench"));
    return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 65536) return 0;
    const std::string_view line = kvec::fuzz::as_text(data, size);
    std::optional<nlohmann::json> j;
    try {
        j = kvec::eval::parse_jsonl_line(line, "fuzz:1");
    } catch (const kvec::Error&) {
        return 0;
    }
    if (!j) return 0;
    try {
        const kvec::eval::LongBenchSample s = kvec::eval::parse_longbench_sample(*j, "fuzz:1");
        const std::string dataset = config().has(s.dataset) ? s.dataset : std::string("hotpotqa");
        const kvec::eval::DatasetSpec& spec = config().dataset(dataset);
        const std::string prompt = kvec::eval::build_prompt(spec.prompt_template, s);
        double score = 0;
        if (spec.supported) {
            const std::string prediction = s.input.substr(0, 200);
            score = kvec::eval::sample_score(dataset, prediction, s.answers, s.all_classes);
        }
        volatile size_t sink = prompt.size() + static_cast<size_t>(score);
        (void)sink;
    } catch (const kvec::Error&) {
    }
    try {
        const kvec::eval::EvalRecord r = kvec::eval::record_from_json(*j, "fuzz:1");
        volatile size_t sink = kvec::eval::to_json(r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size();
        (void)sink;
    } catch (const kvec::Error&) {
    }
    return 0;
}
