// gpt-oss: hyper-parameters and tensors as llama.cpp reads them (YaRN, the sliding window on the
// even layers, sinks, biases), the routing (top-k by logit, softmax over the chosen logits) and
// the biased experts with the clamped SwiGLU against a naive computation, the sinks acting on the
// logits, clear errors for bad files, chunked prefill and decoding against one prefill, and an
// eviction policy on the global layers. (Parity of the logits with the PyTorch reference:
// tests/parity, Parity.Variants gptoss; with llama.cpp: scripts/parity-vs-llama-cpp.sh --only
// gpt-oss. The sink, YaRN and swiglu_oai kernels: tests/tensor.)
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/moe.h"
#include "model/session.h"
#include "policy/registry.h"
#include "tensor/matmul.h"
#include "tensor/reference.h"
#include "test_helpers.h"
#include "util/error.h"
#include "util/rng.h"

namespace kvec {
namespace {

using namespace testing_helpers;

constexpr int kVocab = 512;

// The gpt-oss-test preset (2 layers: 0 sliding-window with window 32, 1 global; 8 experts, 4
// used; YaRN 32 of an original context of 128) with a small vocabulary.
RandomModelSpec gptoss_spec() {
    RandomModelSpec s = random_model_preset("gpt-oss-test");
    s.n_vocab = kVocab;
    s.seed = 6;
    return s;
}

const std::string& gptoss_path() {
    static const std::string p = write_model(gptoss_spec(), "gptoss.gguf");
    return p;
}

const Model& gptoss_model() {
    static const auto m = Model::load(gptoss_path());
    return *m;
}

std::vector<int32_t> tokens(int n) { return token_cycle(n, 37, 11, kVocab); }

std::vector<float> all_logits(const Model& m, int n) { return prefill_logits(m, tokens(n), f32_options()); }

TEST(GptOss, ReadsHyperParametersAndTensors) {
    const Model& m = gptoss_model();
    const ModelConfig& c = m.config();
    EXPECT_EQ(c.arch, Arch::GptOss);
    EXPECT_EQ(c.family, Family::GptOss);
    EXPECT_EQ(c.rope_mode, ops::RopeMode::Neox);
    EXPECT_EQ(c.sliding_window, 32);
    ASSERT_EQ(c.swa_layers.size(), 2u);
    EXPECT_TRUE(c.is_swa(0));  // il % 2 < 1, llama.cpp's pattern for gpt-oss
    EXPECT_FALSE(c.is_swa(1));
    EXPECT_TRUE(c.rope_yarn);
    EXPECT_FLOAT_EQ(c.rope_freq_scale, 1.0f / 32.0f);
    EXPECT_FLOAT_EQ(c.rope_freq_scale_swa, c.rope_freq_scale);  // YaRN on both layer kinds
    EXPECT_FLOAT_EQ(c.rope_freq_base_swa, c.rope_freq_base);
    EXPECT_EQ(c.n_ctx_orig, 128);
    EXPECT_EQ(c.n_expert, 8);
    EXPECT_EQ(c.n_expert_used, 4);
    EXPECT_EQ(c.n_ff_exp, 256);
    EXPECT_TRUE(c.expert_softmax_selected);
    EXPECT_FALSE(c.expert_weights_norm);
    EXPECT_EQ(c.head_dim, 64);
    EXPECT_FLOAT_EQ(c.attn_scale, 1.0f / 8.0f);
    const ModelWeights& w = m.weights();
    EXPECT_FALSE(w.tied_output);
    const LayerWeights& L = w.layers[1];
    EXPECT_EQ(L.attn_sinks.size(), 8u);
    EXPECT_EQ(L.bo.size(), 256u);
    EXPECT_EQ(L.bq.size(), 512u);
    EXPECT_EQ(L.gate_inp_b.size(), 8u);
    EXPECT_EQ(L.gate_exps_b.size(), 8u * 256u);
    EXPECT_EQ(L.up_exps_b.size(), 8u * 256u);
    EXPECT_EQ(L.down_exps_b.size(), 8u * 256u);
    EXPECT_EQ(L.ffn_norm.size(), 256u);  // post_attention_norm.weight
    // YaRN as the plain rotation: the model's divisors, freq_scale 1, the magnitude 1 + 0.1 ln 32.
    const ops::RopeParams r = rope_params(m), rs = rope_params(m, 0, true);
    EXPECT_EQ(r.freq_factors, w.rope_yarn.data());
    EXPECT_EQ(rs.freq_factors, w.rope_yarn_swa.data());
    EXPECT_FLOAT_EQ(r.freq_scale, 1.0f);
    EXPECT_NEAR(r.attn_factor, 1.0f + 0.1f * std::log(32.0f), 1e-6f);
    EXPECT_EQ(w.rope_yarn, ops::yarn_freq_factors(64, 150000.0f, {1.0f / 32.0f, 128}, nullptr));
    EXPECT_FLOAT_EQ(w.rope_yarn.front(), 1.0f);
    EXPECT_FLOAT_EQ(w.rope_yarn.back(), 32.0f);
}

// gpt-oss's routing (llama.cpp's SOFTMAX_WEIGHT): the n_used largest logits, their weights a
// softmax over those logits only (summing to 1), against a naive stable sort.
TEST(GptOss, RoutingIsTopKLogitsThenSoftmax) {
    Rng rng(3);
    for (const auto& [n, k] : {std::pair{8, 4}, {32, 4}, {128, 4}, {6, 1}, {5, 5}}) {
        for (int trial = 0; trial < 20; ++trial) {
            std::vector<float> logits(static_cast<size_t>(n));
            for (float& x : logits) x = static_cast<float>(3.0 * (rng.uniform() - 0.5));
            const moe::Routing r{n, k, false, true};
            std::vector<int32_t> experts(static_cast<size_t>(k));
            std::vector<float> weights(static_cast<size_t>(k));
            moe::route(logits.data(), r, experts.data(), weights.data());
            std::vector<int32_t> order(static_cast<size_t>(n));
            std::iota(order.begin(), order.end(), 0);
            std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
                return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
            });
            order.resize(static_cast<size_t>(k));
            ASSERT_EQ(experts, order);
            double sum = 0;
            for (int32_t e : order)
                sum += std::exp(static_cast<double>(logits[static_cast<size_t>(e)]));
            for (int i = 0; i < k; ++i) {
                const double want =
                    std::exp(static_cast<double>(
                        logits[static_cast<size_t>(order[static_cast<size_t>(i)])])) /
                    sum;
                EXPECT_NEAR(weights[static_cast<size_t>(i)], want, 1e-6 * want);
            }
        }
    }
}

