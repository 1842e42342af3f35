// util/mapped_file.h: the bytes of a file, mapped or copied into 2 MiB-aligned anonymous memory.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gguf_test_util.h"
#include "util/error.h"
#include "util/mapped_file.h"

namespace kvec {
namespace {

using testing::TempDirTest;

class MappedFileTest : public TempDirTest {
protected:
    // 3 MiB and a tail: more than one huge page, a size that is not a multiple of the page.
    std::vector<uint8_t> random_bytes(size_t n = (size_t{3} << 20) + 12345) {
        std::mt19937 rng(7);
        std::vector<uint8_t> b(n);
        for (auto& x : b) x = static_cast<uint8_t>(rng());
        return b;
    }
};

TEST_F(MappedFileTest, EveryModeHoldsTheFileBytes) {
    const auto bytes = random_bytes();
    testing::write_file(path("f.bin"), bytes);
    for (LoadMode mode : {LoadMode::Map, LoadMode::Copy, LoadMode::Auto}) {
        SCOPED_TRACE(static_cast<int>(mode));
        const MappedFile f(path("f.bin"), mode);
        ASSERT_EQ(f.size(), bytes.size());
        ASSERT_NE(f.data(), nullptr);
        EXPECT_EQ(std::memcmp(f.data(), bytes.data(), bytes.size()), 0);
        EXPECT_EQ(f.path(), path("f.bin"));
        EXPECT_LE(f.huge_page_bytes(), f.size());
    }
}

TEST_F(MappedFileTest, CopyStartsOnAHugePageBoundary) {
    testing::write_file(path("f.bin"), random_bytes());
    const MappedFile map(path("f.bin"), LoadMode::Map);
    const MappedFile copy(path("f.bin"), LoadMode::Copy);
    EXPECT_FALSE(map.copied());
    EXPECT_TRUE(copy.copied());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(copy.data()) % (uintptr_t{2} << 20), 0u);
}

TEST_F(MappedFileTest, AutoCopiesWhereHugePagesAreOnAndTheFileFits) {
    const auto bytes = random_bytes();
    testing::write_file(path("f.bin"), bytes);
    const MappedFile f(path("f.bin"), LoadMode::Auto);
    EXPECT_EQ(f.copied(), transparent_huge_pages_available() && bytes.size() <= available_memory_bytes() / 2);
    EXPECT_GT(available_memory_bytes(), size_t{0});  // Linux: /proc/meminfo
}

TEST_F(MappedFileTest, EmptyFileHasNoBytes) {
    testing::write_file(path("empty"), {});
    for (LoadMode mode : {LoadMode::Map, LoadMode::Copy, LoadMode::Auto}) {
        const MappedFile f(path("empty"), mode);
        EXPECT_EQ(f.data(), nullptr);
        EXPECT_EQ(f.size(), 0u);
        EXPECT_EQ(f.huge_page_bytes(), 0u);
    }
}

TEST_F(MappedFileTest, MissingFileOrDirectoryNamesThePath) {
    for (LoadMode mode : {LoadMode::Map, LoadMode::Copy}) {
        try {
            MappedFile f(path("absent.gguf"), mode);
            FAIL() << "no error";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("absent.gguf"), std::string::npos) << e.what();
        }
        EXPECT_THROW(MappedFile(path(""), mode), Error);  // the directory itself
    }
}

TEST_F(MappedFileTest, MovingTransfersTheBytes) {
    const auto bytes = random_bytes(100000);
    testing::write_file(path("f.bin"), bytes);
    MappedFile a(path("f.bin"), LoadMode::Copy);
    MappedFile b(std::move(a));
    EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
    EXPECT_EQ(a.size(), 0u);
    EXPECT_FALSE(a.copied());
    ASSERT_EQ(b.size(), bytes.size());
    EXPECT_TRUE(b.copied());
    EXPECT_EQ(std::memcmp(b.data(), bytes.data(), bytes.size()), 0);
    MappedFile c(path("f.bin"), LoadMode::Map);
    c = std::move(b);
    EXPECT_TRUE(c.copied());
    EXPECT_EQ(std::memcmp(c.data(), bytes.data(), bytes.size()), 0);
}

}  // namespace
}  // namespace kvec
