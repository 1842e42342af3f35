// Writer -> reader round trips, the writer's byte layout, and the bundled vocabulary files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "gguf/gguf.h"
#include "gguf_test_util.h"
#include "util/error.h"

namespace kvec::gguf {
namespace {

using kvec::testing::Bytes;
using kvec::testing::TempDirTest;

Value scalar(ValueType t, int64_t i) {
    Value v;
    v.type = t;
    v.i = i;
    v.u = static_cast<uint64_t>(i);
    return v;
}

Value int_array(ValueType et, std::vector<int64_t> xs) {
    Value v;
    v.type = ValueType::ARRAY;
    v.array_type = et;
    v.ints = std::move(xs);
    return v;
}

Value float_array(ValueType et, std::vector<double> xs) {
    Value v;
    v.type = ValueType::ARRAY;
    v.array_type = et;
    v.floats = std::move(xs);
    return v;
}

Value array_of_arrays(std::vector<Value> xs) {
    Value v;
    v.type = ValueType::ARRAY;
    v.array_type = ValueType::ARRAY;
    v.arrays = std::move(xs);
    return v;
}

// Deep equality of the fields that matter for each type.
void expect_same(const Value& a, const Value& b, const std::string& key) {
    SCOPED_TRACE(key);
    ASSERT_EQ(a.type, b.type);
    switch (a.type) {
        case ValueType::FLOAT32:
        case ValueType::FLOAT64: EXPECT_EQ(a.f, b.f); break;
        case ValueType::BOOL: EXPECT_EQ(a.b, b.b); break;
        case ValueType::STRING: EXPECT_EQ(a.str, b.str); break;
        case ValueType::ARRAY:
            ASSERT_EQ(a.array_type, b.array_type);
            ASSERT_EQ(a.array_size(), b.array_size());
            EXPECT_EQ(a.ints, b.ints);
            EXPECT_EQ(a.floats, b.floats);
            EXPECT_EQ(a.strings, b.strings);
            for (size_t i = 0; i < a.arrays.size(); ++i) expect_same(a.arrays[i], b.arrays[i], key + "[]");
            break;
        default:
            EXPECT_EQ(a.i, b.i);
            EXPECT_EQ(a.u, b.u);
            break;
    }
}

std::vector<std::pair<std::string, Value>> every_value_type() {
    std::vector<std::pair<std::string, Value>> kv;
    kv.emplace_back("t.u8", scalar(ValueType::UINT8, 250));
    kv.emplace_back("t.i8", scalar(ValueType::INT8, -100));
    kv.emplace_back("t.u16", scalar(ValueType::UINT16, 65000));
    kv.emplace_back("t.i16", scalar(ValueType::INT16, -30000));
    kv.emplace_back("t.u32", Value::from_u32(4000000000u));
    kv.emplace_back("t.i32", Value::from_i32(-2000000000));
    kv.emplace_back("t.u64", Value::from_u64(0xFEDCBA9876543210ull));  // above INT64_MAX
    kv.emplace_back("t.i64", scalar(ValueType::INT64, std::numeric_limits<int64_t>::min()));
    kv.emplace_back("t.f32", Value::from_f32(-1.5e-7f));
    Value f64;
    f64.type = ValueType::FLOAT64;
    f64.f = 3.141592653589793;
    kv.emplace_back("t.f64", f64);
    kv.emplace_back("t.bool_true", Value::from_bool(true));
    kv.emplace_back("t.bool_false", Value::from_bool(false));
    kv.emplace_back("t.string", Value::from_string("h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c"));
    kv.emplace_back("t.empty_string", Value::from_string(""));
    kv.emplace_back("t.arr.u8", int_array(ValueType::UINT8, {0, 1, 255}));
    kv.emplace_back("t.arr.i8", int_array(ValueType::INT8, {-128, 0, 127}));
    kv.emplace_back("t.arr.u16", int_array(ValueType::UINT16, {0, 65535}));
    kv.emplace_back("t.arr.i16", int_array(ValueType::INT16, {-32768, 32767}));
    kv.emplace_back("t.arr.u32", int_array(ValueType::UINT32, {0, 4294967295ll}));
    kv.emplace_back("t.arr.i32", Value::from_i32s({-1, 0, 2147483647}));
    kv.emplace_back("t.arr.u64", int_array(ValueType::UINT64, {0, std::numeric_limits<int64_t>::max()}));
    kv.emplace_back("t.arr.i64", int_array(ValueType::INT64, {std::numeric_limits<int64_t>::min(), 5}));
    kv.emplace_back("t.arr.f32", Value::from_f32s({0.25f, -2.0f, 1e30f}));
    kv.emplace_back("t.arr.f64", float_array(ValueType::FLOAT64, {1e-300, -0.1}));
    kv.emplace_back("t.arr.bool", int_array(ValueType::BOOL, {1, 0, 1}));
    kv.emplace_back("t.arr.string", Value::from_strings({"a", "", "\xe2\x96\x81the"}));
    kv.emplace_back("t.arr.empty", Value::from_strings({}));
    kv.emplace_back("t.arr.arr",
                    array_of_arrays({Value::from_i32s({1, 2}), Value::from_i32s({}),
                                     Value::from_i32s({3})}));
    kv.emplace_back("t.arr.arr.arr",
                    array_of_arrays({array_of_arrays({Value::from_strings({"x", "y"})}),
                                     array_of_arrays({})}));
    return kv;
}

TEST_F(TempDirTest, EveryValueTypeRoundTrips) {
    Writer w;
    const auto kv = every_value_type();
    for (const auto& [k, v] : kv) w.set(k, v);
    const std::string file = path("values.gguf");
    w.write(file);

    auto f = File::open(file);
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->alignment(), 32u);
    EXPECT_TRUE(f->tensors().empty());
    EXPECT_EQ(f->file_size(), kvec::testing::read_file(file).size());
    ASSERT_EQ(f->metadata().size(), kv.size());
    for (size_t i = 0; i < kv.size(); ++i) {
        EXPECT_EQ(f->metadata()[i].first, kv[i].first) << "metadata keeps file order";
        expect_same(f->metadata()[i].second, kv[i].second, kv[i].first);
    }
    // Typed getters.
    EXPECT_EQ(f->get_uint("t.u32"), 4000000000u);
    EXPECT_EQ(f->get_uint("t.u64"), 0xFEDCBA9876543210ull);
    EXPECT_EQ(f->get_uint("t.u8"), 250u);
    EXPECT_EQ(f->get_int("t.i32"), -2000000000);
    EXPECT_EQ(f->get_int("t.i8"), -100);
    EXPECT_FLOAT_EQ(static_cast<float>(f->get_float("t.f32")), -1.5e-7f);
    EXPECT_DOUBLE_EQ(f->get_float("t.f64"), 3.141592653589793);
    EXPECT_DOUBLE_EQ(f->get_float("t.u16"), 65000.0);  // integers are accepted as floats
    EXPECT_TRUE(f->get_bool("t.bool_true", false));
    EXPECT_FALSE(f->get_bool("t.bool_false", true));
    EXPECT_EQ(f->get_string("t.string"), "h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c");
    EXPECT_EQ(f->get_array("t.arr.string", ValueType::STRING).strings.size(), 3u);
    EXPECT_EQ(f->get_array("t.arr.i32", ValueType::INT32).ints[2], 2147483647);
    // Integer element types are interchangeable, as are the float ones.
    EXPECT_EQ(f->get_array("t.arr.u32", ValueType::INT32).ints[1], 4294967295ll);
    EXPECT_EQ(f->get_array("t.arr.f64", ValueType::FLOAT32).floats.size(), 2u);
    EXPECT_EQ(f->get_array("t.arr.arr", ValueType::ARRAY).arrays[2].ints[0], 3);
    // Fallbacks.
    EXPECT_EQ(f->get_uint("absent", 7), 7u);
    EXPECT_EQ(f->get_float("absent", 0.5), 0.5);
    EXPECT_EQ(f->get_string("absent", "fb"), "fb");
    EXPECT_FALSE(f->has("absent"));
    EXPECT_TRUE(f->has("t.u8"));
}

// A hand-made integer Value may set only one of its two views.
TEST_F(TempDirTest, IntegerValuesWithOneViewSet) {
    Value only_i;
    only_i.type = ValueType::UINT16;
    only_i.i = 500;
    Value only_u;
    only_u.type = ValueType::INT64;
    only_u.u = 7;
    Writer w;
    w.set("a", only_i);
    w.set("b", only_u);
    w.write(path("views.gguf"));
    auto f = File::open(path("views.gguf"));
    EXPECT_EQ(f->get_uint("a"), 500u);
    EXPECT_EQ(f->get_int("b"), 7);
    EXPECT_EQ(f->find("a")->u, 500u);
    EXPECT_EQ(f->find("b")->i, 7);
}

TEST_F(TempDirTest, GettersNameKeyAndTypes) {
    Writer w;
    w.set_string("s", "x");
    w.set_i32("neg", -3);
    w.set("big", Value::from_u64(0xFFFFFFFFFFFFFFFFull));
    w.write(path("g.gguf"));
    auto f = File::open(path("g.gguf"));
    auto expect_error = [](auto&& fn, const std::string& part) {
        try {
            fn();
            ADD_FAILURE() << "no error; expected one containing: " << part;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
        }
    };
    expect_error([&] { f->get_uint("missing.key"); }, "missing metadata key 'missing.key'");
    expect_error([&] { f->get_string("missing.key"); }, "missing metadata key");
    expect_error([&] { f->get_uint("s"); }, "key 's' has type string, expected an unsigned integer");
    expect_error([&] { f->get_uint("neg"); }, "negative");
    expect_error([&] { f->get_int("big"); }, "too large");
    expect_error([&] { f->get_float("s"); }, "expected a float");
    expect_error([&] { f->get_string("neg"); }, "has type int32, expected string");
    expect_error([&] { f->get_bool("s", false); }, "expected bool");
    expect_error([&] { f->get_array("s", ValueType::STRING); }, "expected array of string");
    expect_error([&] { f->tensor("nope"); }, "missing tensor 'nope'");
    expect_error([&] { f->get_uint("s"); }, path("g.gguf"));
    EXPECT_EQ(f->find_tensor("nope"), nullptr);
}

// Valid random contents for a tensor of `type` and `dims` (raw bytes; quantised blocks with
// random scales are still well-formed bytes for the reader).
std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> b(n);
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    return b;
}

