// Helpers for GGUF tests: a byte-level builder (independent of gguf::Writer, so tests can
// hand-make valid and broken files) and a per-test temporary directory.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace kvec::testing {

class Bytes {
public:
    Bytes& u8(uint8_t v) { return raw(&v, 1); }
    Bytes& u16(uint16_t v) { return raw(&v, 2); }
    Bytes& u32(uint32_t v) { return raw(&v, 4); }
    Bytes& i32(int32_t v) { return raw(&v, 4); }
    Bytes& u64(uint64_t v) { return raw(&v, 8); }
    Bytes& f32(float v) { return raw(&v, 4); }
    Bytes& f64(double v) { return raw(&v, 8); }
    Bytes& str(const std::string& s) {
        u64(s.size());
        return raw(s.data(), s.size());
    }
    Bytes& raw(const void* p, size_t n) {
        const auto* b = static_cast<const uint8_t*>(p);
        data.insert(data.end(), b, b + n);
        return *this;
    }
    Bytes& zeros(size_t n) {
        data.insert(data.end(), n, 0);
        return *this;
    }
    Bytes& pad_to(size_t alignment) {
        while (data.size() % alignment != 0) data.push_back(0);
        return *this;
    }
    // GGUF header: magic, version, tensor count, kv count.
    Bytes& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
        raw("GGUF", 4);
        u32(version);
        u64(n_tensors);
        return u64(n_kv);
    }
    // A key with a u32 value.
    Bytes& kv_u32(const std::string& key, uint32_t v) {
        str(key);
        u32(4);
        return u32(v);
    }
    Bytes& kv_string(const std::string& key, const std::string& v) {
        str(key);
        u32(8);
        return str(v);
    }
    // A tensor directory entry.
    Bytes& tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type,
                  uint64_t offset) {
        str(name);
        u32(static_cast<uint32_t>(dims.size()));
        for (uint64_t d : dims) u64(d);
        u32(type);
        return u64(offset);
    }
    size_t size() const { return data.size(); }

    std::vector<uint8_t> data;
};

inline void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(f.good()) << "cannot write " << path;
}

inline std::vector<uint8_t> read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// A fresh directory under the system temp dir, removed at the end of the test.
class TempDirTest : public ::testing::Test {
protected:
    void SetUp() override {
        std::string tmpl = (std::filesystem::temp_directory_path() / "kvec-test-XXXXXX").string();
        ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
        dir_ = tmpl;
    }
    void TearDown() override {
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
    }
    std::string path(const std::string& name) const { return dir_ + "/" + name; }

    std::string dir_;
};

}  // namespace kvec::testing
