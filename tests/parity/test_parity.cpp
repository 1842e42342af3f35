// Golden parity of the C++ forward pass with the independent PyTorch reference (python/kvec_ref):
//   - prefill logits and decode-after-prefill logits, for every architecture variant (F32) and
//     every tensor type (the reference dequantises the same file with its own code and computes
//     in float32, so the same tolerance holds);
//   - greedy generations token for token (F32);
//   - eviction: after a trivial sinks + recent evictor compresses the cache (one-shot, after every
//     prefill chunk, or during decoding), decode logits equal the reference run with the
//     matching --kv-visible mask;
//   - every registered policy in every mode (one-shot, chunked prefill, decode-time eviction): the
//     same comparison, plus the budget met exactly after the prompt and after every decode step,
//     and chunked prefill's peak within budget + chunk;
//   - StreamingLLM with re-rotation: the reference replays the run with the kept keys moved to
//     their new positions by its own RoPE (tests/parity/rerotation_ref.py);
//   - the observations given to eviction policies (window means, column sums, last row), and
//     H2O's / TOVA's selections derived from the reference's column sums / last row.
//
// Tolerance: max |logit_C++ - logit_ref| <= 1e-4 x max |logit_ref| of the case (the logit scale),
// and 2e-5 absolute for attention probabilities. Both implementations accumulate in float32 in
// different orders; measured differences are around 1e-6 relative.
//
// The cases are grouped in tests; all cases of the tests the current run selects are prepared
// together and the reference runs once for them (`kvec_ref.cli batch`): a full run costs one
// torch start-up (plus one for the re-rotation replay), a ctest run one per test.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "model/model.h"
#include "model/session.h"
#include "policy/head_importance.h"
#include "policy/registry.h"
#include "sampling/sampler.h"
#include "test_helpers.h"

