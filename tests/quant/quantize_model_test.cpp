// Whole-model quantisation on a small synthetic Llama-shaped GGUF file.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <random>
#include <string>
#include <vector>

#include "../gguf/gguf_test_util.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "quant/quantize_model.h"
#include "util/error.h"
#include "util/fp16.h"

namespace kvec::quant {
namespace {

using gguf::File;
using gguf::Writer;

constexpr int kLayers = 8;

struct Source {
    std::map<std::string, std::vector<float>> values;  // name -> [n_rows * ne0] original values
};

// Adds an f32 (or f16) tensor filled with Gaussian values and remembers them.
void add(Writer& w, Source& src, const std::string& name, std::vector<int64_t> dims,
         GgmlType type = GgmlType::F32, uint32_t seed = 1) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    std::mt19937 rng(seed + static_cast<uint32_t>(std::hash<std::string>()(name) & 0xffff));
    std::normal_distribution<float> dist(0.0f, 0.05f);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = name.find("norm") != std::string::npos ? 1.0f + dist(rng) : dist(rng);
    std::vector<uint8_t> bytes(ggml_row_size(type, dims[0]) * static_cast<size_t>(n / dims[0]));
    quantize_row(type, v.data(), bytes.data(), n);  // exact for f32; f16 rounds
    dequantize_row(type, bytes.data(), v.data(), n);
    w.add_tensor(name, type, dims, bytes.data(), bytes.size());
    src.values[name] = std::move(v);
}

// A llama-like model: ne[0] = 256 (k-quant friendly) except two odd-shaped tensors.
Source make_model(const std::string& path, bool tied_embeddings = false) {
    Writer w;
    Source src;
    w.set_string("general.architecture", "llama");
    w.set_string("general.name", "tiny");
    w.set_u32("llama.block_count", kLayers);
    w.set_u32("general.file_type", 0);
    w.set("tokenizer.ggml.tokens", gguf::Value::from_strings({"a", "b"}));
    add(w, src, "token_embd.weight", {256, 16});
    add(w, src, "output_norm.weight", {256}, GgmlType::F16);
    if (!tied_embeddings) add(w, src, "output.weight", {256, 16}, GgmlType::F16);
    for (int i = 0; i < kLayers; ++i) {
        const std::string p = "blk." + std::to_string(i) + ".";
        add(w, src, p + "attn_norm.weight", {256});
        add(w, src, p + "attn_q.weight", {256, 8});
        add(w, src, p + "attn_v.weight", {256, 4});
        add(w, src, p + "ffn_down.weight", {512, 4});
    }
    add(w, src, "blk.0.ffn_gate.weight", {96, 4});  // 96: not a multiple of 256, but of 32
    add(w, src, "blk.0.ffn_up.weight", {40, 4});    // 40: not even a multiple of 32
    add(w, src, "blk.0.attn_q.bias", {256});
    w.write(path);
    return src;
}

std::vector<float> decode(const gguf::TensorInfo& t) {
    std::vector<float> y(static_cast<size_t>(t.n_elements()));  // [n_rows * ne0]
    dequantize_row(t.type, t.data, y.data(), t.n_elements());
    return y;
}

double rel_rmse(const std::vector<float>& a, const std::vector<float>& b) {
    double e = 0;
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        e += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        s += double(a[i]) * a[i];
    }
    return std::sqrt(e / s);
}

class QuantizeModel : public kvec::testing::TempDirTest {};