class EveryTensorType : public TempDirTest, public ::testing::WithParamInterface<GgmlType> {};

TEST_P(EveryTensorType, RoundTrips) {
    const GgmlType type = GetParam();
    const auto& traits = ggml_type_traits(type);
    const int64_t bs = traits.block_size;
    struct Shape {
        std::string name;
        std::vector<int64_t> dims;
    };
    const std::vector<Shape> shapes = {
        {"a.1d", {bs * 3}},
        {"b.2d", {bs * 2, 5}},
        {"c.3d", {bs, 3, 2}},
        {"d.4d", {bs, 1, 2, 3}},
    };
    Writer w;
    w.set_string("general.architecture", "test");
    std::vector<std::vector<uint8_t>> contents;
    for (size_t i = 0; i < shapes.size(); ++i) {
        int64_t rows = 1;
        for (size_t d = 1; d < shapes[i].dims.size(); ++d) rows *= shapes[i].dims[d];
        const size_t nbytes = ggml_row_size(type, shapes[i].dims[0]) * static_cast<size_t>(rows);
        contents.push_back(random_bytes(nbytes, static_cast<uint32_t>(i + 1)));
        w.add_tensor(shapes[i].name, type, shapes[i].dims, contents.back().data(), nbytes);
    }
    w.write(path("t.gguf"));

    auto f = File::open(path("t.gguf"));
    ASSERT_EQ(f->tensors().size(), shapes.size());
    const uint8_t* base = nullptr;
    for (size_t i = 0; i < shapes.size(); ++i) {
        const TensorInfo& t = f->tensors()[i];
        EXPECT_EQ(t.name, shapes[i].name);
        EXPECT_EQ(t.type, type);
        EXPECT_EQ(t.n_dims, static_cast<int>(shapes[i].dims.size()));
        for (int d = 0; d < 4; ++d) {
            const int64_t want = d < t.n_dims ? shapes[i].dims[d] : 1;
            EXPECT_EQ(t.ne[d], want);
        }
        EXPECT_EQ(t.offset % 32, 0u);
        ASSERT_EQ(t.nbytes, contents[i].size());
        EXPECT_EQ(0, std::memcmp(t.data, contents[i].data(), t.nbytes));
        if (i == 0) base = t.data - t.offset;
        EXPECT_EQ(t.data - t.offset, base) << "offsets are relative to one data section";
        EXPECT_EQ(f->data_offset() % 32, 0u);
        EXPECT_EQ(&f->tensor(t.name), &t);
    }
    // The data section starts aligned within the file.
    const std::vector<uint8_t> raw = kvec::testing::read_file(path("t.gguf"));
    EXPECT_EQ(raw.size() % 32, 0u);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, EveryTensorType,
                         ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::BF16,
                                           GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                                           GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q8_1,
                                           GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,
                                           GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_K),
                         [](const auto& info) { return std::string(ggml_type_name(info.param)); });

