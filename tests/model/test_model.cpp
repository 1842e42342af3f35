#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include <string>

#include "model/model.h"
#include "quant/quantize_model.h"
#include "tensor/int8_decode.h"
#include "tensor/dispatch.h"
#include "tensor/int8_gemm.h"
#include "test_helpers.h"
#include "util/error.h"
#include "util/mapped_file.h"

namespace kvec {
namespace {

using namespace testing_helpers;


TEST(Model, ReadsHyperParameters) {
    RandomModelSpec s = tiny_spec("qwen3");
    s.head_dim = 48;  // q_dim 192 != n_embd 128
    s.rope_base = 500000.0f;
    const auto m = Model::load(write_model(s, "qwen3.gguf"));
    const ModelConfig& c = m->config();
    EXPECT_EQ(c.arch, Arch::Qwen3);
    EXPECT_EQ(c.n_layer, 2);
    EXPECT_EQ(c.n_embd, 128);
    EXPECT_EQ(c.n_head, 4);
    EXPECT_EQ(c.n_head_kv, 2);
    EXPECT_EQ(c.head_dim, 48);
    EXPECT_EQ(c.n_rot, 48);
    EXPECT_EQ(c.n_ff, 256);
    EXPECT_EQ(c.n_vocab, 512);
    EXPECT_EQ(c.n_ctx_train, 256);
    EXPECT_FLOAT_EQ(c.rope_freq_base, 500000.0f);
    EXPECT_EQ(c.rope_mode, ops::RopeMode::Neox);
    EXPECT_EQ(m->weights().layers[1].q_norm.size(), 48u);
    EXPECT_EQ(m->weights().layers[0].wq.n_out, 192);
    EXPECT_EQ(m->weights().layers[0].wo.n_in, 192);
    EXPECT_FALSE(m->weights().tied_output);
}

TEST(Model, LinearAndLlama3RopeScaling) {
    RandomModelSpec s = tiny_spec();
    s.rope_scaling = "linear";
    s.rope_factor = 4.0f;
    auto m = Model::load(write_model(s, "linear.gguf"));
    EXPECT_FLOAT_EQ(m->config().rope_freq_scale, 0.25f);
    EXPECT_TRUE(m->weights().rope_freqs.empty());
    s.rope_scaling = "llama3";
    s.rope_factor = 8.0f;
    m = Model::load(write_model(s, "llama3.gguf"));
    EXPECT_FLOAT_EQ(m->config().rope_freq_scale, 1.0f);
    ASSERT_EQ(m->weights().rope_freqs.size(), 16u);
    EXPECT_FLOAT_EQ(m->weights().rope_freqs.front(), 1.0f);  // highest frequency: unscaled
    EXPECT_FLOAT_EQ(m->weights().rope_freqs.back(), 8.0f);   // lowest frequency: full factor
}

TEST(Model, TiedOutputUsesTheEmbedding) {
    RandomModelSpec s = tiny_spec();
    s.tied = true;
    const auto m = Model::load(write_model(s, "tied.gguf"));
    EXPECT_TRUE(m->weights().tied_output);
    EXPECT_EQ(m->weights().output.data, m->weights().token_embd.data);
}

// Where the CPU has AVX-512 VNNI, a mapped Q8_0 model's matrices are repacked into VNNI panels at
// load (the tied output too, but not the embedding rows); the logits stay within float rounding
// of the rows read in place (KVEC_REPACK=0), and a copied model (--no-mmap) is not repacked.
TEST(Model, Q8_0MatricesRepackedAtLoad) {
    if (!int8::vnni_enabled()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU (or switched off)";
    RandomModelSpec s = tiny_spec();
    s.type = GgmlType::Q8_0;
    s.tied = true;
    const std::string path = write_model(s, "q8_0-repack.gguf");
    const auto m = Model::load(path, LoadMode::Auto);
    const ModelWeights& w = m->weights();
    EXPECT_GT(m->repacked_bytes(), 0u);
    EXPECT_NE(w.output.panels, nullptr);
    EXPECT_EQ(w.token_embd.panels, nullptr);
    for (const LayerWeights& L : w.layers) {
        for (const WeightView* v : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) {
            EXPECT_NE(v->panels, nullptr);
        }
    }
    EXPECT_EQ(Model::load(path, LoadMode::Copy)->repacked_bytes(), 0u);
    ::setenv("KVEC_REPACK", "0", 1);
    const auto rows = Model::load(path, LoadMode::Map);
    ::unsetenv("KVEC_REPACK");
    EXPECT_EQ(rows->repacked_bytes(), 0u);
    const auto tokens = token_cycle(40, 37, 5);
    const auto a = prefill_logits(*m, tokens, f32_options(16)), b = prefill_logits(*rows, tokens, f32_options(16));
    EXPECT_LT(max_abs_diff(a, b), 1e-3f);
}

// Without AVX-512 VNNI, a Q4_0..Q5_1 model's matrices are repacked at load as rows for the AVX2
// decode kernels (the tied output too, but not the embedding rows; w_down's rows of 288 elements end
// in a tail block), and nothing changes in the logits: prefill in chunks and one token at a time
// give the bits of the rows read in place (KVEC_REPACK=0).
TEST(Model, LegacyMatricesRepackedForAvx2Decode) {
    if (int8::vnni_enabled()) GTEST_SKIP() << "AVX-512 VNNI on this CPU: its panels serve these types";
    set_matmul_precision(MatmulPrecision::Fast);
    for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1}) {
        if (int8::decode::kernel_avx2_repacked(type) == nullptr) GTEST_SKIP() << "no AVX2 on this CPU";
        RandomModelSpec s = tiny_spec();
        s.type = type;
        s.tied = true;
        s.n_ff = 288;
        const std::string path = write_model(s, std::string(ggml_type_name(type)) + "-rows.gguf");
        const auto m = Model::load(path, LoadMode::Auto);
        const ModelWeights& w = m->weights();
        EXPECT_GT(m->repacked_bytes(), 0u);
        EXPECT_NE(w.output.decode_rows, nullptr);
        EXPECT_EQ(w.token_embd.decode_rows, nullptr);
        for (const LayerWeights& L : w.layers) {
            for (const WeightView* v : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) {
                EXPECT_NE(v->decode_rows, nullptr) << ggml_type_name(type);
            }
        }
        ::setenv("KVEC_REPACK", "0", 1);
        const auto rows = Model::load(path, LoadMode::Auto);
        ::unsetenv("KVEC_REPACK");
        EXPECT_EQ(rows->repacked_bytes(), 0u);
        EXPECT_EQ(rows->weights().layers[0].wq.decode_rows, nullptr);
        const auto tokens = token_cycle(24, 37, 5);
        for (int n_batch : {16, 1}) {
            EXPECT_EQ(prefill_logits(*m, tokens, f32_options(n_batch)), prefill_logits(*rows, tokens, f32_options(n_batch)))
                << ggml_type_name(type) << " n_batch " << n_batch;
        }
    }
}

// K-quant matrices are repacked into panels at load: every matrix of a Q4_K_M mix (Q4_K, and Q6_K
// for the output and some ffn_down), the Q6_K ones of a Q5_K_M mix, whose Q5_K matrices are
// instead copied beside them (2 MiB pages) in Auto where the file would have been copied; the
// file stays mapped. Prefill and token-by-token decode stay within float rounding of the rows
// read in place (KVEC_REPACK=0).
TEST(Model, KQuantMatricesRepackedAtLoad) {
    if (!int8::vnni_enabled()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU (or switched off)";
    RandomModelSpec s = tiny_spec();
    s.n_embd = 256;  // rows of whole super-blocks
    s.n_ff = 512;
    const std::string source = write_model(s, "k-quant-source.gguf");
    for (const char* target : {"q4_k_m", "q5_k_m"}) {
        const std::string path = temp_path(std::string(target) + "-repack.gguf");
        quant::QuantizeOptions mix;
        mix.mixed = true;
        quant::quantize_gguf(source, path, quant::parse_quantize_target(target)->type, mix);
        const auto m = Model::load(path, LoadMode::Auto);
        const ModelWeights& w = m->weights();
        const uint8_t* file = m->file().bytes().data();
        const size_t file_bytes = m->file().bytes().size();
        const bool copy_rest = auto_copies(file_bytes);
        int repacked = 0, other = 0;
        for (const WeightView* v : {&w.output, &w.layers[0].wq, &w.layers[0].w_down, &w.layers[1].wo, &w.layers[1].w_down}) {
            const bool in_file = v->data >= file && v->data < file + file_bytes;
            if (int8::has_load_panels(v->type)) {
                ++repacked;
                EXPECT_NE(v->panels, nullptr) << target;
                EXPECT_TRUE(in_file) << target;  // kept for the exact path
            } else {
                ++other;
                EXPECT_EQ(v->panels, nullptr) << target;
                EXPECT_EQ(in_file, !copy_rest) << target;
            }
        }
        EXPECT_EQ(w.output.type, GgmlType::Q6_K) << target;
        EXPECT_EQ(repacked, std::string(target) == "q4_k_m" ? 5 : 2) << target;
        EXPECT_GT(m->repacked_bytes(), 0u);
        ::setenv("KVEC_REPACK", "0", 1);
        const auto rows = Model::load(path, LoadMode::Auto);
        ::unsetenv("KVEC_REPACK");
        EXPECT_EQ(rows->repacked_bytes(), 0u);
        // Both add the same integer sums in different float orders; where that moves an activation of
        // the next layer across a rounding step of its int8 quantisation, the logits move by that
        // quantisation's noise (~0.1 here, as Fast against Exact). A step crossed by a key or value
        // stays in the cache, so every later position carries it too (one token at a time, since the
        // decode attention reads F32/F16 entries in place: a crossing at position 9 of 24, carried
        // to the last): every position within the noise, and the positions before the first such
        // crossing, at least a third, within float rounding (wrong panels miss both).
        const auto tokens = token_cycle(24, 37, 5);
        const int64_t n_vocab = m->config().n_vocab;
        for (int n_batch : {16, 1}) {  // prefill chunks, then one token at a time (decode)
            const auto a = prefill_logits(*m, tokens, f32_options(n_batch));
            const auto b = prefill_logits(*rows, tokens, f32_options(n_batch));
            int close = 0;
            for (size_t t = 0; t < tokens.size(); ++t) {
                const float d = max_abs_diff(std::span(a).subspan(t * n_vocab, n_vocab),
                                             std::span(b).subspan(t * n_vocab, n_vocab));
                EXPECT_LT(d, 0.25f) << target << " " << n_batch << " " << t;
                close += d < 1e-4f;
            }
            EXPECT_GE(close, 8) << target << " " << n_batch;
        }
    }
}

TEST(Model, UnknownArchitectureListsSupportedOnes) {
    const std::string good = write_model(tiny_spec(), "arch-good.gguf");
    const std::string bad = temp_path("arch-bad.gguf");
    Rewrite r;
    r.set_metadata.push_back({"general.architecture", gguf::Value::from_string("gpt9")});
    rewrite_gguf(good, bad, r);
    const std::string e = load_error(bad);
    EXPECT_NE(e.find("unsupported architecture 'gpt9'"), std::string::npos) << e;
    EXPECT_NE(e.find("llama, qwen2, qwen3, gemma3"), std::string::npos) << e;
}

TEST(Model, AllMissingTensorsInOneError) {
    const std::string good = write_model(tiny_spec("qwen2"), "missing-good.gguf");
    const std::string bad = temp_path("missing-bad.gguf");
    Rewrite r;
    r.drop_tensor = [](const std::string& n) {
        return n == "blk.0.attn_q.weight" || n == "blk.1.ffn_up.weight" || n == "blk.1.attn_k.bias" ||
               n == "output_norm.weight";
    };
    rewrite_gguf(good, bad, r);
    const std::string e = load_error(bad);
    EXPECT_NE(e.find("missing 4 tensors"), std::string::npos) << e;
    for (const char* name : {"blk.0.attn_q.weight", "blk.1.ffn_up.weight", "blk.1.attn_k.bias", "output_norm.weight"}) {
        EXPECT_NE(e.find(name), std::string::npos) << name << " not in: " << e;
    }
}

TEST(Model, ShapeMismatchNamesTensorAndShapes) {
    const std::string good = write_model(tiny_spec(), "shape-good.gguf");
    const std::string bad = temp_path("shape-bad.gguf");
    Rewrite r;
    r.reshape.push_back({"blk.1.attn_k.weight", {128, 32}});
    rewrite_gguf(good, bad, r);
    const std::string e = load_error(bad);
    EXPECT_NE(e.find("'blk.1.attn_k.weight' has shape [128, 32], expected [128, 64]"), std::string::npos) << e;
}

TEST(Model, MissingHyperParameterNamed) {
    const std::string good = write_model(tiny_spec(), "hp-good.gguf");
    auto f = gguf::File::open(good);
    gguf::Writer w;
    for (const auto& [k, v] : f->metadata())
        if (k != "llama.attention.head_count") w.set(k, v);
    for (const auto& t : f->tensors())
        w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims), t.data, t.nbytes);
    const std::string bad = temp_path("hp-bad.gguf");
    w.write(bad);
    EXPECT_NE(load_error(bad).find("llama.attention.head_count"), std::string::npos) << load_error(bad);
}