namespace kvec {
namespace {

using namespace testing_helpers;

constexpr int kPrompt = 24;    // prompt tokens
constexpr int kContinue = 8;   // tokens decoded after the prompt
constexpr int kGreedy = 16;    // greedy tokens compared
constexpr int kWindow = 8;     // observation window
constexpr float kLogitTol = 1e-4f;
constexpr float kProbTol = 2e-5f;

enum class Kind { Logits, Evict, Observe };

struct Case {
    std::string group;  // the TEST that checks it: Variants, TensorTypes, Eviction, Observations
    std::string name;
    RandomModelSpec spec;
    Kind kind = Kind::Logits;
    bool greedy = false;
    int evict_chunk = 0;     // Evict: prefill chunk size (0: one chunk)
    int decode_interval = 0; // Evict: decode-time eviction every k steps
    std::string policy = "";  // Evict: a registered policy "name:options" (empty: sinks + recent)
    int64_t budget = 0;      // the policy's B (0: no budget, full)
    std::string path = "";   // an existing GGUF file to use instead of the generated spec
};

constexpr int kPolicyBudget = 12;  // B of the policy cases: 24-token prompt -> half evicted
constexpr int kPolicyChunk = 8;    // chunk of the chunked-prefill policy cases

RandomModelSpec parity_spec(const std::string& arch = "llama") {
    RandomModelSpec s;
    s.arch = arch;
    s.n_layer = 2;
    s.n_embd = 256;  // multiples of 256 so that every K-quant applies
    s.n_head = 4;
    s.n_head_kv = 2;
    s.n_ff = 512;
    s.n_vocab = 512;
    s.n_ctx = 512;
    s.seed = 11;
    return s;
}

// Mixture of experts: qwen3moe (16 experts, 4 used, renormalised weights, Q/K norms), qwen2moe
// (8 experts, 2 used, weights as they are, Q/K/V biases, the gated shared expert), Mixtral (llama
// with 8 experts, 2 used).
std::vector<Case> moe_variant_cases() {
    std::vector<Case> v;
    auto add = [&](const std::string& name, RandomModelSpec s) {
        v.push_back({"Variants", name, s, Kind::Logits, true});
    };
    RandomModelSpec s = parity_spec("qwen3moe");
    s.head_dim = 128;
    s.n_expert = 16;
    s.n_expert_used = 4;
    s.n_ff_exp = 256;
    add("qwen3moe", s);
    s = parity_spec("qwen2moe");
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.n_ff_exp = 256;
    s.n_ff_shexp = 512;
    add("qwen2moe_shared", s);
    s = parity_spec();
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.n_ff = 256;
    add("mixtral", s);
    return v;
}

std::vector<Case> variant_cases() {
    std::vector<Case> v;
    auto add = [&](const std::string& name, RandomModelSpec s) { v.push_back({"Variants", name, s, Kind::Logits, true}); };
    RandomModelSpec s = parity_spec();
    s.n_head_kv = 4;
    add("llama_mha", s);
    add("llama_gqa", parity_spec());
    s = parity_spec();
    s.rope_scaling = "llama3";
    s.rope_factor = 8.0f;
    s.rope_base = 500000.0f;
    add("llama3_rope", s);
    s = parity_spec();
    s.rope_scaling = "linear";
    s.rope_factor = 4.0f;
    add("linear_rope", s);
    add("qwen2_bias", parity_spec("qwen2"));
    s = parity_spec("qwen3");
    s.head_dim = 128;  // q_dim 512 != n_embd, as in real Qwen3
    add("qwen3_qk_norm", s);
    s = parity_spec();
    s.tied = true;
    add("tied_output", s);
    // Gemma 3: layer 0 sliding-window (window 8, shorter than the 24 + 8 tokens, so the mask and
    // the dropping of old entries both act), layer 1 global with linear RoPE scaling; head size
    // 128 (q_dim != n_embd), tied output.
    s = parity_spec("gemma3");
    s.head_dim = 128;
    s.tied = true;
    s.sliding_window = 8;
    s.swa_pattern = 2;
    s.rope_base = 1000000.0f;
    s.rope_scaling = "linear";
    s.rope_factor = 8.0f;
    s.rms_eps = 1e-6f;
    add("gemma3_swa", s);
    for (Case& c : moe_variant_cases()) v.push_back(c);
    // Gemma 2: layer 0 sliding-window (window 8), layer 1 global; attention logits capped at 1.5
    // and the output's at 4, so that tanh bends both (random logits of std ~1 and ~3).
    s = parity_spec("gemma2");
    s.head_dim = 128;
    s.sliding_window = 8;
    s.attn_softcap = 1.5f;
    s.final_softcap = 4.0f;
    s.rms_eps = 1e-6f;
    add("gemma2_softcap", s);
    // Phi-3: fused attn_qkv and ffn_up, partial rotary (48 of 64), LongRoPE with its attention
    // factor: the context (512, the file's) exceeds the original 128 -> the long factors; with an
    // original context of 512 -> the short ones. Separate Q/K/V (which llama.cpp also reads).
    s = parity_spec("phi3");
    s.head_dim = 64;
    s.n_rot = 48;
    s.n_ctx_orig = 128;
    s.sliding_window = 16;  // written, and ignored as llama.cpp ignores it
    add("phi3_longrope_long", s);
    s.n_ctx_orig = 512;
    s.fused_qkv = false;
    add("phi3_longrope_short_separate_qkv", s);
    // gpt-oss: layer 0 sliding-window (window 8), layer 1 global; the sinks, YaRN (factor 32 of
    // an original context of 64: the ramp spans the middle pairs), biases on q/k/v, the output,
    // the router and the experts; 8 experts, 4 used, routed by their logits; the clamped SwiGLU
    // acting on a few percent of the experts' gate and up outputs.
    s = parity_spec("gpt-oss");
    s.n_head = 8;
    s.head_dim = 64;
    s.sliding_window = 8;
    s.n_expert = 8;
    s.n_expert_used = 4;
    s.n_ff_exp = 256;
    s.rope_base = 150000.0f;
    s.rope_scaling = "yarn";
    s.rope_factor = 32.0f;
    s.n_ctx_orig = 64;
    s.fused_qkv = false;
    add("gptoss", s);
    return v;
}

const std::vector<GgmlType>& all_types() {
    static const std::vector<GgmlType> t = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                                            GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K, GgmlType::Q3_K,
                                            GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL,
                                            GgmlType::IQ4_XS, GgmlType::MXFP4};
    return t;
}

std::vector<Case> type_cases() {
    std::vector<Case> v;
    for (GgmlType t : all_types()) {
        RandomModelSpec s = parity_spec();
        s.type = t;
        v.push_back({"TensorTypes", std::string("type_") + ggml_type_name(t), s, Kind::Logits, false});
    }
    // Quantised experts (3-D tensors) through the reference's own dequantiser.
    for (GgmlType t : {GgmlType::Q4_K, GgmlType::IQ4_XS}) {
        RandomModelSpec s = moe_variant_cases().front().spec;
        s.type = t;
        v.push_back(
            {"TensorTypes", std::string("qwen3moe_") + ggml_type_name(t), s, Kind::Logits, false});
    }
    // gpt-oss as its files come: MXFP4 experts, Q8_0 elsewhere (llama-quantize's MXFP4_MOE).
    for (const Case& c : variant_cases()) {
        if (c.name != "gptoss") continue;
        RandomModelSpec s = c.spec;
        s.type = GgmlType::Q8_0;
        s.expert_type = GgmlType::MXFP4;
        v.push_back({"TensorTypes", "gptoss_mxfp4_experts", s, Kind::Logits, false});
    }
    return v;
}

std::vector<Case> eviction_cases() {
    std::vector<Case> v;
    v.push_back({"Eviction", "evict_one_shot", parity_spec(), Kind::Evict, false, 0, 0});
    v.push_back({"Eviction", "evict_chunked", parity_spec(), Kind::Evict, false, 8, 0});
    v.push_back({"Eviction", "evict_decode_time", parity_spec(), Kind::Evict, false, 0, 3});
    RandomModelSpec q = parity_spec("qwen2");
    q.type = GgmlType::Q4_K;
    v.push_back({"Eviction", "evict_qwen2_q4_K", q, Kind::Evict, false, 8, 2});
    v.push_back({"Observations", "observations", parity_spec(), Kind::Observe, false});
    return v;
}

// headkv's scores=FILE for the parity model: uneven scores, one per (layer, KV head).
std::string parity_head_importance() {
    const RandomModelSpec spec = parity_spec();
    policy::HeadImportance h;
    h.model = "parity";
    for (int l = 0; l < spec.n_layer; ++l) {
        h.scores.emplace_back();
        for (int k = 0; k < spec.n_head_kv; ++k) h.scores.back().push_back(0.1 + 0.3 * ((l * spec.n_head_kv + k) % 3));
    }
    const auto path = (std::filesystem::path(::testing::TempDir()) / "kvec-parity-importance.json").string();
    policy::write_head_importance(h, path);
    return path;
}

// Every registered policy x {one-shot, chunked prefill, decode-time eviction} (full, kvzip: one-shot).
std::vector<Case> policy_cases() {
    std::vector<Case> v;
    for (const auto& entry : policy::policies()) {
        const std::string& name = entry.name;
        if (name == "full") {
            Case c{"Policies", "policy_full", parity_spec(), Kind::Evict, false, 0, 0, "full", 0};
            v.push_back(c);
            continue;
        }
        // GemFilter prefills its selection again: its cache is a plain prefill of those tokens
        // (tests/policy/test_policy_engine.cpp, GemFilterPrefillsItsSelectionAgain), not a mask.
        if (name == "gemfilter") continue;
        const bool fixed_window = name == "streaming" || name == "tova";
        std::string base = fmt::format("{}:budget={}{}", name, kPolicyBudget, fixed_window ? "" : ",window=4");
        if (name == "headkv") base += ",scores=" + parity_head_importance();
        v.push_back({"Policies", "policy_" + name + "_one_shot", parity_spec(), Kind::Evict, false, 0, 0, base,
                     kPolicyBudget});
        if (name == "kvzip") continue;  // one-shot only: its reconstruction scores the whole prompt
        v.push_back({"Policies", "policy_" + name + "_chunked", parity_spec(), Kind::Evict, false, kPolicyChunk, 0,
                     base + ",chunked=true", kPolicyBudget});
        v.push_back({"Policies", "policy_" + name + "_decode", parity_spec(), Kind::Evict, false, 0, 1,
                     base + ",decode=1", kPolicyBudget});
    }
    return v;
}

// The bundled trained model (models/kvec-tiny.gguf), when the checkout has it: its logits and
// greedy tokens against the reference, as for the generated models.
const std::string kBundled = std::string(KVEC_SOURCE_DIR) + "/models/kvec-tiny.gguf";

std::vector<Case> bundled_cases() {
    std::vector<Case> v;
    if (!std::filesystem::exists(kBundled)) return v;
    Case c;
    c.group = "BundledModel";
    c.name = "bundled_kvec_tiny";
    c.path = kBundled;
    c.greedy = true;
    v.push_back(c);
    return v;
}

std::vector<Case> all_cases() {
    std::vector<Case> v = variant_cases();
    for (auto* f : {&type_cases, &eviction_cases, &policy_cases, &bundled_cases})
        for (auto& c : f()) v.push_back(c);
    return v;
}

std::vector<int32_t> sequence(int n) {
    std::vector<int32_t> t = {1};  // BOS
    uint64_t x = 12345;
    while (static_cast<int>(t.size()) < n) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        t.push_back(static_cast<int32_t>(3 + (x >> 33) % 509));
    }
    return t;
}

