// Phi-3 / Phi-4-mini: hyper-parameters and tensors as llama.cpp reads them (fused attn_qkv and
// ffn_up, or separate Q/K/V), LongRoPE's long/short factors chosen by the context and its
// attention factor, the sliding-window key ignored as llama.cpp ignores it. (Parity of the logits
// with the PyTorch reference: tests/parity, Parity.Variants phi3_*; with llama.cpp:
// scripts/parity-vs-llama-cpp.sh.)
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/session.h"
#include "test_helpers.h"
#include "util/error.h"

namespace kvec {
namespace {

using namespace testing_helpers;

// The phi3-test preset (2 layers, head 64 rotating 48, original context 128, window key 64) with
// a small vocabulary.
RandomModelSpec phi3_spec() {
    RandomModelSpec s = random_model_preset("phi3-test");
    s.n_vocab = 512;
    s.n_ctx = 512;
    s.seed = 6;
    return s;
}

const std::string& phi3_path() {
    static const std::string p = write_model(phi3_spec(), "phi3.gguf");
    return p;
}

std::vector<int32_t> tokens(int n) { return token_cycle(n, 29, 5); }

std::vector<float> all_logits(const Model& m, int n, int n_ctx = 0) {
    SessionOptions o;
    o.kv_type_k = o.kv_type_v = KvType::F32;
    o.n_ctx = n_ctx;
    return prefill_logits(m, tokens(n), o);
}

TEST(Phi3, ReadsHyperParameters) {
    const auto m = Model::load(phi3_path());
    const ModelConfig& c = m->config();
    EXPECT_EQ(c.arch, Arch::Phi3);
    EXPECT_EQ(c.family, Family::Llama);
    EXPECT_EQ(c.rope_mode, ops::RopeMode::Neox);
    EXPECT_EQ(c.head_dim, 64);
    EXPECT_EQ(c.n_rot, 48);
    EXPECT_EQ(c.n_ctx_orig, 128);
    EXPECT_FALSE(c.has_swa());  // the window key (64) is off, as in llama.cpp
    EXPECT_NEAR(c.rope_attn_factor, std::sqrt(1.0 + std::log(4.0) / std::log(128.0)), 1e-6);
    const ModelWeights& w = m->weights();
    EXPECT_EQ(w.rope_long.size(), 24u);
    EXPECT_EQ(w.rope_short.size(), 24u);
    EXPECT_FALSE(w.tied_output);
    // The fused tensors' row ranges: Q, K, V of attn_qkv; gate then up of ffn_up.
    const LayerWeights& L = w.layers[1];
    EXPECT_EQ(L.wq.n_out, 256);
    EXPECT_EQ(L.wk.n_out, 128);
    EXPECT_EQ(L.wk.data, L.wq.data + 256 * L.wq.row_bytes);
    EXPECT_EQ(L.wv.data, L.wk.data + 128 * L.wk.row_bytes);
    EXPECT_EQ(L.w_gate.n_out, 512);
    EXPECT_EQ(L.w_up.data, L.w_gate.data + 512 * L.w_gate.row_bytes);
}

// LongRoPE as llama.cpp chooses: the long factors when the context exceeds the original one,
// else the short ones; the attention factor in both. The choice changes the logits.
TEST(Phi3, LongRopeFactorsFollowTheContext) {
    const auto m = Model::load(phi3_path());
    const ops::RopeParams short_rope = rope_params(*m, 128), long_rope = rope_params(*m, 129);
    EXPECT_EQ(short_rope.freq_factors, m->weights().rope_short.data());
    EXPECT_EQ(long_rope.freq_factors, m->weights().rope_long.data());
    EXPECT_FLOAT_EQ(long_rope.attn_factor, m->config().rope_attn_factor);
    EXPECT_EQ(rope_params(*m).freq_factors, m->weights().rope_long.data());  // n_ctx_train 512 > 128
    EXPECT_GT(max_abs_diff(all_logits(*m, 64, 128), all_logits(*m, 64, 256)), 1e-2f);
}

// A file with attn_q/k/v.weight instead of attn_qkv.weight (llama.cpp reads both) holding the
// same rows gives the same logits.
TEST(Phi3, SeparateQkvEqualsFused) {
    const std::string separate = temp_path("phi3-separate.gguf");
    {
        auto f = gguf::File::open(phi3_path());
        gguf::Writer w;
        for (const auto& [k, v] : f->metadata()) w.set(k, v);
        for (const auto& t : f->tensors()) {
            const std::string suffix = "attn_qkv.weight";
            if (t.name.size() < suffix.size() || t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) != 0) {
                std::vector<int64_t> dims(t.ne.begin(), t.ne.begin() + t.n_dims);
                w.add_tensor(t.name, t.type, dims, t.data, t.nbytes);
                continue;
            }
            const std::string p = t.name.substr(0, t.name.size() - suffix.size());
            const size_t row = t.nbytes / static_cast<size_t>(t.ne[1]);
            const auto* bytes = static_cast<const uint8_t*>(t.data);
            w.add_tensor(p + "attn_q.weight", t.type, {t.ne[0], 256}, bytes, 256 * row);
            w.add_tensor(p + "attn_k.weight", t.type, {t.ne[0], 128}, bytes + 256 * row, 128 * row);
            w.add_tensor(p + "attn_v.weight", t.type, {t.ne[0], 128}, bytes + 384 * row, 128 * row);
        }
        w.write(separate);
    }
    const auto fused = Model::load(phi3_path());
    const auto split = Model::load(separate);
    EXPECT_EQ(max_abs_diff(all_logits(*fused, 40), all_logits(*split, 40)), 0.0f);
}

// ffn_up must hold 2 n_ff rows (llama.cpp reads no ffn_gate for phi3): one clear error.
TEST(Phi3, MisShapedFusedFfnIsRefused) {
    const std::string bad = temp_path("phi3-bad-ffn.gguf");
    Rewrite r;
    r.reshape.push_back({"blk.1.ffn_up.weight", {256, 512}});
    rewrite_gguf(phi3_path(), bad, r);
    try {
        Model::load(bad);
        FAIL() << "a mis-shaped ffn_up was accepted";
    } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("'blk.1.ffn_up.weight' has shape [256, 512], expected [256, 1024]"), std::string::npos)
            << what;
    }
}

}  // namespace
}  // namespace kvec