// moe::ffn with gpt-oss's biases and swiglu_oai (the model's own layer 1 weights, F32) against
// a naive per-token computation with the scalar references, for decode, a small batch and a
// prefill chunk; with gate/up outputs of std ~3 the clamp at 7 acts.
TEST(GptOss, BiasedExpertsWithClampedSwigluMatchNaive) {
    const Model& m = gptoss_model();
    const ModelConfig& c = m.config();
    const LayerWeights& L = m.weights().layers[1];
    const int64_t E = c.n_embd, F = c.n_ff_exp;
    moe::Experts ex{&L.ffn_gate_inp, &L.gate_exps, &L.up_exps, &L.down_exps, F};
    ex.router_b = L.gate_inp_b.data();
    ex.gate_b = L.gate_exps_b.data();
    ex.up_b = L.up_exps_b.data();
    ex.down_b = L.down_exps_b.data();
    ex.swiglu_oai = true;
    const moe::Routing r{c.n_expert, c.n_expert_used, false, true};
    Rng rng(9);
    int64_t clamped = 0, total = 0;
    for (const int64_t T : {1, 5, 40}) {
        std::vector<float> x(static_cast<size_t>(T * E));  // [T, E]
        for (float& v : x) v = static_cast<float>(2.0 * (rng.uniform() - 0.5) * std::sqrt(3.0));
        moe::Scratch scratch;
        std::vector<float> out(static_cast<size_t>(T * E));
        moe::ffn(x.data(), T, ex, r, scratch, out.data());
        for (int64_t t = 0; t < T; ++t) {
            const float* xt = x.data() + t * E;
            std::vector<float> logits(static_cast<size_t>(c.n_expert));
            ref::matmul(xt, 1, L.ffn_gate_inp, logits.data());
            for (int e = 0; e < c.n_expert; ++e)
                logits[static_cast<size_t>(e)] += L.gate_inp_b[static_cast<size_t>(e)];
            std::vector<int32_t> chosen(static_cast<size_t>(c.n_expert_used));
            std::vector<float> wt(chosen.size());
            moe::route(logits.data(), r, chosen.data(), wt.data());
            std::vector<double> want(static_cast<size_t>(E), 0.0);
            for (size_t k = 0; k < chosen.size(); ++k) {
                const int e = chosen[k];
                std::vector<float> g(static_cast<size_t>(F)), u(g.size()),
                    y(static_cast<size_t>(E));
                ref::matmul(xt, 1, moe::expert_matrix(L.gate_exps, e, F), g.data());
                ref::matmul(xt, 1, moe::expert_matrix(L.up_exps, e, F), u.data());
                for (int64_t j = 0; j < F; ++j) {
                    g[static_cast<size_t>(j)] += L.gate_exps_b[static_cast<size_t>(e * F + j)];
                    u[static_cast<size_t>(j)] += L.up_exps_b[static_cast<size_t>(e * F + j)];
                    clamped += std::fabs(u[static_cast<size_t>(j)]) > 7.0f ||
                               g[static_cast<size_t>(j)] > 7.0f;
                    ++total;
                }
                ref::swiglu_oai(g.data(), u.data(), g.data(), F, 1.702f, 7.0f);
                ref::matmul(g.data(), 1, moe::expert_matrix(L.down_exps, e, E), y.data());
                for (int64_t j = 0; j < E; ++j)
                    want[static_cast<size_t>(j)] +=
                        wt[k] *
                        (y[static_cast<size_t>(j)] + L.down_exps_b[static_cast<size_t>(e * E + j)]);
            }
            double worst = 0, scale = 0;
            for (int64_t j = 0; j < E; ++j) {
                worst = std::max(worst, std::fabs(out[static_cast<size_t>(t * E + j)] -
                                                  want[static_cast<size_t>(j)]));
                scale = std::max(scale, std::fabs(want[static_cast<size_t>(j)]));
            }
            ASSERT_LE(worst, 1e-5 * scale) << "T " << T << " token " << t;
        }
    }
    EXPECT_GT(clamped, 0) << "the clamp never acted";
    EXPECT_LT(clamped, total / 5);
}

