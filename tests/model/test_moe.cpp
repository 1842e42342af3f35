// Mixture of experts: the routing (moe::route) against a naive sort of the softmax, the grouped
// expert FFN (moe::ffn) against a naive dense computation that runs every expert on every token,
// the hyper-parameters and tensors of qwen3moe / qwen2moe / llama-with-experts as llama.cpp
// reads them, clear errors for bad files, chunked prefill and decoding against one prefill, and
// an eviction policy (K-VEC) on a MoE model. (Parity of the logits with the PyTorch reference:
// tests/parity, Parity.Variants; with llama.cpp: scripts/parity-vs-llama-cpp.sh.)
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/moe.h"
#include "model/session.h"
#include "policy/registry.h"
#include "quant/quant.h"
#include "tensor/matmul.h"
#include "tensor/reference.h"
#include "test_helpers.h"
#include "util/error.h"
#include "util/rng.h"

namespace kvec {
namespace {

using namespace testing_helpers;

std::vector<float> random_values(int64_t n, uint64_t seed, float std = 1.0f) {
    std::vector<float> v(static_cast<size_t>(n));
    Rng rng(seed);
    for (float& x : v) {  // Irwin-Hall: 4 uniforms, variance 1/3 -> rescaled to std
        const double u = rng.uniform() + rng.uniform() + rng.uniform() + rng.uniform() - 2.0;
        x = static_cast<float>(u * std::sqrt(3.0)) * std;
    }
    return v;
}

// The naive routing: softmax in double, every expert sorted by probability (stable: equal
// probabilities keep the lower index first), the first k; renormalised when asked.
void naive_route(const float* logits, int n, int k, bool norm, std::vector<int32_t>& experts,
                 std::vector<double>& weights) {
    std::vector<double> p(static_cast<size_t>(n));
    double max = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int e = 0; e < n; ++e) max = std::max(max, static_cast<double>(logits[e]));
    for (int e = 0; e < n; ++e) sum += p[static_cast<size_t>(e)] = std::exp(logits[e] - max);
    std::vector<int32_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)];
    });
    experts.assign(order.begin(), order.begin() + k);
    weights.clear();
    double chosen = 0;
    for (int32_t e : experts) chosen += p[static_cast<size_t>(e)] / sum;
    for (int32_t e : experts)
        weights.push_back(p[static_cast<size_t>(e)] / sum / (norm ? chosen : 1.0));
}

TEST(Moe, RoutingMatchesSortedSoftmax) {
    for (const bool norm : {true, false}) {
        for (const auto& [n, k] : {std::pair{8, 2}, {16, 4}, {128, 8}, {5, 5}, {60, 1}}) {
            for (uint64_t seed = 1; seed <= 20; ++seed) {
                std::vector<float> logits = random_values(n, seed * 31 + n, 2.0f);
                if (seed == 1)
                    logits[static_cast<size_t>(n / 2)] = logits[0];  // a tie: lower index first
                const moe::Routing r{n, k, norm};
                std::vector<int32_t> experts(static_cast<size_t>(k));
                std::vector<float> weights(static_cast<size_t>(k));
                moe::route(logits.data(), r, experts.data(), weights.data());
                std::vector<int32_t> want;
                std::vector<double> want_w;
                naive_route(logits.data(), n, k, norm, want, want_w);
                ASSERT_EQ(experts, want) << "n " << n << " k " << k << " seed " << seed;
                double sum = 0;
                for (int i = 0; i < k; ++i) {
                    EXPECT_NEAR(weights[static_cast<size_t>(i)], want_w[static_cast<size_t>(i)],
                                1e-6 * want_w[static_cast<size_t>(i)] + 1e-9);
                    sum += weights[static_cast<size_t>(i)];
                }
                if (norm) {
                    EXPECT_NEAR(sum, 1.0, 1e-6);
                }
            }
        }
    }
}

// Random experts held as 3-D tensors (F32 or quantised) and a router.
struct ExpertSet {
    int64_t E, F;
    int X;
    GgmlType type;
    std::vector<float> router_f;                // [X, E]
    std::vector<uint8_t> gate_q, up_q, down_q;  // [X * F rows], [X * F rows], [X * E rows]
    WeightView router, gate, up, down;