std::string join(const std::vector<int32_t>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) {
        if (i > 0) s += ',';
        s += std::to_string(v[i]);
    }
    return s;
}

std::vector<float> read_f32(const std::string& path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) return {};
    const auto n = static_cast<size_t>(in.tellg());
    std::vector<float> v(n / sizeof(float));
    in.seekg(0);
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
    return v;
}

// Records which positions each eviction removed and when, to build the reference's mask
// kv_visible[l, h, j] = the sequence index from which key j is no longer visible.
class RecordingEvictor : public Evictor {
public:
    RecordingEvictor(Evictor& inner, int n_layer, int n_head_kv, int n_total)
        : inner_(inner), n_head_kv_(n_head_kv), n_total_(n_total),
          mask_(static_cast<size_t>(n_layer) * n_head_kv * n_total, n_total) {}
    ObservationRequest request() const override { return inner_.request(); }
    void begin_sequence(int32_t n_prompt) override { inner_.begin_sequence(n_prompt); }
    void observe(const LayerView& v) override { inner_.observe(v); }
    bool on_prefill(const LayerView& v, KeepLists& keep) override { return record(v, keep, inner_.on_prefill(v, keep)); }
    bool on_decode(const LayerView& v, KeepLists& keep) override { return record(v, keep, inner_.on_decode(v, keep)); }
    const std::vector<int32_t>& mask() const { return mask_; }
    int evicted = 0;

private:
    bool record(const LayerView& v, const KeepLists& keep, bool changed) {
        if (!changed) return false;
        for (int h = 0; h < v.n_head_kv; ++h) {
            const KvHeadView& hv = v.heads[static_cast<size_t>(h)];
            std::set<int32_t> kept(keep[static_cast<size_t>(h)].begin(), keep[static_cast<size_t>(h)].end());
            for (int32_t i = 0; i < hv.n_entries; ++i) {
                if (kept.count(i)) continue;
                mask_[(static_cast<size_t>(v.layer) * n_head_kv_ + h) * n_total_ + hv.positions[i]] = v.chunk_end;
                ++evicted;
            }
        }
        return true;
    }
    Evictor& inner_;
    int n_head_kv_, n_total_;
    std::vector<int32_t> mask_;  // [n_layer, n_head_kv, n_total]
};