TEST_F(TempDirTest, CustomAlignmentIsHonoured) {
    Writer w;
    w.set_u32("general.alignment", 256);
    const std::vector<float> a(3, 1.0f);   // [3]: 12 bytes, padded to 256
    const std::vector<float> b(5, 2.0f);   // [5]
    w.add_tensor("a", GgmlType::F32, {3}, a.data(), 12);
    w.add_tensor("b", GgmlType::F32, {5}, b.data(), 20);
    w.write(path("al.gguf"));
    auto f = File::open(path("al.gguf"));
    EXPECT_EQ(f->alignment(), 256u);
    EXPECT_EQ(f->tensors()[0].offset, 0u);
    EXPECT_EQ(f->tensors()[1].offset, 256u);
    // The data section start is at a multiple of 256 from the file start.
    const std::vector<uint8_t> raw = kvec::testing::read_file(path("al.gguf"));
    const size_t data_start = raw.size() - 256 - 256;  // two tensors, each padded to 256
    EXPECT_EQ(data_start % 256, 0u);
    EXPECT_EQ(std::memcmp(raw.data() + data_start + 256, b.data(), 20), 0);
}

// The writer's bytes, compared against a file built field by field from the GGUF layout.
TEST_F(TempDirTest, WriterLayoutMatchesTheSpecification) {
    Writer w;
    w.set_string("general.architecture", "llama");
    w.set_u32("llama.block_count", 2);
    w.set("tokenizer.ggml.tokens", Value::from_strings({"<s>", "hi"}));
    const uint16_t half[32] = {0x3c00};  // [32] f16: 1.0, then zeros
    w.add_tensor("w", GgmlType::F16, {32}, half, sizeof half);
    w.write(path("layout.gguf"));

    Bytes e;
    e.header(3, 1, 3);
    e.kv_string("general.architecture", "llama");
    e.kv_u32("llama.block_count", 2);
    e.str("tokenizer.ggml.tokens").u32(9).u32(8).u64(2).str("<s>").str("hi");
    e.tensor("w", {32}, 1, 0);
    e.pad_to(32);
    e.raw(half, sizeof half);
    e.pad_to(32);
    EXPECT_EQ(kvec::testing::read_file(path("layout.gguf")), e.data);
}