TEST_F(QuantizeModel, Q4_K_MMixMatchesLlamaCppRules) {
    const Source src = make_model(path("in.gguf"));
    QuantizeOptions opts;
    opts.mixed = true;
    std::vector<std::string> log;
    opts.log = [&](const std::string& line) { log.push_back(line); };
    quantize_gguf(path("in.gguf"), path("out.gguf"), GgmlType::Q4_K, opts);

    auto f = File::open(path("out.gguf"));
    EXPECT_EQ(f->get_uint("general.file_type"), 15u);  // LLAMA_FTYPE_MOSTLY_Q4_K_M
    EXPECT_EQ(f->get_uint("general.quantization_version"), 2u);
    EXPECT_EQ(f->get_string("general.architecture"), "llama");
    EXPECT_EQ(f->get_string("general.name"), "tiny");
    EXPECT_EQ(f->get_array("tokenizer.ggml.tokens", gguf::ValueType::STRING).strings.size(), 2u);
    EXPECT_EQ(f->tensors().size(), src.values.size());
    EXPECT_EQ(log.size(), src.values.size());

    // use_more_bits(i, 8): i < 1, i >= 7, or (i - 1) % 3 == 2 -> layers 0, 3, 6, 7 get q6_K.
    const std::set<int> more_bits = {0, 3, 6, 7};
    for (int i = 0; i < kLayers; ++i) {
        const std::string p = "blk." + std::to_string(i) + ".";
        const GgmlType want = more_bits.count(i) ? GgmlType::Q6_K : GgmlType::Q4_K;
        EXPECT_EQ(f->tensor(p + "attn_v.weight").type, want) << i;
        EXPECT_EQ(f->tensor(p + "ffn_down.weight").type, want) << i;
        EXPECT_EQ(f->tensor(p + "attn_q.weight").type, GgmlType::Q4_K) << i;
        EXPECT_EQ(f->tensor(p + "attn_norm.weight").type, GgmlType::F32) << i;
    }
    EXPECT_EQ(f->tensor("output.weight").type, GgmlType::Q6_K);
    EXPECT_EQ(f->tensor("token_embd.weight").type, GgmlType::Q4_K);
    EXPECT_EQ(f->tensor("output_norm.weight").type, GgmlType::F32);      // f16 1-D -> f32
    EXPECT_EQ(f->tensor("blk.0.ffn_gate.weight").type, GgmlType::Q5_0);  // q4_K fallback
    EXPECT_EQ(f->tensor("blk.0.ffn_up.weight").type, GgmlType::F16);     // no 32-block type fits
    EXPECT_EQ(f->tensor("blk.0.attn_q.bias").type, GgmlType::F32);

    // Values survive within each type's error.
    for (const auto& [name, original] : src.values) {
        const gguf::TensorInfo& t = f->tensor(name);
        const std::vector<float> y = decode(t);
        ASSERT_EQ(y.size(), original.size()) << name;
        const double limit = t.type == GgmlType::F32 ? 0.0
                             : t.type == GgmlType::F16 ? 1e-3
                             : t.type == GgmlType::Q6_K ? 0.02
                                                        : 0.08;
        EXPECT_LE(rel_rmse(original, y), limit) << name << " as " << ggml_type_name(t.type);
    }
}

TEST_F(QuantizeModel, PlainTypesPureAndTiedEmbeddings) {
    make_model(path("in.gguf"));
    // q8_0: output stays q8_0 (llama.cpp only raises it to q6_K for other types).
    quantize_gguf(path("in.gguf"), path("q8.gguf"), GgmlType::Q8_0);
    auto q8 = File::open(path("q8.gguf"));
    EXPECT_EQ(q8->get_uint("general.file_type"), 7u);
    EXPECT_EQ(q8->tensor("output.weight").type, GgmlType::Q8_0);
    EXPECT_EQ(q8->tensor("blk.3.attn_v.weight").type, GgmlType::Q8_0);
    EXPECT_EQ(q8->tensor("blk.0.ffn_up.weight").type, GgmlType::F16);

    // q4_0: output.weight goes to q6_K.
    quantize_gguf(path("in.gguf"), path("q4.gguf"), GgmlType::Q4_0);
    EXPECT_EQ(File::open(path("q4.gguf"))->tensor("output.weight").type, GgmlType::Q6_K);

    // pure: exactly the target everywhere it fits.
    QuantizeOptions pure;
    pure.pure = true;
    quantize_gguf(path("in.gguf"), path("pure.gguf"), GgmlType::Q4_0, pure);
    EXPECT_EQ(File::open(path("pure.gguf"))->tensor("output.weight").type, GgmlType::Q4_0);

    // f16 target: no quantization_version key, file type 1.
    quantize_gguf(path("in.gguf"), path("f16.gguf"), GgmlType::F16);
    auto f16 = File::open(path("f16.gguf"));
    EXPECT_EQ(f16->get_uint("general.file_type"), 1u);
    EXPECT_FALSE(f16->has("general.quantization_version"));
    EXPECT_EQ(f16->tensor("blk.1.attn_q.weight").type, GgmlType::F16);

    // Tied embeddings: token_embd takes the output tensor's rule.
    make_model(path("tied.gguf"), true);
    quantize_gguf(path("tied.gguf"), path("tied-q4k.gguf"), GgmlType::Q4_K);
    EXPECT_EQ(File::open(path("tied-q4k.gguf"))->tensor("token_embd.weight").type, GgmlType::Q6_K);
}