struct Prepared {
    Case c;
    std::string model_path;
    int n_vocab = 0;
    std::vector<float> cpp;        // Logits/Evict: [kPrompt + kContinue, n_vocab]; Observe: [L, H, 3, kPrompt]
    std::vector<int32_t> greedy;   // C++ greedy tokens
    std::string ref_out;           // reference output file
    int greedy_line = -1;          // line of the reference's stdout with its greedy tokens
    int evicted = 0;
    std::vector<float> uncompressed;  // Evict: decode logits without eviction [kContinue, n_vocab]
    std::vector<std::string> budget_errors;  // policy cases: where the budget was not met exactly
    std::vector<std::vector<int32_t>> kept;  // policy cases: positions kept after the prompt [L * H_kv][k]
};

SessionOptions exact(int n_batch = 512) {
    SessionOptions o;
    o.kv_type_k = o.kv_type_v = KvType::F32;  // exact parity: no fp16 rounding of keys and values
    o.n_batch = n_batch;
    return o;
}

// Runs the C++ side of a case and appends the reference commands it needs.
Prepared prepare(const Case& c, std::vector<std::string>& commands, int& n_greedy_lines) {
    Prepared p;
    p.c = c;
    p.model_path = c.path.empty() ? write_model(c.spec, c.name + ".gguf") : c.path;
    const auto model = Model::load(p.model_path);
    const int V = model->config().n_vocab;
    p.n_vocab = V;
    const auto seq = sequence(kPrompt + kContinue);
    const std::vector<int32_t> prompt(seq.begin(), seq.begin() + kPrompt);
    p.ref_out = temp_path(c.name + ".ref.f32");

    if (c.kind == Kind::Observe) {
        ObservationRequest req;
        req.window = kWindow;
        req.column_sums = true;
        req.last_row = true;
        SinkRecentEvictor keep_all(1 << 20, 0, 0, req);
        const ModelConfig& mc = model->config();
        p.cpp.assign(static_cast<size_t>(mc.n_layer) * mc.n_head * 3 * kPrompt, 0.0f);
        keep_all.inspect = [&](const LayerView& v) {
            for (int h = 0; h < v.n_head_kv; ++h) {
                const KvHeadView& hv = v.heads[static_cast<size_t>(h)];
                for (int g = 0; g < v.group; ++g) {
                    const int qh = h * v.group + g;
                    for (int32_t j = 0; j < hv.n_entries; ++j) {
                        const size_t base = ((static_cast<size_t>(v.layer) * mc.n_head + qh) * 3) * kPrompt;
                        p.cpp[base + 0 * kPrompt + static_cast<size_t>(j)] = hv.column_sums[g * hv.n_entries + j];
                        p.cpp[base + 1 * kPrompt + static_cast<size_t>(j)] = hv.window_scores[g * hv.n_entries + j];
                        p.cpp[base + 2 * kPrompt + static_cast<size_t>(j)] = hv.last_row[g * hv.n_entries + j];
                    }
                }
            }
        };
        Session s(*model, exact());
        s.set_evictor(&keep_all);
        s.prefill(prompt);
        commands.push_back(fmt::format("attn-stats --model {} --tokens {} --window {} --out {}", p.model_path,
                                       join(prompt), kWindow, p.ref_out));
        return p;
    }

    SinkRecentEvictor sink_recent(4, 6, /*head_skew=*/2,
                                  ObservationRequest{0, false, false, c.decode_interval});
    std::unique_ptr<Evictor> policy;
    if (!c.policy.empty()) policy = policy::make_policy(c.policy);
    const int n_total = kPrompt + kContinue;
    RecordingEvictor recorder(policy ? *policy : static_cast<Evictor&>(sink_recent), model->config().n_layer,
                              model->config().n_head_kv, n_total);
    Session s(*model, exact(c.evict_chunk > 0 ? c.evict_chunk : 512));
    if (c.kind == Kind::Evict) s.set_evictor(&recorder);
    // Budgets: L x H_kv x B entries after the prompt (every policy, per-head and per-layer budgets
    // included) and after every decode step with decode-time eviction; chunked: peak <= budget + chunk.
    const int64_t heads = int64_t{model->config().n_layer} * model->config().n_head_kv;
    auto check_entries = [&](const std::string& when, int64_t want) {
        if (c.policy.empty() || s.kv_cache().total_entries() == want) return;
        p.budget_errors.push_back(fmt::format("{}: {} entries, expected {}", when, s.kv_cache().total_entries(), want));
    };
    const auto pl = s.prefill(prompt, true);
    p.cpp.assign(pl.begin(), pl.end());
    const int64_t kept = c.budget > 0 ? c.budget : kPrompt;
    check_entries("after the prompt", heads * kept);
    for (int l = 0; l < model->config().n_layer; ++l) {
        for (int h = 0; h < model->config().n_head_kv; ++h) {
            const int32_t* pos = s.kv_cache().positions(l, h);
            p.kept.emplace_back(pos, pos + s.kv_cache().size(l, h));
        }
    }
    if (!c.policy.empty() && c.evict_chunk > 0) {
        const size_t bound = static_cast<size_t>(heads * (c.budget + c.evict_chunk)) * s.kv_cache().entry_bytes();
        if (s.kv_cache().peak_bytes() > bound) {
            p.budget_errors.push_back(fmt::format("chunked peak {} bytes > budget + chunk = {} bytes",
                                                  s.kv_cache().peak_bytes(), bound));
        }
    }
    for (int i = kPrompt; i < n_total; ++i) {
        const auto l = s.decode(seq[static_cast<size_t>(i)]);
        p.cpp.insert(p.cpp.end(), l.begin(), l.end());
        check_entries(fmt::format("after decode step {}", i - kPrompt + 1),
                      heads * (c.decode_interval > 0 ? kept : kept + i - kPrompt + 1));
    }
    std::string mask_arg;
    if (c.kind == Kind::Evict) {
        // The same run without eviction, to show that the comparison is sensitive to the mask.
        Session plain(*model, exact());
        plain.prefill(prompt);
        for (int i = kPrompt; i < n_total; ++i) {
            const auto l = plain.decode(seq[static_cast<size_t>(i)]);
            p.uncompressed.insert(p.uncompressed.end(), l.begin(), l.end());
        }
        p.evicted = recorder.evicted;
        const std::string mask_path = temp_path(c.name + ".mask.i32");
        std::ofstream m(mask_path, std::ios::binary);
        m.write(reinterpret_cast<const char*>(recorder.mask().data()),
                static_cast<std::streamsize>(recorder.mask().size() * sizeof(int32_t)));
        mask_arg = " --kv-visible " + mask_path;
    }
    commands.push_back(fmt::format("logits --model {} --tokens {}{} --out {}", p.model_path, join(seq), mask_arg, p.ref_out));

    if (c.greedy) {
        Session g(*model, exact());
        auto logits = g.prefill(prompt);
        for (int i = 0; i < kGreedy; ++i) {
            const int32_t id = argmax(logits);
            p.greedy.push_back(id);
            if (i + 1 < kGreedy) logits = g.decode(id);
        }
        commands.push_back(fmt::format("generate --model {} --tokens {} -n {}", p.model_path, join(prompt), kGreedy));
        p.greedy_line = n_greedy_lines++;
    }
    return p;
}