    ExpertSet(int64_t e, int64_t f, int x, GgmlType t, uint64_t seed) : E(e), F(f), X(x), type(t) {
        router_f = random_values(X * E, seed, 1.0f / std::sqrt(static_cast<float>(E)));
        router = make_weight_view("router", GgmlType::F32, router_f.data(), E, X);
        gate_q = quantized(E, X * F, seed + 1, 1.0f / std::sqrt(static_cast<float>(E)));
        up_q = quantized(E, X * F, seed + 2, 1.0f / std::sqrt(static_cast<float>(E)));
        down_q = quantized(F, X * E, seed + 3, 1.0f / std::sqrt(static_cast<float>(F)));
        gate = make_weight_view("gate", type, gate_q.data(), E, X * F);
        up = make_weight_view("up", type, up_q.data(), E, X * F);
        down = make_weight_view("down", type, down_q.data(), F, X * E);
    }

    std::vector<uint8_t> quantized(int64_t n_in, int64_t rows, uint64_t seed, float std) const {
        const std::vector<float> v = random_values(n_in * rows, seed, std);
        const size_t rb = ggml_row_size(type, n_in);
        std::vector<uint8_t> out(rb * static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r)
            quant::quantize_row(type, v.data() + r * n_in, out.data() + static_cast<size_t>(r) * rb,
                                n_in);
        return out;
    }

    moe::Experts experts() const { return {&router, &gate, &up, &down, F}; }
};

// Every expert on every token with the scalar matmul, weighted by the naive routing (0 for the
// experts a token does not select): [T, E].
std::vector<double> dense_reference(const ExpertSet& s, const std::vector<float>& x, int64_t T,
                                    int k, bool norm) {
    std::vector<float> logits(static_cast<size_t>(T * s.X));  // [T, X]
    ref::matmul(x.data(), T, s.router, logits.data());
    std::vector<double> out(static_cast<size_t>(T * s.E), 0.0);
    std::vector<float> g(static_cast<size_t>(T * s.F)), u(g.size()),
        y(static_cast<size_t>(T * s.E));
    std::vector<std::vector<double>> w(static_cast<size_t>(T),
                                       std::vector<double>(static_cast<size_t>(s.X), 0.0));
    for (int64_t t = 0; t < T; ++t) {
        std::vector<int32_t> ex;
        std::vector<double> wt;
        naive_route(logits.data() + t * s.X, s.X, k, norm, ex, wt);
        for (size_t i = 0; i < ex.size(); ++i)
            w[static_cast<size_t>(t)][static_cast<size_t>(ex[i])] = wt[i];
    }
    for (int e = 0; e < s.X; ++e) {
        ref::matmul(x.data(), T, moe::expert_matrix(s.gate, e, s.F), g.data());
        ref::matmul(x.data(), T, moe::expert_matrix(s.up, e, s.F), u.data());
        ref::swiglu(g.data(), u.data(), g.data(), T * s.F);
        ref::matmul(g.data(), T, moe::expert_matrix(s.down, e, s.E), y.data());
        for (int64_t t = 0; t < T; ++t) {
            for (int64_t j = 0; j < s.E; ++j)
                out[static_cast<size_t>(t * s.E + j)] +=
                    w[static_cast<size_t>(t)][static_cast<size_t>(e)] *
                    y[static_cast<size_t>(t * s.E + j)];
        }
    }
    return out;
}