TEST_F(QuantizeModel, Q3_K_MMix) {
    make_model(path("in.gguf"));
    const auto f = File::open(path("in.gguf"));
    QuantizeOptions opts;
    opts.mixed = true;
    std::map<std::string, GgmlType> plan;
    for (const TensorPlan& p : plan_quantization(*f, GgmlType::Q3_K, opts)) plan[p.name] = p.to;
    EXPECT_EQ(plan["blk.0.attn_v.weight"], GgmlType::Q5_K);
    EXPECT_EQ(plan["blk.1.attn_v.weight"], GgmlType::Q5_K);
    EXPECT_EQ(plan["blk.2.attn_v.weight"], GgmlType::Q4_K);
    EXPECT_EQ(plan["blk.0.ffn_down.weight"], GgmlType::Q4_K);  // n/16 = 0 layers get q5_K
    EXPECT_EQ(plan["blk.5.attn_q.weight"], GgmlType::Q3_K);
    EXPECT_EQ(plan["blk.0.ffn_gate.weight"], GgmlType::Q4_0);  // q3_K fallback
    EXPECT_EQ(plan["output.weight"], GgmlType::Q6_K);
}

TEST_F(QuantizeModel, RequantisationNeedsPermission) {
    make_model(path("in.gguf"));
    quantize_gguf(path("in.gguf"), path("q8.gguf"), GgmlType::Q8_0);
    try {
        quantize_gguf(path("q8.gguf"), path("q4.gguf"), GgmlType::Q4_0);
        ADD_FAILURE() << "re-quantised without permission";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("already quantised"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(path("q4.gguf")));
    QuantizeOptions opts;
    opts.allow_requantize = true;
    quantize_gguf(path("q8.gguf"), path("q4.gguf"), GgmlType::Q4_0, opts);
    EXPECT_EQ(File::open(path("q4.gguf"))->tensor("blk.2.attn_q.weight").type, GgmlType::Q4_0);
    // Same type: tensors are copied byte for byte, no permission needed.
    quantize_gguf(path("q8.gguf"), path("q8b.gguf"), GgmlType::Q8_0);
    const auto a = File::open(path("q8.gguf"));
    const auto b = File::open(path("q8b.gguf"));
    const auto& ta = a->tensor("blk.2.attn_q.weight");
    const auto& tb = b->tensor("blk.2.attn_q.weight");
    ASSERT_EQ(ta.nbytes, tb.nbytes);
    EXPECT_EQ(std::memcmp(ta.data, tb.data, ta.nbytes), 0);
}

TEST_F(QuantizeModel, ClearErrors) {
    make_model(path("in.gguf"));
    auto expect_error = [](auto&& fn, const std::string& part) {
        try {
            fn();
            ADD_FAILURE() << "no error; expected: " << part;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
        }
    };
    expect_error([&] { quantize_gguf(path("in.gguf"), path("o.gguf"), GgmlType::Q8_K); },
                 "activation type");
    QuantizeOptions mixed;
    mixed.mixed = true;
    expect_error([&] { quantize_gguf(path("in.gguf"), path("o.gguf"), GgmlType::Q4_0, mixed); },
                 "mixed (_M) preset");
    expect_error([&] { quantize_gguf(path("in.gguf"), path("in.gguf"), GgmlType::Q4_0); },
                 "is the input file");
    expect_error([&] { quantize_gguf(path("missing.gguf"), path("o.gguf"), GgmlType::Q4_0); },
                 "missing.gguf");
    expect_error([&] { quantize_gguf(path("in.gguf"), path("no/dir/o.gguf"), GgmlType::Q4_0); },
                 "no/dir/o.gguf");
}

// A NaN or Inf would be scaled into finite codes (a model that runs and answers nothing); the
// output name of a FIFO or a link is refused before any work, and left as it was.
TEST_F(QuantizeModel, RefusesNonFiniteWeightsAndNonRegularOutputs) {
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        Writer w;
        std::vector<float> v(256 * 4, 0.01f);  // [4 rows * 256]
        v[2 * 256 + 7] = bad;
        w.set_string("general.architecture", "llama");
        w.set_u32("llama.block_count", 1);
        w.add_tensor("blk.0.attn_q.weight", GgmlType::F32, {256, 4}, reinterpret_cast<const uint8_t*>(v.data()),
                     v.size() * sizeof(float));
        w.write(path("bad.gguf"));
        for (const GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::IQ4_XS, GgmlType::MXFP4}) {
            try {
                quantize_gguf(path("bad.gguf"), path("bad-q.gguf"), t);
                ADD_FAILURE() << "quantised a non-finite weight to " << ggml_type_name(t);
            } catch (const Error& e) {
                EXPECT_NE(std::string(e.what()).find("non-finite value"), std::string::npos) << e.what();
                EXPECT_NE(std::string(e.what()).find("row 2, column 7"), std::string::npos) << e.what();
            }
            EXPECT_FALSE(std::filesystem::exists(path("bad-q.gguf")));
        }
    }
    make_model(path("in.gguf"));
    ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0644), 0);
    std::ofstream(path("other.gguf")) << "not this";
    std::filesystem::create_symlink(path("other.gguf"), path("link.gguf"));
    for (const char* out : {"fifo", "link.gguf"}) {
        try {
            quantize_gguf(path("in.gguf"), path(out), GgmlType::Q8_0);
            ADD_FAILURE() << "wrote over " << out;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
        }
    }
    EXPECT_TRUE(std::filesystem::is_fifo(path("fifo")));
    EXPECT_TRUE(std::filesystem::is_symlink(path("link.gguf")));
    EXPECT_EQ(kvec::testing::read_file(path("other.gguf")).size(), 8u);
}