TEST(Model, RandomModelRejectsBadSpecs) {
    RandomModelSpec s = tiny_spec();
    s.type = GgmlType::Q4_K;  // rows of 128 are not whole 256-element blocks
    EXPECT_THROW(write_random_model(s, temp_path("bad-q4k.gguf")), Error);
    s = tiny_spec();
    s.n_head_kv = 3;
    EXPECT_THROW(write_random_model(s, temp_path("bad-gqa.gguf")), Error);
    s = tiny_spec();
    s.arch = "mamba";
    EXPECT_THROW(write_random_model(s, temp_path("bad-arch.gguf")), Error);
    s = tiny_spec();
    s.n_vocab = 1 << 20;  // larger than the vocabulary file
    EXPECT_THROW(write_random_model(s, temp_path("bad-vocab.gguf")), Error);
    EXPECT_THROW(random_model_preset("gpt-5"), Error);
    EXPECT_EQ(random_model_preset("tinyllama-1.1b").n_layer, 22);
}

// Values from the file are checked before use (issue 23): non-finite RoPE base and scaling factor,
// a vocab_size that disagrees with the embedding, non-finite norm weights and rope_freqs.
TEST(Model, NonFiniteAndInconsistentValuesAreRefused) {
    const std::string good = write_model(tiny_spec(), "finite-good.gguf");
    auto with = [&](const std::string& name, Rewrite r) {
        const std::string bad = temp_path(name);
        rewrite_gguf(good, bad, r);
        return load_error(bad);
    };
    Rewrite nan_base;
    nan_base.set_metadata = {{"llama.rope.freq_base", gguf::Value::from_f32(NAN)}};
    EXPECT_NE(with("nan-base.gguf", nan_base).find("rope.freq_base = nan must be a finite number"), std::string::npos)
        << with("nan-base.gguf", nan_base);
    Rewrite inf_base;
    inf_base.set_metadata = {{"llama.rope.freq_base", gguf::Value::from_f32(INFINITY)}};
    EXPECT_NE(with("inf-base.gguf", inf_base).find("must be a finite number"), std::string::npos);
    Rewrite inf_factor;
    inf_factor.set_metadata = {{"llama.rope.scaling.type", gguf::Value::from_string("linear")},
                               {"llama.rope.scaling.factor", gguf::Value::from_f32(INFINITY)}};
    EXPECT_NE(with("inf-factor.gguf", inf_factor).find("rope.scaling.factor > 0, got inf"), std::string::npos)
        << with("inf-factor.gguf", inf_factor);
    Rewrite vocab;
    vocab.set_metadata = {{"llama.vocab_size", gguf::Value::from_u32(999)}};
    EXPECT_NE(with("vocab.gguf", vocab).find("llama.vocab_size = 999 disagrees with the 512 rows"), std::string::npos)
        << with("vocab.gguf", vocab);
    Rewrite heads;
    heads.set_metadata = {{"llama.attention.head_count", gguf::Value::from_u32(65536)},
                          {"llama.attention.head_count_kv", gguf::Value::from_u32(65536)},
                          {"llama.attention.key_length", gguf::Value::from_u32(1 << 16)},
                          {"llama.attention.value_length", gguf::Value::from_u32(1 << 16)}};
    EXPECT_NE(with("heads.gguf", heads).find("out of range"), std::string::npos) << with("heads.gguf", heads);

    // A NaN in a norm weight: found when it is read at load time.
    auto f = gguf::File::open(good);
    gguf::Writer w;
    for (const auto& [k, v] : f->metadata()) w.set(k, v);
    for (const auto& t : f->tensors()) {
        std::vector<uint8_t> bytes(t.data, t.data + t.nbytes);
        if (t.name == "blk.1.ffn_norm.weight") {
            const float nan = NAN;
            std::memcpy(bytes.data() + 8, &nan, 4);
        }
        w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims), bytes.data(), bytes.size());
    }
    w.write(temp_path("nan-norm.gguf"));
    EXPECT_NE(load_error(temp_path("nan-norm.gguf")).find("'blk.1.ffn_norm.weight' holds a non-finite value nan at element 2"),
              std::string::npos) << load_error(temp_path("nan-norm.gguf"));
}

