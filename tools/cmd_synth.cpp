// kvec synth: write instances of the synthetic long-context suite as JSONL (LongBench fields plus
// task metadata). All logic is in src/eval/synthetic.h; this file only maps flags to a request.
#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <memory>

#include "commands.h"
#include "eval/synthetic.h"
#include "util/error.h"
#include "util/timer.h"

namespace kvec::tools {

namespace {

struct SynthOptions {
    eval::SynthRequest request;
    std::string split = "eval";
    std::string format = "completion";
    std::string output;
    bool fast = false;
    bool exact = false;
};

int synth(SynthOptions& o) {
    eval::SynthRequest& r = o.request;
    r.split = eval::parse_split(o.split);
    r.format = eval::parse_format(o.format);
    if (o.fast) r.verify_length = false;
    if (o.exact) r.verify_length = true;
    if (!r.tokenizer_path.empty()) check_readable_file(r.tokenizer_path, "tokenizer file");
    for (const auto& f : r.haystack_files) check_readable_file(f, "haystack file");
    Timer timer;
    eval::SynthSummary summary;
    if (o.output == "-") {
        summary = eval::write_synth_jsonl(r, std::cout);
    } else {
        std::ofstream out(o.output, std::ios::binary | std::ios::trunc);
        if (!out) fail("cannot open output file '{}' for writing", o.output);
        summary = eval::write_synth_jsonl(r, out);
        out.close();
        if (!out) fail("cannot write output file '{}'", o.output);
    }
    fmt::print(stderr, "wrote {} instances ({} split, lengths in {}{}) to {} in {:.2f} s\n",
               summary.n_instances, o.split, summary.length_unit,
               summary.length_unit == "tokens" ? "" : ": no --tokenizer, ceil(bytes / 4)",
               o.output == "-" ? "stdout" : o.output, timer.seconds());
    return 0;
}

}  // namespace

void add_synth_command(CLI::App& app, Action& action) {
    auto o = std::make_shared<SynthOptions>();
    CLI::App* cmd = app.add_subcommand(
        "synth",
        "generate synthetic long-context instances (needle-in-a-haystack, variable tracking, "
        "word extraction, QA) as JSONL");
    auto* suite =
        cmd->add_option("--suite", o->request.suite,
                        "a default suite: synthetic-1k|2k|4k|8k|16k|32k (fixed tasks and counts)");
    auto* task =
        cmd->add_option("--task", o->request.task,
                        "one task: niah_single, niah_multikey, niah_multivalue, niah_multiquery, "
                        "vt, cwe, fwe, qa");
    suite->excludes(task);
    cmd->add_option("--n", o->request.n, "instances of --task (indices 0..n-1)");
    cmd->add_option("--length", o->request.length,
                    "context window of --task in tokens (prompt + answer budget), 256..131072");
    cmd->add_option("--split", o->split, "eval: held-out text and vocabulary; train: training ones")
        ->capture_default_str();
    cmd->add_option("--seed", o->request.seed, "seed of the instances")->capture_default_str();
    cmd->add_option(
        "--tokenizer", o->request.tokenizer_path,
        "GGUF model or vocabulary file: lengths exact in its tokens (default: ceil(bytes / 4))");
    cmd->add_option("--haystack", o->request.haystack_files,
                    "training text files (.txt, or .json with \"text\"); --split train only");
    cmd->add_option("--format", o->format, "completion (prompt ends with the answer cue) or chat")
        ->capture_default_str();
    cmd->add_option("--text-dir", o->request.text_dir,
                    "held-out text folder (default: data/text of the checkout)");
    auto* fast = cmd->add_flag("--fast", o->fast,
                               "with --tokenizer: sum cached sentence/word token counts instead of "
                               "re-tokenizing each prompt (default for --split train)");
    auto* exact =
        cmd->add_flag("--exact", o->exact,
                      "with --tokenizer: re-tokenize each prompt until it fits (default for "
                      "--split eval)");
    fast->excludes(exact);
    cmd->add_option("-o,--output", o->output, "output JSONL file ('-' = stdout)")->required();
    cmd->callback([o, &action] { action = [o] { return synth(*o); }; });
}

}  // namespace kvec::tools