class Suite {
public:
    static Suite& get() {
        static Suite s;
        return s;
    }
    const Prepared& operator[](const std::string& name) {
        auto it = cases_.find(name);
        if (it == cases_.end()) throw std::runtime_error("case not prepared: " + name);
        return it->second;
    }
    const std::string& error() const { return error_; }
    const std::vector<std::string>& greedy_lines() const { return greedy_lines_; }

private:
    Suite() {
        if (std::system("/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1") != 0) {
            error_ = "/usr/bin/python3 with torch and numpy is not available (Debian: python3-torch)";
            return;
        }
        // Prepare only the cases this run selected (ctest runs one test per process).
        std::set<std::string> wanted;
        const auto* ut = ::testing::UnitTest::GetInstance();
        for (int i = 0; i < ut->total_test_suite_count(); ++i) {
            const auto* suite = ut->GetTestSuite(i);
            for (int j = 0; j < suite->total_test_count(); ++j) {
                const auto* info = suite->GetTestInfo(j);
                if (info->should_run()) wanted.insert(info->name());
            }
        }
        std::vector<std::string> commands;
        int n_greedy = 0;
        if (wanted.count("PolicyScores")) {  // needs both groups
            wanted.insert("Policies");
            wanted.insert("Observations");
        }
        for (const Case& c : all_cases()) {
            if (wanted.count(c.group)) cases_.emplace(c.name, prepare(c, commands, n_greedy));
        }
        const std::string cmd_file = temp_path("reference-commands.txt");
        const std::string out_file = temp_path("reference-stdout.txt");
        const std::string err_file = temp_path("reference-stderr.txt");
        {
            std::ofstream f(cmd_file);
            for (const auto& c : commands) f << c << "\n";
        }
        const std::string cmd = fmt::format(
            "cd '{}' && OMP_NUM_THREADS=2 PYTHONPATH='{}/python' /usr/bin/python3 -m kvec_ref.cli batch --file '{}' > '{}' 2> '{}'",
            KVEC_SOURCE_DIR, KVEC_SOURCE_DIR, cmd_file, out_file, err_file);
        if (std::system(cmd.c_str()) != 0) {
            std::ifstream e(err_file);
            std::stringstream ss;
            ss << e.rdbuf();
            error_ = "the reference failed: " + ss.str();
            return;
        }
        std::ifstream out(out_file);
        for (std::string line; std::getline(out, line);) greedy_lines_.push_back(line);
    }

    std::map<std::string, Prepared> cases_;
    std::vector<std::string> greedy_lines_;
    std::string error_;
};

