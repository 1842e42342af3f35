// Hand-made broken GGUF files: each must give one kvec::Error naming the file and the problem.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "gguf/gguf.h"
#include "gguf_test_util.h"
#include "util/error.h"

namespace kvec::gguf {
namespace {

using kvec::testing::Bytes;

constexpr uint32_t kF32 = 0;
constexpr uint32_t kQ4_0 = 2;
constexpr uint64_t kHuge = 1ull << 60;

class Validation : public kvec::testing::TempDirTest {
protected:
    // Writes `b`, opens it, and expects an Error whose message has `part` and the path.
    void expect_error(const Bytes& b, const std::string& part) {
        const std::string file = path("bad.gguf");
        kvec::testing::write_file(file, b.data);
        try {
            File::open(file);
            ADD_FAILURE() << "opened; expected an error containing: " << part;
        } catch (const Error& e) {
            const std::string msg = e.what();
            EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg;
            EXPECT_NE(msg.find(file), std::string::npos) << "message must name the file: " << msg;
        }
    }

    // A valid file with one f32 tensor of n elements, for mutating single fields.
    static Bytes one_tensor(const std::vector<uint64_t>& dims, uint32_t type, uint64_t offset,
                            size_t data_bytes) {
        Bytes b;
        b.header(3, 1, 0).tensor("w", dims, type, offset).pad_to(32).zeros(data_bytes);
        return b;
    }
};

TEST_F(Validation, ValidBaselineOpens) {
    const Bytes b = one_tensor({32}, kF32, 0, 128);
    kvec::testing::write_file(path("ok.gguf"), b.data);
    auto f = File::open(path("ok.gguf"));
    ASSERT_EQ(f->tensors().size(), 1u);
    EXPECT_EQ(f->tensors()[0].nbytes, 128u);
    EXPECT_EQ(f->version(), 3u);
    // Version 2 has the same layout.
    Bytes v2 = b;
    v2.data[4] = 2;
    kvec::testing::write_file(path("v2.gguf"), v2.data);
    EXPECT_EQ(File::open(path("v2.gguf"))->version(), 2u);
}

TEST_F(Validation, EmptyAndTinyFiles) {
    expect_error(Bytes(), "too short");
    Bytes b;
    b.raw("GG", 2);
    expect_error(b, "too short");
}

TEST_F(Validation, BadMagic) {
    Bytes b;
    b.raw("GGML", 4).u32(3).u64(0).u64(0);
    expect_error(b, "bad magic");
}

TEST_F(Validation, UnsupportedVersions) {
    Bytes v1;
    v1.header(1, 0, 0);
    expect_error(v1, "unsupported GGUF version 1");
    Bytes v4;
    v4.header(4, 0, 0);
    expect_error(v4, "unsupported GGUF version 4");
    Bytes big_endian;
    big_endian.raw("GGUF", 4).u32(0x03000000u).u64(0).u64(0);
    expect_error(big_endian, "big-endian");
}

TEST_F(Validation, TruncatedHeader) {
    Bytes b;
    b.raw("GGUF", 4).u32(3).u32(0);  // tensor count cut in half
    expect_error(b, "truncated");
    Bytes c;
    c.header(3, 0, 1).str("key");  // value type missing
    expect_error(c, "truncated");
}

TEST_F(Validation, HugeCounts) {
    Bytes kv;
    kv.header(3, 0, kHuge);
    expect_error(kv, "metadata count");
    Bytes tensors;
    tensors.header(3, kHuge, 0);
    expect_error(tensors, "tensor count");
    Bytes arr;
    arr.header(3, 0, 1).str("a").u32(9).u32(5).u64(kHuge);
    expect_error(arr, "array count 1152921504606846976");
    Bytes str_arr;
    str_arr.header(3, 0, 1).str("a").u32(9).u32(8).u64(UINT64_MAX);
    expect_error(str_arr, "array count");
    Bytes strlen;
    strlen.header(3, 0, 1).u64(kHuge).raw("key", 3).zeros(16);
    expect_error(strlen, "string length");
    Bytes value_len;
    value_len.header(3, 0, 1).str("k").u32(8).u64(UINT64_MAX);
    expect_error(value_len, "string length");
}

TEST_F(Validation, BadValueTypes) {
    Bytes t;
    t.header(3, 0, 1).str("k").u32(13).u32(0);
    expect_error(t, "invalid value type 13");
    Bytes et;
    et.header(3, 0, 1).str("k").u32(9).u32(77).u64(0);
    expect_error(et, "invalid array element type 77");
    Bytes boolean;
    boolean.header(3, 0, 1).str("k").u32(7).u8(2);
    expect_error(boolean, "invalid bool");
    Bytes empty_key;
    empty_key.header(3, 0, 1).str("").u32(4).u32(0);
    expect_error(empty_key, "empty key");
}

TEST_F(Validation, DeeplyNestedArrays) {
    Bytes b;
    b.header(3, 0, 1).str("k").u32(9);
    for (int i = 0; i < 20; ++i) b.u32(9).u64(1);  // array of array of ...
    b.u32(4).u64(0);
    expect_error(b, "nested deeper");
}

TEST_F(Validation, DuplicateKey) {
    Bytes b;
    b.header(3, 0, 2).kv_u32("k", 1).kv_u32("k", 2);
    expect_error(b, "duplicate metadata key 'k'");
}

TEST_F(Validation, BadAlignment) {
    for (uint32_t a : {0u, 3u, 48u}) {
        SCOPED_TRACE(a);
        Bytes b;
        b.header(3, 0, 1).kv_u32("general.alignment", a);
        expect_error(b, "invalid general.alignment");
    }
    Bytes s;
    s.header(3, 0, 1).kv_string("general.alignment", "32");
    expect_error(s, "general.alignment");
}

TEST_F(Validation, AlignmentIsUsedForOffsetsAndDataStart) {
    Bytes b;
    // The directory ends at byte 90: the data section starts at 128 (not 96, as 32 would give).
    b.header(3, 1, 1).kv_u32("general.alignment", 64).tensor("w", {16}, kF32, 0);
    ASSERT_EQ(b.size(), 90u);
    b.pad_to(64).f32(7.0f).zeros(60);
    kvec::testing::write_file(path("a64.gguf"), b.data);
    auto f = File::open(path("a64.gguf"));
    EXPECT_EQ(f->alignment(), 64u);
    EXPECT_EQ(f->data_offset(), 128u);
    float first;
    std::memcpy(&first, f->tensors()[0].data, 4);
    EXPECT_EQ(first, 7.0f);
    // An offset that is a multiple of 32 but not of 64 is rejected.
    Bytes m;
    m.header(3, 1, 1).kv_u32("general.alignment", 64).tensor("w", {16}, kF32, 32).pad_to(64).zeros(128);
    expect_error(m, "not a multiple of the alignment 64");
}

TEST_F(Validation, TensorMisalignedForItsType) {
    // general.alignment 1 is a power of two, but an F32 tensor at data offset 1 (or an odd data
    // section start) would be read as floats from a misaligned address (found by fuzz_forward).
    Bytes b;
    b.header(3, 1, 1).kv_u32("general.alignment", 1).tensor("w", {16}, kF32, 1);
    b.zeros(80);
    expect_error(b, "is not aligned to the 4 bytes its type f32 needs (general.alignment is 1)");
    // The same tensor at an offset that keeps it aligned loads (the data section starts right
    // after the 90-byte directory: offset 2 puts it at byte 92).
    Bytes ok;
    ok.header(3, 1, 1).kv_u32("general.alignment", 1).tensor("w", {16}, kF32, 2);
    ASSERT_EQ(ok.size(), 90u);
    ok.zeros(2 + 64);
    kvec::testing::write_file(path("a1.gguf"), ok.data);
    EXPECT_NO_THROW(File::open(path("a1.gguf")));
}

TEST_F(Validation, TensorBeyondFileEnd) {
    expect_error(one_tensor({32}, kF32, 0, 127), "beyond the end of the file");
    expect_error(one_tensor({32}, kF32, UINT64_MAX - 31, 128), "beyond the end of the file");
    // Directory fine, but no data section at all.
    Bytes b;
    b.header(3, 1, 0).tensor("w", {32}, kF32, 0);
    expect_error(b, "beyond the end of the file");
}

TEST_F(Validation, MisalignedOffset) {
    expect_error(one_tensor({8}, kF32, 4, 64), "not a multiple of the alignment 32");
}

TEST_F(Validation, UnsupportedTensorType) {
    expect_error(one_tensor({256}, 16, 0, 4096), "unsupported tensor type 16 (iq2_xxs)");
    expect_error(one_tensor({32}, 99, 0, 128), "unsupported tensor type 99");
}

TEST_F(Validation, BadDimensions) {
    expect_error(one_tensor({32, 0}, kF32, 0, 128), "dimension 1 is zero");
    expect_error(one_tensor({}, kF32, 0, 128), "number of dimensions 0");
    expect_error(one_tensor({1, 1, 1, 1, 1}, kF32, 0, 128), "number of dimensions 5");
    expect_error(one_tensor({1ull << 63}, kF32, 0, 128), "too large");
    expect_error(one_tensor({48}, kQ4_0, 0, 128), "not a multiple of the q4_0 block size 32");
}

TEST_F(Validation, ElementCountAndSizeOverflow) {
    expect_error(one_tensor({1ull << 32, 1ull << 32, 1ull << 32}, kF32, 0, 128),
                 "element count overflows");
    expect_error(one_tensor({1ull << 62}, kF32, 0, 128), "data size overflows");
}

TEST_F(Validation, DuplicateTensorName) {
    Bytes b;
    b.header(3, 2, 0).tensor("w", {8}, kF32, 0).tensor("w", {8}, kF32, 32).pad_to(32).zeros(64);
    expect_error(b, "duplicate tensor name 'w'");
}

TEST_F(Validation, OverlappingTensors) {
    Bytes b;
    b.header(3, 2, 0).tensor("a", {16}, kF32, 0).tensor("b", {8}, kF32, 32).pad_to(32).zeros(128);
    expect_error(b, "overlap");
    // Touching is fine.
    Bytes ok;
    ok.header(3, 2, 0).tensor("a", {16}, kF32, 0).tensor("b", {8}, kF32, 64).pad_to(32).zeros(96);
    kvec::testing::write_file(path("touch.gguf"), ok.data);
    EXPECT_EQ(File::open(path("touch.gguf"))->tensors().size(), 2u);
}

TEST_F(Validation, EmptyTensorName) {
    Bytes b;
    b.header(3, 1, 0).tensor("", {8}, kF32, 0).pad_to(32).zeros(32);
    expect_error(b, "empty name");
}

TEST_F(Validation, NotAFile) {
    EXPECT_THROW(File::open(dir_), Error);
    EXPECT_THROW(File::open(path("does-not-exist.gguf")), Error);
}

TEST_F(Validation, HostileNameInMessageIsEscaped) {
    Bytes b;
    b.header(3, 2, 0)
        .tensor(std::string("a\x01\n", 3), {8}, kF32, 0)
        .tensor(std::string("a\x01\n", 3), {8}, kF32, 32)
        .pad_to(32)
        .zeros(64);
    expect_error(b, "'a\\x01\\x0a'");
}

// A small model followed by a huge tail that no tensor references (a sparse file) is not read
// or copied whole: only the bytes up to the end of the last tensor are held (issue 23).
TEST_F(Validation, SparseTailIsNotCopied) {
    Writer w;
    w.set_string("general.architecture", "llama");
    std::vector<float> data(64, 1.5f);
    w.add_tensor("t", GgmlType::F32, {64}, data.data(), data.size() * sizeof(float));
    const std::string file = path("sparse.gguf");
    w.write(file);
    const auto small = std::filesystem::file_size(file);
    const uint64_t huge = uint64_t{1} << 40;  // 1 TiB of holes: more than any test machine's memory
    if (::truncate(file.c_str(), static_cast<off_t>(huge)) != 0) GTEST_SKIP() << "no sparse files here";
    for (LoadMode mode : {LoadMode::Copy, LoadMode::Auto, LoadMode::Map}) {
        SCOPED_TRACE(static_cast<int>(mode));
        auto f = File::open(file, mode);
        EXPECT_EQ(f->file_size(), huge);
        if (mode != LoadMode::Map) EXPECT_LE(f->bytes().size(), small);
        const TensorInfo& t = f->tensor("t");
        float x = 0;
        std::memcpy(&x, t.data + 4 * 63, 4);
        EXPECT_EQ(x, 1.5f);
    }
}

}  // namespace
}  // namespace kvec::gguf
