// Gemma 3: hyper-parameters and tensors as llama.cpp reads them, the sliding-window mask and the
// bounded cache of sliding-window layers, and how eviction policies treat them. (Parity of the
// logits with the PyTorch reference: tests/parity, Parity.Variants gemma3_swa; with llama.cpp:
// scripts/parity-vs-llama-cpp.sh.)
#include <gtest/gtest.h>
#include <omp.h>

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

constexpr int kWindow = 32;

// The gemma3-test preset (6 layers: 0-4 sliding-window, 5 global; window 32) with a small
// vocabulary.
RandomModelSpec gemma_spec() {
    RandomModelSpec s = random_model_preset("gemma3-test");
    s.n_vocab = 512;
    s.n_ctx = 512;
    s.seed = 3;
    return s;
}

const Model& gemma_model() {
    static const auto m = Model::load(write_model(gemma_spec(), "gemma3.gguf"));
    return *m;
}

std::vector<int32_t> tokens(int n) { return token_cycle(n, 53, 17); }



TEST(Gemma3, ReadsHyperParameters) {
    const ModelConfig& c = gemma_model().config();
    EXPECT_EQ(c.arch, Arch::Gemma3);
    EXPECT_EQ(c.family, Family::Gemma);
    EXPECT_EQ(c.rope_mode, ops::RopeMode::Neox);
    EXPECT_EQ(c.head_dim, 128);
    EXPECT_EQ(c.sliding_window, kWindow);
    ASSERT_EQ(c.swa_layers.size(), 6u);
    for (int l = 0; l < 6; ++l) EXPECT_EQ(c.is_swa(l), l != 5) << l;  // il % 6 < 5, as llama.cpp
    EXPECT_FLOAT_EQ(c.attn_scale, 1.0f / std::sqrt(128.0f));
    EXPECT_FLOAT_EQ(c.rope_freq_base, 1000000.0f);
    EXPECT_FLOAT_EQ(c.rope_freq_scale, 0.125f);
    EXPECT_FLOAT_EQ(c.rope_freq_base_swa, 10000.0f);
    EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
    EXPECT_TRUE(gemma_model().weights().tied_output);
    const LayerWeights& L = gemma_model().weights().layers[0];
    EXPECT_EQ(L.q_norm.size(), 128u);
    EXPECT_EQ(L.attn_post_norm.size(), 256u);
    EXPECT_EQ(L.ffn_post_norm.size(), 256u);
}

TEST(Gemma3, PatternKeyAndMissingPostNorms) {
    const std::string good = write_model(gemma_spec(), "gemma3-good.gguf");
    const std::string pattern = temp_path("gemma3-pattern.gguf");
    Rewrite r;
    r.set_metadata.push_back({"gemma3.attention.sliding_window_pattern", gguf::Value::from_u32(3)});
    rewrite_gguf(good, pattern, r);
    const auto m = Model::load(pattern);
    for (int l = 0; l < 6; ++l) EXPECT_EQ(m->config().is_swa(l), l % 3 < 2) << l;

    // A period or window beyond what any model has is refused by name, not wrapped or clamped.
    for (const auto& [key, value] : {std::pair{"gemma3.attention.sliding_window_pattern", uint64_t{1} << 63},
                                     std::pair{"gemma3.attention.sliding_window", uint64_t{0xffffffff}}}) {
        const std::string huge = temp_path("gemma3-huge.gguf");
        Rewrite h;
        h.set_metadata.push_back({key, gguf::Value::from_u64(value)});
        rewrite_gguf(good, huge, h);
        const std::string e = load_error(huge);
        EXPECT_NE(e.find(fmt::format("{} = {} is out of range", key, value)), std::string::npos) << e;
    }

    const std::string bad = temp_path("gemma3-bad.gguf");
    Rewrite d;
    d.drop_tensor = [](const std::string& n) { return n == "blk.2.post_ffw_norm.weight" || n == "blk.4.attn_k_norm.weight"; };
    rewrite_gguf(good, bad, d);
    const std::string e = load_error(bad);
    EXPECT_NE(e.find("missing 2 tensors"), std::string::npos) << e;
    EXPECT_NE(e.find("blk.2.post_ffw_norm.weight"), std::string::npos) << e;
    EXPECT_NE(e.find("blk.4.attn_k_norm.weight"), std::string::npos) << e;
}

// The mask acts: logits of positions inside the first window equal those of the same weights
// without sliding windows (every layer sees everything there), later ones differ.
TEST(Gemma3, SlidingWindowMasksOlderPositions) {
    const int n = 96;
    Session s(gemma_model(), f32_options());
    const auto a = s.prefill(tokens(n), true);
    const std::vector<float> windowed(a.begin(), a.end());

    const std::string global = temp_path("gemma3-global.gguf");
    Rewrite r;
    r.set_metadata.push_back({"gemma3.attention.sliding_window", gguf::Value::from_u32(4096)});
    rewrite_gguf(write_model(gemma_spec(), "gemma3-src.gguf"), global, r);
    const auto m = Model::load(global);
    Session g(*m, f32_options());
    const auto b = g.prefill(tokens(n), true);
    const size_t V = 512;
    for (int t = 0; t < n; ++t) {
        float diff = 0;
        for (size_t i = 0; i < V; ++i) diff = std::max(diff, std::fabs(windowed[t * V + i] - b[t * V + i]));
        if (t < kWindow) {
            EXPECT_LT(diff, 1e-5f) << "position " << t;
        } else {
            EXPECT_GT(diff, 1e-3f) << "position " << t << " saw keys outside its window";
        }
    }
}