void compare_logits(const Prepared& p) {
    const auto ref = read_f32(p.ref_out);
    ASSERT_EQ(ref.size(), p.cpp.size()) << "reference output " << p.ref_out;
    float scale = 0, worst = 0;
    for (float x : ref) scale = std::max(scale, std::fabs(x));
    ASSERT_GT(scale, 0.5f) << "degenerate logits";
    const size_t V = static_cast<size_t>(p.n_vocab);
    for (size_t row = 0; row < ref.size() / V; ++row) {
        float d = 0;
        for (size_t i = 0; i < V; ++i) d = std::max(d, std::fabs(ref[row * V + i] - p.cpp[row * V + i]));
        worst = std::max(worst, d);
        EXPECT_LE(d, kLogitTol * scale) << "row " << row << (row < kPrompt ? " (prefill)" : " (decode)")
                                        << ", logit scale " << scale;
    }
    ::testing::Test::RecordProperty("max_abs_diff_over_scale", std::to_string(worst / scale));
    std::printf("  [%s] max |C++ - reference| = %.3g (%.3g of the logit scale %.3g)\n", p.c.name.c_str(), worst,
                worst / scale, scale);
}

void check_case(const Case& c) {
    SCOPED_TRACE("case " + c.name);
    Suite& suite = Suite::get();
    ASSERT_TRUE(suite.error().empty()) << suite.error();
    const Prepared& p = suite[c.name];
    if (p.c.kind == Kind::Observe) {
        const auto ref = read_f32(p.ref_out);
        ASSERT_EQ(ref.size(), p.cpp.size());
        float worst = 0;
        for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(ref[i] - p.cpp[i]));
        EXPECT_LE(worst, kProbTol);
        std::printf("  [observations] max |C++ - reference| = %.3g\n", worst);
        return;
    }
    compare_logits(p);
    for (const auto& e : p.budget_errors) ADD_FAILURE() << "budget not met: " << e;
    if (p.c.kind == Kind::Evict && p.c.policy == "full") {
        EXPECT_EQ(p.evicted, 0) << "full evicted entries";
    } else if (p.c.kind == Kind::Evict) {
        EXPECT_GT(p.evicted, 0) << "the evictor removed nothing";
        const size_t off = static_cast<size_t>(kPrompt) * p.n_vocab;
        float change = 0;
        for (size_t i = 0; i < p.uncompressed.size(); ++i)
            change = std::max(change, std::fabs(p.uncompressed[i] - p.cpp[off + i]));
        EXPECT_GT(change, 0.01f) << "eviction did not change the decode logits: the test would not see a wrong mask";
    }
    if (p.c.greedy) {
        std::istringstream line(suite.greedy_lines().at(static_cast<size_t>(p.greedy_line)));
        std::vector<int32_t> ref;
        for (int32_t id; line >> id;) ref.push_back(id);
        EXPECT_EQ(p.greedy, ref) << "greedy generations differ";
    }
}

// One test per group: each starts the reference once for all its cases.
TEST(Parity, Variants) {  // llama MHA/GQA, llama3 and linear RoPE scaling, qwen2, qwen3, tied,
                          // gpt-oss, gemma3, gemma2, phi3, MoE; F32
    for (const Case& c : variant_cases()) check_case(c);
}

TEST(Parity, BundledModel) {  // models/kvec-tiny.gguf, when present
    const std::vector<Case> cases = bundled_cases();
    if (cases.empty()) GTEST_SKIP() << kBundled << " is not in this checkout";
    for (const Case& c : cases) check_case(c);
}

TEST(Parity, TensorTypes) {  // every weight type on the llama GQA model
    for (const Case& c : type_cases()) check_case(c);
}

TEST(Parity, Eviction) {  // one-shot, chunked-prefill and decode-time eviction vs --kv-visible
    for (const Case& c : eviction_cases())
        if (c.group == "Eviction") check_case(c);
}

TEST(Parity, Policies) {  // every policy x {one-shot, chunked, decode-time} vs --kv-visible; budgets
    for (const Case& c : policy_cases()) check_case(c);
}

TEST(Parity, Observations) {  // window means, column sums, last row vs attn-stats
    for (const Case& c : eviction_cases())
        if (c.group == "Observations") check_case(c);
}

// A score-ranked policy's one-shot selection follows from scores the PyTorch reference computes on
// the same model and prompt: per layer and KV head, the top B - w prefix entries by score(l, h, j)
// plus the window. H2O and TOVA rank the reference's column sums / last query's row, averaged over
// each KV head's query heads; KeyDiff ranks minus the cosine of each key to the mean key. Scores
// within 1e-5 of the selection boundary may go either way (both sides accumulate in float).
void expect_top_selection(const Prepared& policy_case, int64_t window, int n_layer, int n_head_kv,
                          const std::function<double(int, int, int)>& score_of) {
    const int64_t k = kPolicyBudget - window;  // prefix entries kept
    const int n_prefix = kPrompt - static_cast<int>(window);
    for (int l = 0; l < n_layer; ++l) {
        for (int h = 0; h < n_head_kv; ++h) {
            SCOPED_TRACE(fmt::format("layer {} head {}", l, h));
            std::vector<double> score(static_cast<size_t>(n_prefix));  // [N - w]
            for (int j = 0; j < n_prefix; ++j) score[static_cast<size_t>(j)] = score_of(l, h, j);
            std::vector<double> sorted = score;
            std::sort(sorted.begin(), sorted.end(), std::greater<>());
            const double boundary = sorted[static_cast<size_t>(k - 1)];
            const auto& kept = policy_case.kept[static_cast<size_t>(l * n_head_kv + h)];
            const std::set<int32_t> kept_set(kept.begin(), kept.end());
            ASSERT_EQ(kept.size(), static_cast<size_t>(kPolicyBudget));
            for (int j = n_prefix; j < kPrompt; ++j) {
                EXPECT_TRUE(kept_set.count(j)) << "window entry " << j;
            }
            for (int j = 0; j < n_prefix; ++j) {
                const double sj = score[static_cast<size_t>(j)];
                if (sj > boundary + 1e-5) {
                    EXPECT_TRUE(kept_set.count(j)) << "position " << j << " score " << sj;
                } else if (sj < boundary - 1e-5) {
                    EXPECT_FALSE(kept_set.count(j)) << "position " << j << " score " << sj;
                }
            }
        }
    }
}