TEST_F(TempDirTest, WriterReplacesKeysInPlaceAndRejectsBadTensors) {
    Writer w;
    w.set_u32("a", 1);
    w.set_u32("b", 2);
    w.set_string("a", "again");
    ASSERT_NE(w.find("a"), nullptr);
    EXPECT_EQ(w.find("a")->str, "again");
    const std::vector<float> x(64, 0.0f);  // [64]
    EXPECT_THROW(w.add_tensor("t", GgmlType::F32, {64}, x.data(), 100), Error);   // wrong size
    EXPECT_THROW(w.add_tensor("t", GgmlType::F32, {0}, x.data(), 0), Error);      // zero dim
    EXPECT_THROW(w.add_tensor("t", GgmlType::Q4_0, {48}, x.data(), 27), Error);   // not a block multiple
    EXPECT_THROW(w.add_tensor("t", GgmlType::F32, {1, 1, 1, 1, 1}, x.data(), 4), Error);  // 5-D
    EXPECT_THROW(w.add_tensor(std::string(64, 'n'), GgmlType::F32, {1}, x.data(), 4), Error);
    w.add_tensor("t", GgmlType::F32, {64}, x.data(), 256);
    EXPECT_THROW(w.add_tensor("t", GgmlType::F32, {64}, x.data(), 256), Error);   // duplicate
    w.write(path("k.gguf"));
    auto f = File::open(path("k.gguf"));
    ASSERT_EQ(f->metadata().size(), 2u);
    EXPECT_EQ(f->metadata()[0].first, "a");
    EXPECT_EQ(f->get_string("a"), "again");
}

TEST_F(TempDirTest, WriteIsAtomicAndFillErrorsLeaveNothing) {
    const std::string out = path("atomic.gguf");
    {
        Writer w;
        w.set_u32("version.marker", 1);
        w.write(out);
    }
    Writer w;
    w.set_u32("version.marker", 2);
    w.add_tensor_fill("t", GgmlType::F32, {4}, [](uint8_t*, size_t) { fail("producer failed"); });
    EXPECT_THROW(w.write(out), Error);
    // The old file is intact and no temporary file is left behind.
    EXPECT_EQ(File::open(out)->get_uint("version.marker"), 1u);
    size_t n_files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
        (void)entry;
        ++n_files;
    }
    EXPECT_EQ(n_files, 1u);
    EXPECT_THROW(Writer().write(dir_ + "/no-such-dir/x.gguf"), Error);
}

