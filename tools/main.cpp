// kvec: command-line entry point. Dispatches to one subcommand (one file each).
#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "commands.h"
#include "util/error.h"
#include "util/terminal.h"

namespace {

// OpenMP threads that spin while waiting at a barrier steal the CPU from the thread they wait
// for whenever the machine has more runnable threads than cores: on a shared 2-core machine
// libgomp's default spin (300,000 rounds) made 2-thread decoding 4x slower than 1 thread. Never
// spinning (OMP_WAIT_POLICY=passive) costs a futex wake-up per barrier instead: 13-18 % of decode
// speed on a quiet Zen 5 (docs/performance.md). A spin 30 times shorter than libgomp's default,
// GOMP_SPINCOUNT=10000, keeps the quiet-machine speed and bounds what a waiting thread takes from
// the others. libgomp reads both variables when it is loaded, before main(), so when the user has
// chosen neither we set the spin count and start again.
void prefer_short_openmp_spinning(char** argv) {
    if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
    if (::setenv("GOMP_SPINCOUNT", "10000", 1) != 0) return;
    ::execv("/proc/self/exe", argv);
    // execv only returns on failure: carry on with the default policy.
}

// CLI11's messages in kvec's words where they are obscure: a flag given twice says so.
std::string parse_error_message(const CLI::ParseError& e) {
    const std::string m = e.what();
    const std::string at_most = ": At Most 1 required but received ";
    const size_t at = m.find(at_most);
    if (at != std::string::npos) {
        return fmt::format("{} is given {} times (give it once)", m.substr(0, at), m.substr(at + at_most.size()));
    }
    return m;
}

}  // namespace

int main(int argc, char** argv) {
    prefer_short_openmp_spinning(argv);
    CLI::App app{"kvec: CPU inference for GGUF Llama-family models with a KV cache held to a memory budget"};
    app.set_version_flag("--version", std::string("kvec ") + KVEC_VERSION);
    app.require_subcommand(1);
    app.fallthrough(false);

    kvec::tools::Action action;
    kvec::tools::add_run_command(app, action);
    kvec::tools::add_bench_command(app, action);
    kvec::tools::add_gen_model_command(app, action);
    kvec::tools::add_quantize_command(app, action);
    kvec::tools::add_info_command(app, action);
    kvec::tools::add_synth_command(app, action);
    kvec::tools::add_eval_command(app, action);
    kvec::tools::add_perplexity_command(app, action);
    kvec::tools::add_logits_command(app, action);
    kvec::tools::add_tokenize_command(app, action);
    kvec::tools::add_policies_command(app, action);
    kvec::tools::add_serve_command(app, action);
    kvec::tools::add_head_scores_command(app, action);

    // An unknown command is named as such (CLI11 would only say that a subcommand is required).
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(sub->get_name());
    if (argc > 1 && argv[1][0] != '-' && std::find(names.begin(), names.end(), argv[1]) == names.end()) {
        fmt::print(stderr, "error: unknown command '{}' (commands: {})\n", kvec::escape_control(argv[1]),
                   fmt::join(names, ", "));
        fmt::print(stderr, "Run 'kvec --help' for usage.\n");
        return 1;
    }
    // llama.cpp's -ctk / -ctv, which CLI11 cannot declare, as their long names.
    std::vector<std::string> args(argv, argv + argc);
    kvec::tools::expand_kv_type_short_flags(args);
    std::vector<char*> arg_ptrs;  // [argc]
    for (std::string& a : args) arg_ptrs.push_back(a.data());
    try {
        app.parse(argc, arg_ptrs.data());
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        fmt::print(stderr, "error: {}\n", kvec::escape_control(parse_error_message(e)));
        fmt::print(stderr, "Run '{} --help' for usage.\n", argc > 1 && app.get_subcommands().size() == 1
                                                            ? std::string("kvec ") + app.get_subcommands()[0]->get_name()
                                                            : std::string("kvec"));
        return 1;
    }
    try {
        return action ? action() : 1;
    } catch (const kvec::Error& e) {
        std::fflush(stdout);
        // Messages quote names from files (keys, tensor names, tokens): no control characters.
        fmt::print(stderr, "error: {}\n", kvec::escape_control(e.what()));
        return 1;
    } catch (const std::bad_alloc&) {
        std::fflush(stdout);
        fmt::print(stderr, "error: out of memory\n");
        return 1;
    }
}
