// Gemma 2: hyper-parameters as llama.cpp reads them (defaults included), soft-capped attention
// and output logits, the sliding window on the even layers through chunked prefill and decoding.
// (Parity of the logits with the PyTorch reference: tests/parity, Parity.Variants gemma2_softcap;
// with llama.cpp: scripts/parity-vs-llama-cpp.sh. The soft-capping kernels: tests/tensor.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/session.h"
#include "policy/registry.h"
#include "test_helpers.h"
#include "util/error.h"

namespace kvec {
namespace {

using namespace testing_helpers;

// The gemma2-test preset (2 layers: 0 sliding-window, 1 global; window 32; caps 2 and 5) with a
// small vocabulary.
RandomModelSpec gemma2_spec() {
    RandomModelSpec s = random_model_preset("gemma2-test");
    s.n_vocab = 512;
    s.n_ctx = 512;
    s.seed = 4;
    return s;
}

const std::string& gemma2_path() {
    static const std::string p = write_model(gemma2_spec(), "gemma2.gguf");
    return p;
}

const Model& gemma2_model() {
    static const auto m = Model::load(gemma2_path());
    return *m;
}

std::vector<int32_t> tokens(int n) { return token_cycle(n, 37, 11); }


std::vector<float> all_logits(const Model& m, int n) { return prefill_logits(m, tokens(n), f32_options()); }

TEST(Gemma2, ReadsHyperParameters) {
    const ModelConfig& c = gemma2_model().config();
    EXPECT_EQ(c.arch, Arch::Gemma2);
    EXPECT_EQ(c.family, Family::Gemma);
    EXPECT_EQ(c.rope_mode, ops::RopeMode::Neox);
    EXPECT_EQ(c.sliding_window, 32);
    ASSERT_EQ(c.swa_layers.size(), 2u);
    EXPECT_TRUE(c.is_swa(0));  // il % 2 < 1, llama.cpp's default pattern for gemma2
    EXPECT_FALSE(c.is_swa(1));
    EXPECT_FLOAT_EQ(c.attn_logit_softcap, 2.0f);
    EXPECT_FLOAT_EQ(c.final_logit_softcap, 5.0f);
    EXPECT_FLOAT_EQ(c.rope_freq_base_swa, c.rope_freq_base);  // no freq_base_swa key: the global base
    EXPECT_FLOAT_EQ(c.attn_scale, 1.0f / std::sqrt(128.0f));
    EXPECT_TRUE(gemma2_model().weights().tied_output);
    EXPECT_TRUE(gemma2_model().weights().layers[0].q_norm.empty());
    EXPECT_EQ(gemma2_model().weights().layers[1].attn_post_norm.size(), 256u);

    // Without the keys, llama.cpp's defaults: window 4096, caps 50 and 30.
    const std::string bare = temp_path("gemma2-bare.gguf");
    Rewrite r;
    r.drop_key = [](const std::string& k) {
        return k == "gemma2.attention.sliding_window" || k == "gemma2.attn_logit_softcapping" ||
               k == "gemma2.final_logit_softcapping";
    };
    rewrite_gguf(gemma2_path(), bare, r);
    const auto m = Model::load(bare);
    EXPECT_EQ(m->config().sliding_window, 4096);
    EXPECT_FLOAT_EQ(m->config().attn_logit_softcap, 50.0f);
    EXPECT_FLOAT_EQ(m->config().final_logit_softcap, 30.0f);

    const std::string zero = temp_path("gemma2-zero-cap.gguf");
    Rewrite z;
    z.set_metadata.push_back({"gemma2.attn_logit_softcapping", gguf::Value::from_f32(0.0f)});
    rewrite_gguf(gemma2_path(), zero, z);
    try {
        Model::load(zero);
        FAIL() << "a zero cap was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("attn_logit_softcapping"), std::string::npos) << e.what();
    }
}

// The caps act: the logits are bounded by the final cap, and raising either cap far above the
// logits (tanh then the identity) changes them.
TEST(Gemma2, SoftCappingActsOnAttentionAndOutput) {
    const int n = 48;
    const std::vector<float> capped = all_logits(gemma2_model(), n);
    for (float x : capped) ASSERT_LE(std::fabs(x), 5.0f);
    for (const char* key : {"gemma2.attn_logit_softcapping", "gemma2.final_logit_softcapping"}) {
        const std::string loose = temp_path("gemma2-loose.gguf");
        Rewrite r;
        r.set_metadata.push_back({key, gguf::Value::from_f32(1e6f)});
        rewrite_gguf(gemma2_path(), loose, r);
        const auto m = Model::load(loose);
        const std::vector<float> other = all_logits(*m, n);
        float diff = 0;
        for (size_t i = 0; i < capped.size(); ++i) diff = std::max(diff, std::fabs(capped[i] - other[i]));
        EXPECT_GT(diff, 0.05f) << key << " did not change the logits";
    }
}

// Chunked prefill and decoding (the window moving, soft-capped scores in every kernel call) give
// the logits of one prefill; layer 0 keeps only its window, layer 1 everything.
TEST(Gemma2, ChunksAndDecodeMatchOnePrefill) {
    const int n = 90, n_prompt = 45;
    const std::vector<float> all = all_logits(gemma2_model(), n);
    const auto tk = tokens(n);
    Session s(gemma2_model(), f32_options(8));
    s.prefill(std::span<const int32_t>(tk.data(), n_prompt));
    EXPECT_EQ(s.kv_cache().size(0, 0), 31);
    EXPECT_EQ(s.kv_cache().size(1, 0), n_prompt);
    float worst = 0;
    for (int t = n_prompt; t < n; ++t) {
        const auto d = s.decode(tk[static_cast<size_t>(t)]);
        for (size_t i = 0; i < 512; ++i) worst = std::max(worst, std::fabs(d[i] - all[t * 512 + i]));
    }
    EXPECT_LT(worst, 1e-4f);
}

// K-VEC and KNorm with one Ada-KV pool over the layers (layers=global, K-VEC's default) on a model with
// sliding-window layers: the pool spans the global layers (1 and 3 of 4), which hold
// 2 layers x 2 KV heads x B entries together after the prompt, split unevenly between heads; the
// sliding-window layers keep their window; a second prompt chunk compresses again.
TEST(Gemma2, OnePoolSpansTheGlobalLayers) {
    RandomModelSpec spec = gemma2_spec();
    spec.n_layer = 4;
    const auto m = Model::load(write_model(spec, "gemma2-4l.gguf"));
    ASSERT_TRUE(m->config().is_swa(0) && !m->config().is_swa(1) && m->config().is_swa(2) && !m->config().is_swa(3));
    const int64_t B = 24;
    for (const char* spec_text : {"kvec:budget=24,window=4", "knorm:budget=24,window=4,layers=global"}) {
        const auto policy = policy::make_policy(spec_text);
        Session s(*m, f32_options());
        s.set_evictor(policy.get());
        s.prefill(tokens(100));
        int64_t global = 0;
        std::vector<int32_t> sizes;
        for (int l : {1, 3}) {
            for (int h = 0; h < 2; ++h) {
                global += s.kv_cache().size(l, h);
                sizes.push_back(s.kv_cache().size(l, h));
            }
        }
        EXPECT_EQ(global, 2 * 2 * B) << spec_text;
        EXPECT_NE(*std::min_element(sizes.begin(), sizes.end()), *std::max_element(sizes.begin(), sizes.end()))
            << spec_text << ": one pool, not B per head";
        for (int l : {0, 2}) EXPECT_EQ(s.kv_cache().size(l, 0), 31) << spec_text;  // window 32
        s.prefill(tokens(40));  // more of the prompt: another round
        global = 0;
        for (int l : {1, 3}) {
            for (int h = 0; h < 2; ++h) global += s.kv_cache().size(l, h);
        }
        EXPECT_EQ(global, 2 * 2 * B) << spec_text;
    }
}

}  // namespace
}  // namespace kvec
