// kvec quantize: convert a model's weights to another type (quant::quantize_gguf).
#include <fmt/format.h>

#include <memory>

#include "commands.h"
#include "quant/quantize_model.h"
#include "util/error.h"
#include "util/timer.h"

namespace kvec::tools {

namespace {

struct QuantizeCmdOptions {
    std::string in, out, type;
    bool pure = false;
    bool allow_requantize = false;
    bool verbose = false;
    int threads = 0;
};

int quantize(const QuantizeCmdOptions& o) {
    check_readable_file(o.in, "input model");
    check_threads(o.threads);
    const auto target = quant::parse_quantize_target(o.type);
    if (!target) {
        fail("unknown quantisation type '{}' (supported: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, "
             "q3_K_S, q3_K_M, q4_K_S, q4_K_M, q5_K_S, q5_K_M, q6_K, iq4_nl, iq4_xs, mxfp4)", o.type);
    }
    quant::QuantizeOptions qo;
    qo.mixed = target->mixed;
    qo.pure = o.pure;
    qo.allow_requantize = o.allow_requantize;
    qo.n_threads = o.threads;
    if (o.verbose) qo.log = [](const std::string& line) { fmt::print(stderr, "{}\n", line); };
    Timer timer;
    quant::quantize_gguf(o.in, o.out, target->type, qo);
    fmt::print(stderr, "wrote {} ({}) in {:.1f} s\n", o.out, o.type, timer.seconds());
    return 0;
}

}  // namespace

void add_quantize_command(CLI::App& app, Action& action) {
    auto o = std::make_shared<QuantizeCmdOptions>();
    CLI::App* cmd = app.add_subcommand("quantize", "convert a model's weights to another type (like llama-quantize)");
    cmd->add_option("input", o->in, "input model (GGUF)")->required();
    cmd->add_option("output", o->out, "output model")->required();
    cmd->add_option("type", o->type, "target: q8_0, q4_K_M, q6_K, f16, ...")->required();
    cmd->add_flag("--pure", o->pure, "every weight gets exactly the target type (no q6_K output, no mix)");
    cmd->add_flag("--allow-requantize", o->allow_requantize, "accept already quantised weights as input");
    cmd->add_flag("-v,--verbose", o->verbose, "print the type chosen for each tensor");
    cmd->add_option("-t,--threads", o->threads, "threads (default: all)");
    cmd->callback([o, &action] { action = [o] { return quantize(*o); }; });
}

}  // namespace kvec::tools