// moe::ffn (tokens grouped by expert, the production matmul kernels on each expert's slice)
// against the dense reference, for decode (1 token), small batches and a prefill chunk, F32 and
// quantised experts, in both matmul precisions.
TEST(Moe, FfnMatchesDenseComputation) {
    const MatmulPrecision saved = matmul_precision();
    for (const GgmlType type : {GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_K}) {
        const ExpertSet s(256, 256, 8, type, 100 + static_cast<uint64_t>(type));
        for (const auto& [k, norm] : {std::pair{2, true}, {3, false}}) {
            const moe::Routing r{s.X, k, norm};
            for (const int64_t T : {1, 4, 40}) {
                const std::vector<float> x = random_values(T * s.E, 7 + static_cast<uint64_t>(T));
                const std::vector<double> want = dense_reference(s, x, T, k, norm);
                double scale = 0;
                for (double v : want) scale = std::max(scale, std::fabs(v));
                for (const MatmulPrecision precision :
                     {MatmulPrecision::Exact, MatmulPrecision::Fast}) {
                    set_matmul_precision(precision);
                    moe::Scratch scratch;
                    std::vector<float> out(static_cast<size_t>(T * s.E), -1.0f);
                    moe::ffn(x.data(), T, s.experts(), r, scratch, out.data());
                    double worst = 0;
                    for (size_t i = 0; i < out.size(); ++i)
                        worst = std::max(worst, std::fabs(out[i] - want[i]));
                    // Exact: float32 against double; Fast: int8 activations (int8_gemm.h's bound).
                    const double tol =
                        precision == MatmulPrecision::Exact || type == GgmlType::F32 ? 1e-5 : 2e-2;
                    EXPECT_LE(worst, tol * scale)
                        << ggml_type_name(type) << " k " << k << " T " << T
                        << (precision == MatmulPrecision::Exact ? " exact" : " fast");
                }
            }
        }
    }
    set_matmul_precision(saved);
}

// Only the selected experts' rows are read: the experts no token selects hold NaN, and the
// result stays finite and equal to the dense computation over the selected ones.
TEST(Moe, UnselectedExpertsAreNeverRead) {
    const int64_t T = 3;
    ExpertSet s(64, 32, 16, GgmlType::F32, 9);
    const std::vector<float> x = random_values(T * s.E, 11);
    const int k = 2;
    const std::vector<double> want = dense_reference(s, x, T, k, true);
    std::vector<float> logits(static_cast<size_t>(T * s.X));
    ref::matmul(x.data(), T, s.router, logits.data());
    std::vector<bool> used(static_cast<size_t>(s.X), false);
    for (int64_t t = 0; t < T; ++t) {
        std::vector<int32_t> ex;
        std::vector<double> wt;
        naive_route(logits.data() + t * s.X, s.X, k, true, ex, wt);
        for (int32_t e : ex) used[static_cast<size_t>(e)] = true;
    }
    const float nan = std::numeric_limits<float>::quiet_NaN();
    int poisoned = 0;
    for (int e = 0; e < s.X; ++e) {
        if (used[static_cast<size_t>(e)]) continue;
        ++poisoned;
        auto* g = reinterpret_cast<float*>(s.gate_q.data()) + e * s.F * s.E;
        auto* u = reinterpret_cast<float*>(s.up_q.data()) + e * s.F * s.E;
        auto* d = reinterpret_cast<float*>(s.down_q.data()) + e * s.E * s.F;
        std::fill(g, g + s.F * s.E, nan);
        std::fill(u, u + s.F * s.E, nan);
        std::fill(d, d + s.E * s.F, nan);
    }
    ASSERT_GE(poisoned, 10);
    moe::Scratch scratch;
    std::vector<float> out(static_cast<size_t>(T * s.E));
    moe::ffn(x.data(), T, s.experts(), {s.X, k, true}, scratch, out.data());
    for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_TRUE(std::isfinite(out[i])) << i;
        EXPECT_NEAR(out[i], want[i], 1e-4);
    }
}

RandomModelSpec moe_spec(const std::string& preset) {
    RandomModelSpec s = random_model_preset(preset);
    s.n_vocab = 512;
    s.n_ctx = 512;
    s.seed = 4;
    return s;
}

const Model& qwen3moe_model() {
    static const auto m = Model::load(write_model(moe_spec("qwen3moe-test"), "qwen3moe.gguf"));
    return *m;
}