// Chunked prefill and decoding (windows that start inside a chunk, entries dropped between
// steps) give the logits of one prefill of the whole sequence; sliding-window layers keep only
// their window, the global layer everything.
TEST(Gemma3, ChunksAndDecodeMatchOnePrefillWithBoundedCache) {
    const int n = 100, n_prompt = 50;
    const auto tk = tokens(n);
    Session one(gemma_model(), f32_options());
    const auto a = one.prefill(tk, true);
    const std::vector<float> all(a.begin(), a.end());
    const size_t V = 512;

    Session s(gemma_model(), f32_options(7));
    s.prefill(std::span<const int32_t>(tk.data(), n_prompt));
    for (int l = 0; l < 6; ++l) {
        EXPECT_EQ(s.kv_cache().size(l, 1), l == 5 ? n_prompt : kWindow - 1) << "layer " << l;
    }
    float worst = 0;
    for (int t = n_prompt; t < n; ++t) {
        const auto d = s.decode(tk[static_cast<size_t>(t)]);
        for (size_t i = 0; i < V; ++i) worst = std::max(worst, std::fabs(d[i] - all[t * V + i]));
        for (int l = 0; l < 5; ++l) {
            ASSERT_GE(s.kv_cache().size(l, 0), kWindow - 1);
            ASSERT_LE(s.kv_cache().size(l, 0), kWindow - 1 + 31) << "layer " << l << " step " << t;
        }
    }
    EXPECT_LT(worst, 1e-4f);
    EXPECT_EQ(s.kv_cache().size(5, 0), n);
    // Rolling back behind the dropped entries is refused; within the window it is not.
    EXPECT_THROW(s.rollback(40), Error);
    EXPECT_NO_THROW(s.rollback(n - 2));
}

// Gemma 3's one KV head at decode over 2 threads: the sliding-window layers' windows (300 entries)
// and the global layer's entries each cut in two (decode_split_parts), merged: the logits of one
// prefill of the whole sequence.
TEST(Gemma3, DecodeSplitOverEntriesMatchesPrefill) {
    RandomModelSpec spec = gemma_spec();
    spec.n_head_kv = 1;
    spec.sliding_window = 300;
    const auto m = Model::load(write_model(spec, "gemma3-one-kv-head.gguf"));
    ASSERT_EQ(decode_split_parts(2, 1, 300), 2);
    const auto tk = tokens(404);
    Session one(*m, f32_options());
    const auto a = one.prefill(tk, true);
    const std::vector<float> all(a.begin(), a.end());
    const size_t V = 512;
    const int saved = omp_get_max_threads();
    omp_set_num_threads(2);
    Session s(*m, f32_options());
    s.prefill(std::span<const int32_t>(tk.data(), 400));
    float worst = 0;
    for (int t = 400; t < 404; ++t) {
        const auto d = s.decode(tk[static_cast<size_t>(t)]);
        for (size_t i = 0; i < V; ++i) worst = std::max(worst, std::fabs(d[i] - all[t * V + i]));
    }
    omp_set_num_threads(saved);
    EXPECT_LT(worst, 1e-4f);
}

// Eviction policies act on the global layers only, cross-layer ones too (shown the global
// layers only).
TEST(Gemma3, PoliciesLeaveSlidingWindowLayersAlone) {
    Session s(gemma_model(), f32_options());
    SinkRecentEvictor ev(2, 6);
    s.set_evictor(&ev);
    s.prefill(tokens(64));
    ASSERT_EQ(ev.calls.size(), 1u);
    EXPECT_EQ(ev.calls[0].layer, 5);
    EXPECT_EQ(s.kv_cache().size(5, 0), 8);
    for (int l = 0; l < 5; ++l) EXPECT_EQ(s.kv_cache().size(l, 0), kWindow - 1);

    ObservationRequest all;
    all.all_layers = true;
    SinkRecentEvictor cross(2, 6, 0, all);
    Session t(gemma_model(), f32_options());
    t.set_evictor(&cross);
    t.prefill(tokens(64));
    ASSERT_EQ(cross.calls.size(), 1u);
    EXPECT_EQ(cross.calls[0].layer, 5);
    EXPECT_EQ(t.kv_cache().size(5, 0), 8);
    for (int l = 0; l < 5; ++l) EXPECT_EQ(t.kv_cache().size(l, 0), kWindow - 1);
}

}  // namespace
}  // namespace kvec