// gen-model's sizes are checked before anything is allocated (issue 23: --vocab -1 overflowed a
// heap buffer; --embd 2^30 allocated first).
TEST(Model, RandomModelChecksSizesBeforeAllocating) {
    RandomModelSpec s = tiny_spec();
    s.n_vocab = -1;
    try {
        write_random_model(s, temp_path("neg-vocab.gguf"));
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--vocab must be positive, got -1"), std::string::npos) << e.what();
    }
    s = tiny_spec();
    s.n_embd = 1 << 30;
    s.n_head = 4;
    try {
        write_random_model(s, temp_path("huge.gguf"));
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("of memory available"), std::string::npos) << e.what();
    }
    s = tiny_spec();
    s.rope_base = NAN;
    EXPECT_THROW(write_random_model(s, temp_path("nan-base.gguf")), Error);
}

TEST(Model, Llama3FactorsFollowTheFormula) {
    // base 10000, 8 rotated dims: wavelengths 2pi * 10000^(i/8) for i = 0, 2, 4, 6:
    // 6.28 and 62.8 (< 2048: factor 1), 628 (< 2048: 1), 6283 (between 2048 and 8192: smooth).
    const auto f = llama3_rope_factors(8, 10000.0f, 8.0f);
    ASSERT_EQ(f.size(), 4u);
    EXPECT_FLOAT_EQ(f[0], 1.0f);
    EXPECT_FLOAT_EQ(f[2], 1.0f);
    const double wavelen = 2 * M_PI * 1000.0;
    const double smooth = (8192.0 / wavelen - 1.0) / 3.0;
    EXPECT_NEAR(f[3], 1.0 / ((1 - smooth) / 8.0 + smooth), 1e-5);
}

}  // namespace
}  // namespace kvec
