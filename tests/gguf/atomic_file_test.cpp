// util/atomic_file.h: files replaced whole, never through a link, never over a device or FIFO,
// and the temporaries of interrupted writes found and removed.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gguf_test_util.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "error_of.h"

namespace kvec {
namespace {

namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void spit(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

using testing_support::error_of;

int entries(const std::string& dir) {
    int n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
    return n;
}

class AtomicFileTest : public testing::TempDirTest {};

TEST_F(AtomicFileTest, WritesAndReplacesWholeLeavingNoTemporary) {
    write_file_atomic(path("a.txt"), "first");
    EXPECT_EQ(slurp(path("a.txt")), "first");
    write_file_atomic(path("a.txt"), "second, longer");
    EXPECT_EQ(slurp(path("a.txt")), "second, longer");
    EXPECT_EQ(entries(dir_), 1);
    struct stat st {};
    ASSERT_EQ(::stat(path("a.txt").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST_F(AtomicFileTest, AbandonedWriteKeepsTheOldFile) {
    spit(path("a.txt"), "old");
    {
        AtomicFile f(path("a.txt"));
        f.write("half of the new");
        EXPECT_TRUE(fs::exists(f.temp_path()));
        EXPECT_TRUE(is_temporary_name(fs::path(f.temp_path()).filename().string()));
    }  // no commit: an error in between
    EXPECT_EQ(slurp(path("a.txt")), "old");
    EXPECT_EQ(entries(dir_), 1);
}

// The attack of issue 44: a link planted where the writer puts its temporary, or at the
// destination itself, must not redirect the write.
TEST_F(AtomicFileTest, PlantedLinksRedirectNothing) {
    spit(path("victim"), "precious");
    fs::create_symlink(path("victim"), path("doc.slot.part"));
    write_file_atomic(path("doc.slot"), "slot bytes");
    EXPECT_EQ(slurp(path("victim")), "precious");
    EXPECT_EQ(slurp(path("doc.slot")), "slot bytes");

    fs::create_symlink(path("victim"), path("link"));
    const std::string e = error_of([&] { write_file_atomic(path("link"), "x"); });
    EXPECT_NE(e.find("a symbolic link, not a regular file"), std::string::npos) << e;
    EXPECT_EQ(slurp(path("victim")), "precious");
    EXPECT_TRUE(fs::is_symlink(path("link")));
}

TEST_F(AtomicFileTest, RefusesDirectoriesFifosAndDevices) {
    fs::create_directory(path("d"));
    ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0644), 0);
    EXPECT_NE(error_of([&] { write_file_atomic(path("d"), "x"); }).find("a directory"), std::string::npos);
    EXPECT_NE(error_of([&] { write_file_atomic(path("fifo"), "x"); }).find("a FIFO"), std::string::npos);
    EXPECT_TRUE(fs::is_fifo(path("fifo")));
    // Only looked at (lstat), never written: safe to ask about a real device.
    EXPECT_NE(error_of([] { check_replaceable("/dev/null"); }).find("a device"), std::string::npos);
    EXPECT_EQ(entries(dir_), 2);  // no temporary was made for the refused writes
}

TEST_F(AtomicFileTest, StaleTemporariesAreRemovedAndNothingElse) {
    EXPECT_TRUE(is_temporary_name("doc.slot.tmp-a1B2c3"));
    EXPECT_TRUE(is_temporary_name("doc.slot.part"));
    EXPECT_FALSE(is_temporary_name(".part"));
    EXPECT_FALSE(is_temporary_name("doc.slot"));
    EXPECT_FALSE(is_temporary_name("doc.tmp-abc"));
    EXPECT_FALSE(is_temporary_name("tmp-abcdef"));
    spit(path("doc.slot.tmp-a1B2c3"), "x");
    spit(path("old.slot.part"), "x");
    spit(path("doc.slot"), "kept");
    spit(path("victim"), "kept");
    fs::create_symlink(path("victim"), path("link.part"));
    EXPECT_EQ(remove_stale_temporaries(dir_), 2);
    EXPECT_FALSE(fs::exists(path("doc.slot.tmp-a1B2c3")));
    EXPECT_FALSE(fs::exists(path("old.slot.part")));
    EXPECT_EQ(slurp(path("doc.slot")), "kept");
    EXPECT_TRUE(fs::is_symlink(path("link.part")));  // not a regular file: left alone
    EXPECT_EQ(slurp(path("victim")), "kept");
}

}  // namespace
}  // namespace kvec