// A tensor large enough for the OpenMP path gives the same bytes as serial quantize_row.
TEST_F(QuantizeModel, ParallelConversionMatchesSerial) {
    Writer w;
    Source src;
    add(w, src, "blk.0.attn_q.weight", {1024, 256});  // 2^18 elements: converted in parallel
    w.write(path("big.gguf"));
    QuantizeOptions opts;
    opts.n_threads = 2;
    opts.pure = true;
    quantize_gguf(path("big.gguf"), path("big-q8.gguf"), GgmlType::Q8_0, opts);
    const auto f = File::open(path("big-q8.gguf"));
    const gguf::TensorInfo& t = f->tensor("blk.0.attn_q.weight");
    const std::vector<float>& x = src.values["blk.0.attn_q.weight"];
    std::vector<uint8_t> serial(t.nbytes);  // [256 rows * row bytes]
    quantize_row(GgmlType::Q8_0, x.data(), serial.data(), static_cast<int64_t>(x.size()));
    ASSERT_EQ(t.type, GgmlType::Q8_0);
    EXPECT_EQ(std::memcmp(serial.data(), t.data, t.nbytes), 0);
}

TEST(QuantizeTargets, ParseAndFileTypes) {
    auto t = parse_quantize_target("Q4_K_M");
    ASSERT_TRUE(t);
    EXPECT_EQ(t->type, GgmlType::Q4_K);
    EXPECT_TRUE(t->mixed);
    t = parse_quantize_target("q4_k_s");
    ASSERT_TRUE(t);
    EXPECT_FALSE(t->mixed);
    t = parse_quantize_target("q4_k");  // llama.cpp: Q4_K means Q4_K_M
    ASSERT_TRUE(t);
    EXPECT_TRUE(t->mixed);
    t = parse_quantize_target("BF16");
    ASSERT_TRUE(t);
    EXPECT_EQ(t->type, GgmlType::BF16);
    EXPECT_FALSE(parse_quantize_target("q4_k_xl"));
    EXPECT_FALSE(parse_quantize_target("q8_k"));
    // llama_ftype numbering (llama.h).
    EXPECT_EQ(llama_file_type(GgmlType::F32, false), 0u);
    EXPECT_EQ(llama_file_type(GgmlType::Q4_0, false), 2u);
    EXPECT_EQ(llama_file_type(GgmlType::Q8_0, false), 7u);
    EXPECT_EQ(llama_file_type(GgmlType::Q2_K, false), 10u);
    EXPECT_EQ(llama_file_type(GgmlType::Q3_K, true), 12u);
    EXPECT_EQ(llama_file_type(GgmlType::Q4_K, false), 14u);
    EXPECT_EQ(llama_file_type(GgmlType::Q5_K, true), 17u);
    EXPECT_EQ(llama_file_type(GgmlType::Q6_K, false), 18u);
    EXPECT_EQ(llama_file_type(GgmlType::BF16, false), 32u);
}

}  // namespace
}  // namespace kvec::quant