// The reference's statistic `kind` of position j, averaged over the query heads of KV head h (the
// group mean), or over every query head of the layer when layer_scope (TOVA's default scope).
void expect_selection_from_reference(const Prepared& policy_case, const std::vector<float>& stats, int kind,
                                     int64_t window, int n_layer, int n_head, int n_head_kv, bool layer_scope = false) {
    const int G = n_head / n_head_kv;
    expect_top_selection(policy_case, window, n_layer, n_head_kv, [&](int l, int h, int j) {
        const int first = layer_scope ? 0 : h * G, heads = layer_scope ? n_head : G;
        double s = 0.0;
        for (int q = first; q < first + heads; ++q) {
            s += stats[((static_cast<size_t>(l) * n_head + q) * 3 + kind) * kPrompt + static_cast<size_t>(j)] / heads;
        }
        return s;
    });
}

TEST(Parity, PolicyScores) {  // H2O / TOVA / KeyDiff selections vs the reference's column sums / last row / keys
    Suite& suite = Suite::get();
    ASSERT_TRUE(suite.error().empty()) << suite.error();
    const Prepared& obs = suite["observations"];
    const auto stats = read_f32(obs.ref_out);  // [L, n_head, 3, kPrompt]
    const RandomModelSpec spec = parity_spec();
    ASSERT_EQ(stats.size(), static_cast<size_t>(spec.n_layer) * spec.n_head * 3 * kPrompt);
    {
        SCOPED_TRACE("h2o");
        expect_selection_from_reference(suite["policy_h2o_one_shot"], stats, 0, 4, spec.n_layer, spec.n_head,
                                        spec.n_head_kv);
    }
    {
        SCOPED_TRACE("tova");
        expect_selection_from_reference(suite["policy_tova_one_shot"], stats, 2, 1, spec.n_layer, spec.n_head,
                                        spec.n_head_kv, /*layer_scope=*/true);
    }
    {
        // KeyDiff needs no attention: the reference's scores come from its own post-RoPE keys.
        SCOPED_TRACE("keydiff");
        const Prepared& kd = suite["policy_keydiff_one_shot"];
        const auto seq = sequence(kPrompt + kContinue);
        const std::vector<int32_t> prompt(seq.begin(), seq.begin() + kPrompt);
        const std::string out = temp_path("keydiff.ref.f32");
        const std::string err = temp_path("keydiff.ref.err");
        const std::string cmd = fmt::format(
            "cd '{}' && OMP_NUM_THREADS=2 PYTHONPATH='{}/python' /usr/bin/python3 -m kvec_ref.cli keydiff-scores "
            "--model '{}' --tokens {} --out '{}' 2> '{}'",
            KVEC_SOURCE_DIR, KVEC_SOURCE_DIR, kd.model_path, join(prompt), out, err);
        ASSERT_EQ(std::system(cmd.c_str()), 0) << "the reference failed; see " << err;
        const auto scores = read_f32(out);  // [L, H_kv, kPrompt]
        ASSERT_EQ(scores.size(), static_cast<size_t>(spec.n_layer) * spec.n_head_kv * kPrompt);
        expect_top_selection(kd, 4, spec.n_layer, spec.n_head_kv, [&](int l, int h, int j) {
            return static_cast<double>(scores[(static_cast<size_t>(l) * spec.n_head_kv + h) * kPrompt + j]);
        });
    }
}

// StreamingLLM with re-rotation. The reference cannot express moved keys with a mask, so it
// replays the schedule (steps, their positions, what each eviction kept and where it moved it)
// through its incremental cache, moving keys with its own RoPE (rerotation_ref.py).
class RerotationRecorder : public Evictor {
public:
    explicit RerotationRecorder(Evictor& inner) : inner_(inner) {}
    struct Step {
        std::vector<int32_t> tokens, positions, keep_from, keep_to;
    };
    ObservationRequest request() const override { return inner_.request(); }
    void begin_sequence(int32_t n_prompt) override { inner_.begin_sequence(n_prompt); }
    bool on_prefill(const LayerView& v, KeepLists& keep) override {
        if (v.layer == 0) {  // a new prefill chunk
            Step st;
            for (int32_t p = v.chunk_begin; p < v.chunk_end; ++p) {
                st.positions.push_back(p);
                st.tokens.push_back(v.tokens[static_cast<size_t>(p)]);
            }
            steps.push_back(st);
        }
        return inner_.on_prefill(v, keep);
    }
    bool on_decode(const LayerView& v, KeepLists& keep) override { return inner_.on_decode(v, keep); }
    bool reposition(const LayerView& v, const KeepLists& keep, Repositioning& out) override {
        const bool moved = inner_.reposition(v, keep, out);
        if (moved && v.layer == 0) {
            Step& st = steps.back();
            for (size_t i = 0; i < keep[0].size(); ++i) st.keep_from.push_back(v.heads[0].positions[keep[0][i]]);
            st.keep_to = out.positions[0];
            for (int h = 1; h < v.n_head_kv; ++h) {  // StreamingLLM: the same set in every head
                EXPECT_EQ(out.positions[static_cast<size_t>(h)], out.positions[0]);
            }
        }
        return moved;
    }
    std::vector<Step> steps;

private:
    Evictor& inner_;
};