TEST(Moe, ReadsHyperParametersAsLlamaCpp) {
    const ModelConfig& q3 = qwen3moe_model().config();
    EXPECT_EQ(q3.arch, Arch::Qwen3Moe);
    EXPECT_EQ(q3.family, Family::Moe);
    EXPECT_EQ(q3.rope_mode, ops::RopeMode::Neox);
    EXPECT_EQ(q3.n_expert, 16);
    EXPECT_EQ(q3.n_expert_used, 4);
    EXPECT_EQ(q3.n_ff_exp, 256);
    EXPECT_EQ(q3.n_ff_shexp, 0);
    EXPECT_TRUE(q3.expert_weights_norm);
    const LayerWeights& L = qwen3moe_model().weights().layers[1];
    EXPECT_EQ(L.q_norm.size(), 128u);
    EXPECT_EQ(L.ffn_gate_inp.type, GgmlType::F32);
    EXPECT_EQ(L.gate_exps.n_out, 16 * 256);
    EXPECT_EQ(L.down_exps.n_in, 256);
    EXPECT_TRUE(L.w_gate.empty());

    const auto q2 = Model::load(write_model(moe_spec("qwen2moe-test"), "qwen2moe.gguf"));
    EXPECT_EQ(q2->config().arch, Arch::Qwen2Moe);
    EXPECT_EQ(q2->config().family, Family::Moe);
    EXPECT_FALSE(q2->config().expert_weights_norm);
    EXPECT_EQ(q2->config().n_ff_shexp, 512);
    EXPECT_EQ(q2->weights().layers[0].bq.size(), 256u);
    EXPECT_EQ(q2->weights().layers[0].gate_inp_shexp.size(), 256u);
    EXPECT_EQ(q2->weights().layers[0].down_shexp.n_in, 512);

    const auto mx = Model::load(write_model(moe_spec("mixtral-test"), "mixtral.gguf"));
    EXPECT_EQ(mx->config().arch, Arch::Llama);
    EXPECT_EQ(mx->config().family, Family::Moe);
    EXPECT_EQ(mx->config().rope_mode, ops::RopeMode::Norm);
    EXPECT_TRUE(mx->config().expert_weights_norm);
    EXPECT_EQ(mx->config().n_ff_exp, mx->config().n_ff);
    EXPECT_NE(mx->summary().find("8 experts (2 used) of ff 256"), std::string::npos)
        << mx->summary();
}

TEST(Moe, BadFilesGetOneClearError) {
    const std::string good = write_model(moe_spec("qwen3moe-test"), "moe-good.gguf");
    auto rewritten = [&](const std::string& name, const Rewrite& r) {
        const std::string path = temp_path(name);
        rewrite_gguf(good, path, r);
        return load_error(path);
    };
    Rewrite count;
    count.set_metadata.push_back({"qwen3moe.expert_count", gguf::Value::from_u32(12)});
    std::string e = rewritten("moe-count.gguf", count);
    EXPECT_NE(e.find("qwen3moe.expert_count = 12 disagrees with tensor "
                     "'blk.0.ffn_gate_inp.weight', which holds 16 experts"),
              std::string::npos)
        << e;

    Rewrite used;
    used.set_metadata.push_back({"qwen3moe.expert_used_count", gguf::Value::from_u32(17)});
    e = rewritten("moe-used.gguf", used);
    EXPECT_NE(e.find("expert_used_count = 17 is more than the 16 experts"), std::string::npos) << e;

    Rewrite missing;
    missing.drop_tensor = [](const std::string& n) { return n == "blk.1.ffn_up_exps.weight"; };
    e = rewritten("moe-missing.gguf", missing);
    EXPECT_NE(e.find("missing 1 tensor: blk.1.ffn_up_exps.weight"), std::string::npos) << e;

    Rewrite shape;
    shape.reshape.push_back({"blk.0.ffn_down_exps.weight", {256, 128, 16}});
    e = rewritten("moe-shape.gguf", shape);
    EXPECT_NE(
        e.find("'blk.0.ffn_down_exps.weight' has shape [256, 128, 16], expected [256, 256, 16]"),
        std::string::npos)
        << e;

    Rewrite experts_dim;  // the experts' dimension of a 3-D tensor disagrees
    experts_dim.reshape.push_back({"blk.1.ffn_gate_exps.weight", {256, 256, 8}});
    e = rewritten("moe-experts-dim.gguf", experts_dim);
    EXPECT_NE(e.find("disagrees with tensor 'blk.1.ffn_gate_exps.weight', which holds 8 experts"),
              std::string::npos)
        << e;

    Rewrite no_count;
    no_count.set_metadata.push_back({"qwen3.expert_count", gguf::Value::from_u32(4)});
    const std::string dense = write_model(tiny_spec("qwen3"), "moe-dense.gguf");
    rewrite_gguf(dense, temp_path("moe-dense-count.gguf"), no_count);
    e = load_error(temp_path("moe-dense-count.gguf"));
    EXPECT_NE(e.find("a qwen3 model has no experts"), std::string::npos) << e;

    RandomModelSpec bad = moe_spec("qwen3moe-test");
    bad.n_expert_used = 20;
    EXPECT_THROW(write_random_model(bad, temp_path("x.gguf")), Error);
    bad = moe_spec("qwen2moe-test");
    bad.tied = true;
    EXPECT_THROW(write_random_model(bad, temp_path("x.gguf")), Error);
    bad = tiny_spec("qwen3");
    bad.n_expert = 4;
    EXPECT_THROW(write_random_model(bad, temp_path("x.gguf")), Error);
}


