// kvec gen-model: write a random-weight model of a chosen shape and type (tests, speed comparisons).
#include <fmt/format.h>

#include <memory>

#include "commands.h"
#include "gguf/ggml_type.h"
#include "model/config.h"
#include "model/random_model.h"
#include "util/error.h"
#include "util/timer.h"

namespace kvec::tools {

namespace {

struct GenOptions {
    RandomModelSpec spec;
    std::string preset;
    std::string type = "f32";
    std::string expert_type;
    std::string out;
    CLI::App* cmd = nullptr;
};

// A weight type by name (kvec::Error for an unknown one or an intermediate format).
GgmlType weight_type(const std::string& name) {
    const auto type = ggml_type_from_name(name);
    if (!type || !ggml_type_traits(static_cast<uint32_t>(*type))) {
        fail(
            "unknown tensor type '{}' (supported: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, "
            "q2_K, "
            "q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs, mxfp4)",
            name);
    }
    if (*type == GgmlType::Q8_1 || *type == GgmlType::Q8_K) {
        fail("type {} is an intermediate format, not a weight type; pick another", name);
    }
    return *type;
}

int gen_model(GenOptions& o) {
    RandomModelSpec s = o.spec;
    if (!o.preset.empty()) {
        // The preset's shape, with any explicitly given flag taking precedence.
        RandomModelSpec p = random_model_preset(o.preset);
        const RandomModelSpec& f = o.spec;
        auto given = [&](const char* flag) { return o.cmd->count(flag) > 0; };
        if (given("--arch")) p.arch = f.arch;
        if (given("--layers")) p.n_layer = f.n_layer;
        if (given("--embd")) p.n_embd = f.n_embd;
        if (given("--heads")) p.n_head = f.n_head;
        if (given("--kv-heads")) p.n_head_kv = f.n_head_kv;
        if (given("--ff")) p.n_ff = f.n_ff;
        if (given("--head-dim")) p.head_dim = f.head_dim;
        if (given("--vocab")) p.n_vocab = f.n_vocab;
        if (given("--ctx")) p.n_ctx = f.n_ctx;
        if (given("--rope-base")) p.rope_base = f.rope_base;
        if (given("--rope-scaling")) p.rope_scaling = f.rope_scaling;
        if (given("--rope-factor")) p.rope_factor = f.rope_factor;
        if (given("--name")) p.name = f.name;
        if (given("--sliding-window")) p.sliding_window = f.sliding_window;
        if (given("--swa-pattern")) p.swa_pattern = f.swa_pattern;
        if (given("--rope-base-swa")) p.rope_base_swa = f.rope_base_swa;
        if (given("--experts")) p.n_expert = f.n_expert;
        if (given("--experts-used")) p.n_expert_used = f.n_expert_used;
        if (given("--expert-ff")) p.n_ff_exp = f.n_ff_exp;
        if (given("--shared-ff")) p.n_ff_shexp = f.n_ff_shexp;
        if (given("--attn-softcap")) p.attn_softcap = f.attn_softcap;
        if (given("--final-softcap")) p.final_softcap = f.final_softcap;
        if (given("--rope-dims")) p.n_rot = f.n_rot;
        if (given("--rope-orig-ctx")) p.n_ctx_orig = f.n_ctx_orig;
        if (given("--separate-qkv")) p.fused_qkv = f.fused_qkv;
        p.tied = p.tied || f.tied;
        p.seed = f.seed;
        p.vocab_from = f.vocab_from;
        s = p;
    }
    s.type = weight_type(o.type);
    if (!o.expert_type.empty()) s.expert_type = weight_type(o.expert_type);
    Timer timer;
    write_random_model(s, o.out);
    const std::string experts = s.n_expert > 0
                                    ? fmt::format(", {} experts ({} used)", s.n_expert,
                                                  s.n_expert_used > 0 ? s.n_expert_used : 2)
                                    : "";
    fmt::print(stderr,
               "wrote {} ({} {} layers, embd {}, heads {}/{}, ff {}{}, type {}) in {:.1f} s\n",
               o.out, s.arch, s.n_layer, s.n_embd, s.n_head, s.n_head_kv, s.n_ff, experts,
               ggml_type_name(s.type), timer.seconds());
    return 0;
}

}  // namespace

void add_gen_model_command(CLI::App& app, Action& action) {
    auto o = std::make_shared<GenOptions>();
    CLI::App* cmd = app.add_subcommand("gen-model", "write a random-weight model (any architecture, shape and type)");
    o->cmd = cmd;
    RandomModelSpec& s = o->spec;
    cmd->add_option("--arch", s.arch, "architecture")
        ->check(CLI::IsMember([] {
            std::vector<std::string> names;
            for (const ArchTraits& t : architectures()) names.emplace_back(t.name);
            return names;
        }()))
        ->capture_default_str();
    cmd->add_option(
        "--preset", o->preset,
        "a named shape: tinyllama-1.1b, gemma3-test, gemma3-4b, gemma2-test, phi3-test, phi4-mini, "
        "qwen3moe-test, qwen2moe-test, mixtral-test, qwen3-30b-a3b, gpt-oss-test, gpt-oss-20b");
    cmd->add_option("--layers", s.n_layer, "layers")->capture_default_str();
    cmd->add_option("--embd", s.n_embd, "embedding size")->capture_default_str();
    cmd->add_option("--heads", s.n_head, "query heads")->capture_default_str();
    cmd->add_option("--kv-heads", s.n_head_kv, "KV heads (GQA when fewer than --heads)")->capture_default_str();
    cmd->add_option("--ff", s.n_ff, "feed-forward size")->capture_default_str();
    cmd->add_option("--head-dim", s.head_dim, "head size (default: embd / heads)")->check(CLI::Range(1, 65536));
    cmd->add_option("--vocab", s.n_vocab, "vocabulary size (default: all tokens of the vocabulary file)");
    cmd->add_option("--ctx", s.n_ctx, "training context length written to the file")->capture_default_str();
    cmd->add_option("--rope-base", s.rope_base, "RoPE frequency base")->capture_default_str();
    cmd->add_option("--rope-scaling", s.rope_scaling, "RoPE scaling")
        ->check(CLI::IsMember({"none", "linear", "llama3", "yarn"}))
        ->capture_default_str();
    cmd->add_option("--rope-factor", s.rope_factor,
                    "RoPE scaling factor (default: 4 linear, 8 llama3, 32 yarn)");
    cmd->add_option("--sliding-window", s.sliding_window,
                    "gemma3: sliding-window size (0: every layer global); gemma2: its window (0: "
                    "4096); phi3: the "
                    "key written (llama.cpp switches it off); gpt-oss: its window (0: 128)");
    cmd->add_option("--swa-pattern", s.swa_pattern, "gemma3: one global layer every N layers")->capture_default_str();
    cmd->add_option("--rope-base-swa", s.rope_base_swa, "gemma3: RoPE base of the sliding-window layers")
        ->capture_default_str();
    cmd->add_option(
        "--experts", s.n_expert,
        "experts per layer (qwen3moe, qwen2moe: default 8; llama: > 0 makes a Mixtral-style MoE)");
    cmd->add_option("--experts-used", s.n_expert_used, "experts per token (default 2)");
    cmd->add_option("--expert-ff", s.n_ff_exp,
                    "qwen3moe, qwen2moe, gpt-oss: each expert's feed-forward size (default --ff)");
    cmd->add_option(
        "--expert-type", o->expert_type,
        "the experts' 3-D tensors' weight type (default: --type; gpt-oss files hold mxfp4)");
    cmd->add_option("--shared-ff", s.n_ff_shexp,
                    "qwen2moe: the shared expert's feed-forward size (default --ff)");
    cmd->add_option("--attn-softcap", s.attn_softcap, "gemma2: attention logit soft-capping")->capture_default_str();
    cmd->add_option("--final-softcap", s.final_softcap, "gemma2: final logit soft-capping")->capture_default_str();
    cmd->add_option("--rope-dims", s.n_rot, "rotated dimensions per head (default: the head size)");
    cmd->add_option(
        "--rope-orig-ctx", s.n_ctx_orig,
        "phi3: LongRoPE's original context (writes rope_factors_long/short and the attention "
        "factor; "
        "0: no LongRoPE); yarn: rope.scaling.original_context_length (0: --ctx / factor)");
    cmd->add_flag_function("--separate-qkv", [o](int64_t) { o->spec.fused_qkv = false; },
                  "phi3: attn_q/k/v.weight instead of the fused attn_qkv.weight");
    cmd->add_flag("--tied", s.tied, "no output.weight: the output shares the token embedding (gemma2: always)");
    cmd->add_option("--type", o->type, "weight type: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K..q6_K, iq4_nl, iq4_xs, mxfp4")
        ->capture_default_str();
    cmd->add_option("--vocab-from", s.vocab_from, "GGUF file whose tokenizer is copied (default: the llama-spm vocabulary)");
    cmd->add_option("--name", s.name, "general.name");
    cmd->add_option("--seed", s.seed, "random seed")->capture_default_str();
    cmd->add_option("-o,--output", o->out, "output file")->required();
    cmd->callback([o, &action] { action = [o] { return gen_model(*o); }; });
}

}  // namespace kvec::tools