// The sinks act: zeroing them (a rewritten file; the preset's are ~N(0.5, 1.5)) changes the
// logits.
TEST(GptOss, SinksChangeTheLogits) {
    const int n = 40;
    const std::vector<float> base = all_logits(gptoss_model(), n);
    const std::string zero = temp_path("gptoss-zero-sinks.gguf");
    Rewrite r;
    for (int l = 0; l < 2; ++l)
        r.reshape.push_back({fmt::format("blk.{}.attn_sinks.weight", l), {8}});
    rewrite_gguf(gptoss_path(), zero, r);
    const auto m = Model::load(zero);
    const std::vector<float> other = all_logits(*m, n);
    EXPECT_GT(max_abs_diff(base, other), 0.05f);
}

TEST(GptOss, BadFilesGetOneClearError) {
    auto rewritten = [&](const std::string& name, const Rewrite& r) {
        const std::string path = temp_path(name);
        rewrite_gguf(gptoss_path(), path, r);
        return load_error(path);
    };
    Rewrite sinks;
    sinks.drop_tensor = [](const std::string& n) {
        return n.find("attn_sinks") != std::string::npos;
    };
    std::string e = rewritten("gptoss-no-sinks.gguf", sinks);
    EXPECT_NE(
        e.find("(gpt-oss) is missing 2 tensors: blk.0.attn_sinks.weight, blk.1.attn_sinks.weight"),
        std::string::npos)
        << e;

    Rewrite count;
    count.set_metadata.push_back({"gpt-oss.expert_count", gguf::Value::from_u32(6)});
    e = rewritten("gptoss-count.gguf", count);
    EXPECT_NE(e.find("gpt-oss.expert_count = 6 disagrees with tensor 'blk.0.ffn_gate_inp.weight', "
                     "which holds 8 experts"),
              std::string::npos)
        << e;

    Rewrite bias;
    bias.reshape.push_back({"blk.1.ffn_down_exps.bias", {256, 7}});
    e = rewritten("gptoss-bias.gguf", bias);
    EXPECT_NE(e.find("disagrees with tensor 'blk.1.ffn_down_exps.bias', which holds 7 experts"),
              std::string::npos)
        << e;

    Rewrite window;
    window.drop_key = [](const std::string& k) { return k == "gpt-oss.attention.sliding_window"; };
    e = rewritten("gptoss-window.gguf", window);
    EXPECT_NE(e.find("missing metadata key 'gpt-oss.attention.sliding_window'"), std::string::npos)
        << e;

    Rewrite yarn;
    yarn.set_metadata.push_back({"gpt-oss.rope.scaling.factor", gguf::Value::from_f32(-2.0f)});
    e = rewritten("gptoss-yarn.gguf", yarn);
    EXPECT_NE(e.find("YaRN RoPE scaling needs a finite gpt-oss.rope.scaling.factor > 0"),
              std::string::npos)
        << e;

    Rewrite bo;
    bo.drop_tensor = [](const std::string& n) { return n == "blk.0.attn_output.bias"; };
    e = rewritten("gptoss-bo.gguf", bo);
    EXPECT_NE(e.find("is missing 1 tensor: blk.0.attn_output.bias"), std::string::npos) << e;

    RandomModelSpec tied = gptoss_spec();
    tied.tied = true;
    EXPECT_THROW(write_random_model(tied, temp_path("x.gguf")), Error);
}