std::vector<int32_t> tokens(int n) { return token_cycle(n, 37, 11); }

// Chunked prefill and decoding (other tokens in each chunk, so other expert groups) give the
// logits of one prefill of the whole sequence, for each MoE family.
TEST(Moe, ChunksAndDecodeMatchOnePrefill) {
    for (const char* preset : {"qwen3moe-test", "qwen2moe-test", "mixtral-test"}) {
        const auto m =
            Model::load(write_model(moe_spec(preset), std::string(preset) + "-chunks.gguf"));
        const int n = 40, n_prompt = 25;
        const auto tk = tokens(n);
        Session one(*m, f32_options());
        const auto a = one.prefill(tk, true);
        const std::vector<float> all(a.begin(), a.end());
        const size_t V = 512;
        Session s(*m, f32_options(7));
        const auto p = s.prefill(std::span<const int32_t>(tk.data(), n_prompt));
        float worst = 0, spread = 0;
        for (size_t i = 0; i < V; ++i) {
            worst = std::max(worst, std::fabs(p[i] - all[(n_prompt - 1) * V + i]));
            spread = std::max(spread, std::fabs(all[(n_prompt - 1) * V + i]));
        }
        for (int t = n_prompt; t < n; ++t) {
            const auto d = s.decode(tk[static_cast<size_t>(t)]);
            for (size_t i = 0; i < V; ++i)
                worst = std::max(worst, std::fabs(d[i] - all[t * V + i]));
        }
        EXPECT_LT(worst, 1e-4f * spread) << preset;
    }
}

// Eviction policies act on the attention cache only; MoE changes the FFN: K-VEC runs unchanged,
// meets its budget, and changes the logits.
TEST(Moe, KvecPolicyOnAMoeModel) {
    const int n = 64, budget = 16;
    const auto tk = tokens(n);
    Session full(qwen3moe_model(), f32_options());
    const auto a = full.prefill(tk);
    const std::vector<float> before(a.begin(), a.end());
    full.decode(5);
    const auto f = full.decode(9);
    const std::vector<float> full_logits(f.begin(), f.end());

    auto policy = policy::make_policy(fmt::format("kvec:budget={},window=4", budget));
    Session s(qwen3moe_model(), f32_options());
    s.set_evictor(policy.get());
    const auto p = s.prefill(tk);
    const ModelConfig& c = qwen3moe_model().config();
    EXPECT_EQ(s.kv_cache().total_entries(), int64_t{c.n_layer} * c.n_head_kv * budget);
    for (size_t i = 0; i < before.size(); ++i)
        ASSERT_NEAR(p[i], before[i], 1e-4f * 10);  // the prompt's logits: before eviction
    s.decode(5);
    const auto d = s.decode(9);
    float change = 0;
    for (size_t i = 0; i < d.size(); ++i) {
        ASSERT_TRUE(std::isfinite(d[i]));
        change = std::max(change, std::fabs(d[i] - full_logits[i]));
    }
    EXPECT_GT(change, 0.01f) << "eviction did not change the decode logits";
}

}  // namespace
}  // namespace kvec
