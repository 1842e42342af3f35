// Fuzz-style robustness: every truncation and a few thousand seeded random mutations of a
// small valid file must either open or throw kvec::Error; never crash, hang or read out of
// bounds (CI runs this under ASan + UBSan). Files that open are walked completely.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>

#include "gguf/gguf.h"
#include "gguf_test_util.h"
#include "util/error.h"

namespace kvec::gguf {
namespace {

std::vector<uint8_t> make_valid_file(const std::string& file) {
    Writer w;
    w.set_string("general.architecture", "llama");
    w.set_u32("llama.block_count", 2);
    w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    w.set_bool("tokenizer.ggml.add_bos_token", true);
    w.set("tokenizer.ggml.tokens", Value::from_strings({"<s>", "</s>", "hello", "\xe2\x96\x81w"}));
    w.set("tokenizer.ggml.scores", Value::from_f32s({0.0f, -1.0f, -2.5f, -3.0f}));
    w.set("tokenizer.ggml.token_type", Value::from_i32s({3, 3, 1, 1}));
    Value nested;
    nested.type = ValueType::ARRAY;
    nested.array_type = ValueType::ARRAY;
    nested.arrays = {Value::from_i32s({1, 2}), Value::from_i32s({3})};
    w.set("test.nested", nested);
    w.set("test.u64", Value::from_u64(123456789012345ull));
    std::vector<uint8_t> f32(8 * 2 * 4, 0x3f);   // [2, 8] f32
    std::vector<uint8_t> q4(18 * 2, 0x11);       // [64] q4_0: 2 blocks
    std::vector<uint8_t> q8(34 * 2, 0x22);       // [2, 32] q8_0
    w.add_tensor("token_embd.weight", GgmlType::F32, {8, 2}, f32.data(), f32.size());
    w.add_tensor("blk.0.attn_q.weight", GgmlType::Q4_0, {64}, q4.data(), q4.size());
    w.add_tensor("output.weight", GgmlType::Q8_0, {32, 2}, q8.data(), q8.size());
    w.write(file);
    return kvec::testing::read_file(file);
}

// Opens `file`; returns true if it opened. Anything but kvec::Error fails the test.
bool open_and_walk(const std::string& file) {
    try {
        auto f = File::open(file);
        size_t checksum = 0;
        for (const auto& [k, v] : f->metadata()) {
            checksum += k.size() + v.str.size() + v.array_size();
            for (const auto& s : v.strings) checksum += s.size();
        }
        for (const TensorInfo& t : f->tensors()) {
            EXPECT_GT(t.nbytes, 0u);
            EXPECT_LE(t.data + t.nbytes, t.data - t.offset + f->file_size());
            for (size_t i = 0; i < t.nbytes; ++i) checksum += t.data[i];  // ASan checks bounds
        }
        volatile size_t sink = checksum;
        (void)sink;
        return true;
    } catch (const Error&) {
        return false;
    } catch (const std::exception& e) {
        ADD_FAILURE() << "unexpected exception type: " << e.what();
        return false;
    }
}

// An in-memory file (memfd) reachable by path: rewriting it thousands of times is fast, unlike
// files on an overlay filesystem.
class MemFile {
public:
    MemFile() : fd_(::memfd_create("kvec-gguf-fuzz", MFD_CLOEXEC)) {
        EXPECT_GE(fd_, 0);
        path_ = "/proc/self/fd/" + std::to_string(fd_);
    }
    ~MemFile() { ::close(fd_); }
    const std::string& set(const std::vector<uint8_t>& bytes) {
        EXPECT_EQ(::ftruncate(fd_, 0), 0);
        EXPECT_EQ(::pwrite(fd_, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
        return path_;
    }

private:
    int fd_;
    std::string path_;
};

class GgufFuzz : public kvec::testing::TempDirTest {};

TEST_F(GgufFuzz, EveryTruncationFailsCleanly) {
    const std::vector<uint8_t> valid = make_valid_file(path("valid.gguf"));
    // The writer pads the last tensor's data to the alignment (32): only that padding may be
    // cut off without the file becoming invalid.
    size_t last_nbytes = 0;
    {
        auto f = File::open(path("valid.gguf"));
        last_nbytes = f->tensors().back().nbytes;
    }
    const size_t data_end = valid.size() - (32 - last_nbytes % 32) % 32;
    MemFile mem;
    size_t n_opened = 0;
    for (size_t len = 0; len < valid.size(); ++len) {
        const std::string& file =
            mem.set(std::vector<uint8_t>(valid.begin(), valid.begin() + static_cast<long>(len)));
        const bool opened = open_and_walk(file);
        n_opened += opened ? 1 : 0;
        EXPECT_EQ(opened, len >= data_end) << "file cut at " << len << " of " << valid.size();
    }
    EXPECT_EQ(n_opened, valid.size() - data_end);
}

TEST_F(GgufFuzz, RandomMutationsFailCleanly) {
    const std::vector<uint8_t> valid = make_valid_file(path("valid.gguf"));
    MemFile mem;
    const uint64_t extremes[] = {0,          1,          2,          31,         32,
                                 255,        0x7fffffff, 0x80000000, 0xffffffff, 1ull << 32,
                                 1ull << 60, 1ull << 62, INT64_MAX,  1ull << 63, UINT64_MAX,
                                 UINT64_MAX - 31, valid.size(), valid.size() - 1};
    std::mt19937_64 rng(20240611);
    int n_opened = 0;
    constexpr int kIterations = 3000;
    for (int it = 0; it < kIterations; ++it) {
        std::vector<uint8_t> b = valid;
        const int n_mutations = 1 + static_cast<int>(rng() % 3);
        for (int m = 0; m < n_mutations; ++m) {
            const size_t pos = static_cast<size_t>(rng() % b.size());
            switch (rng() % 6) {
                case 0:  // flip bits of one byte
                    b[pos] ^= static_cast<uint8_t>(1 + rng() % 255);
                    break;
                case 1: {  // an extreme u64 (counts, lengths, dims, offsets)
                    const uint64_t v = extremes[rng() % std::size(extremes)];
                    const size_t at = std::min(pos, b.size() - 8);
                    std::memcpy(b.data() + at, &v, 8);
                    break;
                }
                case 2: {  // an extreme u32 (types, n_dims, version)
                    const uint32_t v = static_cast<uint32_t>(extremes[rng() % std::size(extremes)]);
                    const size_t at = std::min(pos, b.size() - 4);
                    std::memcpy(b.data() + at, &v, 4);
                    break;
                }
                case 3: {  // insert bytes
                    const size_t n = 1 + rng() % 16;
                    std::vector<uint8_t> ins(n);
                    for (auto& x : ins) x = static_cast<uint8_t>(rng());
                    b.insert(b.begin() + static_cast<long>(pos), ins.begin(), ins.end());
                    break;
                }
                case 4: {  // delete bytes
                    const size_t n = std::min<size_t>(1 + rng() % 16, b.size() - pos);
                    b.erase(b.begin() + static_cast<long>(pos), b.begin() + static_cast<long>(pos + n));
                    break;
                }
                default:  // small change of a u8 (type tags, bools, lengths' low byte)
                    b[pos] = static_cast<uint8_t>(b[pos] + (rng() % 2 ? 1 : -1));
                    break;
            }
            if (b.size() < 8) break;
        }
        n_opened += open_and_walk(mem.set(b)) ? 1 : 0;
        if (::testing::Test::HasFailure()) {
            FAIL() << "mutation iteration " << it;
        }
    }
    // Some mutations hit tensor data or padding and still open; most must be rejected.
    EXPECT_GT(n_opened, 0);
    EXPECT_LT(n_opened, kIterations);
}

}  // namespace
}  // namespace kvec::gguf