std::string json_list(const std::vector<int32_t>& v) { return "[" + join(v) + "]"; }

TEST(Parity, StreamingRerotation) {
    if (std::system("/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1") != 0) {
        GTEST_SKIP() << "/usr/bin/python3 with torch and numpy is not available (Debian: python3-torch)";
    }
    struct Run {
        std::string name, spec;
        int chunk = 512;
        std::vector<float> cpp;  // [kPrompt + kContinue, n_vocab]
        std::string out;
        int repositioned = 0;
        int32_t n_past_end = 0;
    };
    const std::string base = fmt::format("streaming:budget={},sinks=4,rerotate=true", kPolicyBudget);
    std::vector<Run> runs(3);
    runs[0].name = "rerotate_one_shot", runs[0].spec = base, runs[0].chunk = 512;
    runs[1].name = "rerotate_chunked", runs[1].spec = base + ",chunked=true", runs[1].chunk = kPolicyChunk;
    runs[2].name = "rerotate_decode", runs[2].spec = base + ",decode=1", runs[2].chunk = 512;
    const std::string model_path = write_model(parity_spec(), "rerotation.gguf");
    const auto model = Model::load(model_path);
    const auto seq = sequence(kPrompt + kContinue);
    const std::vector<int32_t> prompt(seq.begin(), seq.begin() + kPrompt);
    std::string jobs = "[";
    for (Run& r : runs) {
        auto policy = policy::make_policy(r.spec);
        RerotationRecorder rec(*policy);
        Session s(*model, exact(r.chunk));
        s.set_evictor(&rec);
        const auto pl = s.prefill(prompt, true);
        r.cpp.assign(pl.begin(), pl.end());
        for (int i = kPrompt; i < kPrompt + kContinue; ++i) {
            const int32_t token = seq[static_cast<size_t>(i)];
            rec.steps.push_back({{token}, {s.n_past()}, {}, {}});
            const auto l = s.decode(token);
            r.cpp.insert(r.cpp.end(), l.begin(), l.end());
        }
        r.repositioned = static_cast<int>(s.eviction_stats().repositioned);
        r.n_past_end = s.n_past();
        r.out = temp_path(r.name + ".ref.f32");
        jobs += fmt::format("{}{{\"model\": \"{}\", \"out\": \"{}\", \"steps\": [", jobs.size() > 1 ? ", " : "",
                            model_path, r.out);
        for (size_t i = 0; i < rec.steps.size(); ++i) {
            const auto& st = rec.steps[i];
            jobs += fmt::format("{}{{\"tokens\": {}, \"positions\": {}", i > 0 ? ", " : "", json_list(st.tokens),
                                json_list(st.positions));
            if (!st.keep_from.empty()) {
                jobs += fmt::format(", \"keep_from\": {}, \"keep_to\": {}", json_list(st.keep_from),
                                    json_list(st.keep_to));
            }
            jobs += "}";
        }
        jobs += "]}";
    }
    jobs += "]";
    const std::string jobs_path = temp_path("rerotation-jobs.json");
    const std::string err_path = temp_path("rerotation-stderr.txt");
    std::ofstream(jobs_path) << jobs;
    const std::string cmd = fmt::format(
        "cd '{}' && OMP_NUM_THREADS=2 PYTHONPATH='{}/python' /usr/bin/python3 tests/parity/rerotation_ref.py '{}' 2> '{}'",
        KVEC_SOURCE_DIR, KVEC_SOURCE_DIR, jobs_path, err_path);
    if (std::system(cmd.c_str()) != 0) {
        std::ifstream e(err_path);
        std::stringstream ss;
        ss << e.rdbuf();
        FAIL() << "the reference replay failed: " << ss.str();
    }
    // One-shot: one re-rotation (after the prompt), decoding continues at B. Chunked: one per
    // chunk that overflowed the budget (chunks 2 and 3). Decode: the prompt's, then every step's.
    EXPECT_EQ(runs[0].repositioned, 1);
    EXPECT_EQ(runs[0].n_past_end, kPolicyBudget + kContinue);
    EXPECT_EQ(runs[1].repositioned, 2);
    EXPECT_EQ(runs[2].repositioned, 1 + kContinue);
    EXPECT_EQ(runs[2].n_past_end, kPolicyBudget);
    for (const Run& r : runs) {
        SCOPED_TRACE(r.name);
        Prepared p;
        p.c.name = r.name;
        p.n_vocab = model->config().n_vocab;
        p.cpp = r.cpp;
        p.ref_out = r.out;
        compare_logits(p);
    }
}

}  // namespace
}  // namespace kvec