TEST_F(TempDirTest, FillTensorsAreWritten) {
    Writer w;
    w.add_tensor_fill("t", GgmlType::F32, {4, 2}, [](uint8_t* dst, size_t n) {
        ASSERT_EQ(n, 32u);
        for (size_t i = 0; i < n / 4; ++i) {
            const float v = static_cast<float>(i);
            std::memcpy(dst + 4 * i, &v, 4);
        }
    });
    w.write(path("fill.gguf"));
    auto f = File::open(path("fill.gguf"));
    const TensorInfo& t = f->tensor("t");
    float v7;
    std::memcpy(&v7, t.data + 28, 4);
    EXPECT_EQ(v7, 7.0f);
}

// The two vocabulary-only GGUF files from llama.cpp. Expected keys and values were read with an
// independent Python parser of the GGUF layout.
TEST(VocabFiles, LlamaSpmParses) {
    auto f = File::open(std::string(KVEC_SOURCE_DIR) + "/data/tokenizer-vectors/ggml-vocab-llama-spm.gguf");
    EXPECT_EQ(f->version(), 3u);
    EXPECT_TRUE(f->tensors().empty());
    EXPECT_EQ(f->metadata().size(), 22u);
    EXPECT_EQ(f->get_string("general.architecture"), "llama");
    EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "llama");
    EXPECT_EQ(f->get_uint("llama.block_count"), 32u);
    EXPECT_EQ(f->get_uint("llama.context_length"), 4096u);
    EXPECT_NEAR(f->get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-9);
    const Value& tokens = f->get_array("tokenizer.ggml.tokens", ValueType::STRING);
    ASSERT_EQ(tokens.strings.size(), 32000u);
    EXPECT_EQ(tokens.strings[0], "<unk>");
    EXPECT_EQ(tokens.strings[1], "<s>");
    EXPECT_EQ(tokens.strings[2], "</s>");
    const Value& scores = f->get_array("tokenizer.ggml.scores", ValueType::FLOAT32);
    ASSERT_EQ(scores.floats.size(), 32000u);
    EXPECT_EQ(scores.floats.back(), -31740.0);
    const Value& types = f->get_array("tokenizer.ggml.token_type", ValueType::INT32);
    ASSERT_EQ(types.ints.size(), 32000u);
    EXPECT_EQ(types.ints[0], 2);
    EXPECT_EQ(types.ints[1], 3);
    EXPECT_EQ(f->get_uint("tokenizer.ggml.bos_token_id"), 1u);
    EXPECT_EQ(f->get_uint("tokenizer.ggml.eos_token_id"), 2u);
    EXPECT_TRUE(f->get_bool("tokenizer.ggml.add_bos_token", false));
    EXPECT_FALSE(f->get_bool("tokenizer.ggml.add_eos_token", true));
}

TEST(VocabFiles, Gpt2Parses) {
    auto f = File::open(std::string(KVEC_SOURCE_DIR) + "/data/tokenizer-vectors/ggml-vocab-gpt-2.gguf");
    EXPECT_EQ(f->metadata().size(), 16u);
    EXPECT_EQ(f->get_string("general.architecture"), "gpt2");
    EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(f->get_string("tokenizer.ggml.pre"), "gpt-2");
    const Value& tokens = f->get_array("tokenizer.ggml.tokens", ValueType::STRING);
    ASSERT_EQ(tokens.strings.size(), 50257u);
    EXPECT_EQ(tokens.strings[0], "!");
    EXPECT_EQ(tokens.strings.back(), "<|endoftext|>");
    const Value& merges = f->get_array("tokenizer.ggml.merges", ValueType::STRING);
    ASSERT_EQ(merges.strings.size(), 50000u);
    EXPECT_EQ(merges.strings[0], "\xc4\xa0 t");  // "Ġ t"
    EXPECT_EQ(f->get_uint("tokenizer.ggml.bos_token_id"), 50256u);
    EXPECT_FALSE(f->has("tokenizer.ggml.scores"));
}

// Re-writing a file's metadata with the writer reproduces it byte for byte.
TEST_F(TempDirTest, VocabFileRewritesIdentically) {
    const std::string src = std::string(KVEC_SOURCE_DIR) + "/data/tokenizer-vectors/ggml-vocab-llama-spm.gguf";
    auto f = File::open(src);
    Writer w;
    for (const auto& [k, v] : f->metadata()) w.set(k, v);
    w.write(path("copy.gguf"));
    EXPECT_TRUE(kvec::testing::read_file(path("copy.gguf")) == kvec::testing::read_file(src));
}

}  // namespace
}  // namespace kvec::gguf