// Chunked prefill and decoding (the window moving, sinks in every kernel call, other expert
// groups per chunk) give the logits of one prefill; layer 0 keeps only its window.
TEST(GptOss, ChunksAndDecodeMatchOnePrefill) {
    const int n = 90, n_prompt = 45;
    const std::vector<float> all = all_logits(gptoss_model(), n);
    const auto tk = tokens(n);
    Session s(gptoss_model(), f32_options(8));
    s.prefill(std::span<const int32_t>(tk.data(), n_prompt));
    EXPECT_EQ(s.kv_cache().size(0, 0), 31);
    EXPECT_EQ(s.kv_cache().size(1, 0), n_prompt);
    float worst = 0, spread = 0;
    for (int t = n_prompt; t < n; ++t) {
        const auto d = s.decode(tk[static_cast<size_t>(t)]);
        for (size_t i = 0; i < kVocab; ++i) {
            worst = std::max(worst, std::fabs(d[i] - all[t * kVocab + i]));
            spread = std::max(spread, std::fabs(all[t * kVocab + i]));
        }
    }
    EXPECT_LT(worst, 1e-4f * spread);
}

// An eviction policy compresses the global layer to its budget and leaves the sliding-window
// layer (its window) alone; the sinks stay part of attention, never entries.
TEST(GptOss, PolicyActsOnTheGlobalLayer) {
    const int n = 64, budget = 16;
    auto policy = policy::make_policy(fmt::format("snapkv:budget={},window=4", budget));
    Session s(gptoss_model(), f32_options());
    s.set_evictor(policy.get());
    const auto p = s.prefill(tokens(n));
    for (size_t i = 0; i < kVocab; ++i) ASSERT_TRUE(std::isfinite(p[i]));
    for (int h = 0; h < gptoss_model().config().n_head_kv; ++h) {
        EXPECT_EQ(s.kv_cache().size(1, h), budget);
        EXPECT_EQ(s.kv_cache().size(0, h), 31);
    }
    const auto d = s.decode(7);
    for (size_t i = 0; i < kVocab; ++i) ASSERT_TRUE(std::isfinite(d[i]));
}

}  // namespace
}  // namespace kvec
